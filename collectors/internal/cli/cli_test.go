package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ccab-dev/ccab/collectors/config"
	"github.com/ccab-dev/ccab/internal/testvectors"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func testEnv(stdin string, vars map[string]string) (Env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return Env{
		Stdin:    strings.NewReader(stdin),
		Stdout:   &out,
		Stderr:   &errb,
		Getenv:   func(k string) string { return vars[k] },
		Now:      func() time.Time { return time.UnixMilli(1763769600000) },
		ReadFile: func(string) ([]byte, error) { return nil, errors.New("no /proc in tests") },
	}, &out, &errb
}

func run(env Env, args ...string) int {
	return Dispatch(context.Background(), env, "ccab-collector", []Command{ParseSS(), ParseNginx()}, args)
}

var hostArgs = []string{"--pop", "nrt1", "--host", "edge-1", "--kernel", "6.1.0-28-amd64", "--arm", "bbr",
	"--rollout-id", "r-2025-11", "--sample-rate", "0.25"}

// TestGolden runs the subcommands end to end over the recorded inputs and compares stdout and
// stderr with testdata/<name>.{stdout.jsonl,stderr.txt}; -update rewrites them.
func TestGolden(t *testing.T) {
	vectors := testvectors.Dir(t)
	ssArgs := append([]string{"parse-ss", "--ts-ms", "1763769600000", "--salt", "test-salt", "--boot-id", "b0"}, hostArgs...)
	nginxArgs := append([]string{"parse-nginx", "--cc", "bbr"}, hostArgs...)
	conf := read(t, "../../nginxlog/testdata/combined_tcpinfo.conf")
	type tc struct {
		name  string
		input string
		args  []string
		exit  int
	}
	cases := []tc{
		{"vector_ss_tinHOe", filepath.Join(vectors, "ss_tinHOe_iproute2-6.1.txt"), ssArgs, 0},
		{"vector_ss_tin", filepath.Join(vectors, "ss_tin_iproute2-6.1.txt"), ssArgs, 0},
		{"vector_nginx_json", filepath.Join(vectors, "nginx_ccab_json.log"), append(nginxArgs, "--format", "json"), 0},
		{"vector_nginx_ccab_format", filepath.Join(vectors, "nginx_ccab_json.log"), append(nginxArgs, "--format-name", "ccab"), 0},
		{"nginx_combined_tcpinfo", "../../nginxlog/testdata/combined_tcpinfo.log", append(nginxArgs, "--format", conf, "--format-name", "edge"), 0},
		{"nginx_ltsv", "../../nginxlog/testdata/ltsv.log", append(nginxArgs, "--format", conf, "--format-name", "ltsv"), 0},
		{"nginx_gcore_quoted", "../../nginxlog/testdata/gcore_quoted.log", append(nginxArgs, "--format", read(t, "../../nginxlog/testdata/gcore_quoted.conf")), 0},
		{"nginx_strict", "../../nginxlog/testdata/combined_tcpinfo.log", append(nginxArgs, "--format", conf, "--format-name", "edge", "--strict"), 1},
	}
	ssInputs, err := filepath.Glob("../../ss/testdata/*.txt")
	if err != nil || len(ssInputs) == 0 {
		t.Fatalf("no ss inputs: %v", err)
	}
	for _, in := range ssInputs {
		name := "ss_" + strings.TrimSuffix(filepath.Base(in), ".txt")
		exit := 0
		if strings.Contains(name, "errors") {
			exit = 1
		}
		cases = append(cases, tc{name, in, append(ssArgs, "--strict"), exit})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, out, errb := testEnv(read(t, c.input), nil)
			if got := run(env, c.args...); got != c.exit {
				t.Errorf("exit status %d, want %d; stderr:\n%s", got, c.exit, errb)
			}
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if line != "" && !json.Valid([]byte(line)) {
					t.Errorf("invalid JSON line: %s", line)
				}
			}
			golden(t, filepath.Join("testdata", c.name+".stdout.jsonl"), out.Bytes())
			golden(t, filepath.Join("testdata", c.name+".stderr.txt"), errb.Bytes())
		})
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		vars   map[string]string
		exit   int
		stderr string
	}{
		{nil, nil, ExitUsage, "usage: ccab-collector <command>"},
		{[]string{"nope"}, nil, ExitUsage, `unknown command "nope"`},
		{[]string{"parse-ss", "--sample-rate", "0"}, nil, ExitUsage, "--sample-rate 0 is not in (0, 1]"},
		{[]string{"parse-ss", "--bogus"}, nil, ExitUsage, "flag provided but not defined"},
		{[]string{"parse-ss", "file.txt"}, nil, ExitUsage, "unexpected arguments"},
		{[]string{"parse-ss"}, map[string]string{"CCAB_COLLECTOR_SAMPLE_RATE": "x"}, ExitUsage, "CCAB_COLLECTOR_SAMPLE_RATE"},
		{[]string{"parse-nginx"}, nil, ExitUsage, "--format or --format-name is required"},
		{[]string{"parse-nginx", "--format", "$remote_addr"}, nil, ExitOK, `ts_source "read"`},
		{[]string{"parse-nginx", "--format", "[$msec] [$http_user_agent] [$status] [$http_referer]"}, nil, ExitUsage, "ambiguous"},
		{[]string{"parse-nginx", "--format", "json", "--field-map", "a=nope"}, nil, ExitUsage, "field map"},
		{[]string{"parse-nginx", "--format", "combined", "--field-map", "a=b"}, nil, ExitUsage, "field map"},
		{[]string{"parse-nginx", "--format", "combined", "--syslog", "maybe"}, nil, ExitUsage, "syslog mode"},
		{[]string{"parse-ss", "-h"}, nil, ExitOK, "usage: ss -tinHOe"},
	} {
		env, _, errb := testEnv("", tc.vars)
		if got := run(env, tc.args...); got != tc.exit || !strings.Contains(errb.String(), tc.stderr) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.args, got, errb, tc.exit, tc.stderr)
		}
	}
	env, out, _ := testEnv("", nil)
	if got := run(env, "help"); got != ExitOK || !strings.Contains(out.String(), "parse-nginx") {
		t.Errorf("help: exit %d, stdout %q", got, out)
	}
}

// Flags not given on the command line come from CCAB_COLLECTOR_* variables (the one rule, as run); the command line wins.
func TestEnvFlags(t *testing.T) {
	in := read(t, filepath.Join(testvectors.Dir(t), "ss_tin_iproute2-6.1.txt"))
	env, out, errb := testEnv(in, map[string]string{"CCAB_COLLECTOR_POP": "fra2", "CCAB_COLLECTOR_HOST": "from-env",
		"CCAB_COLLECTOR_SALT": "s", "CCAB_COLLECTOR_TS_MS": "42"})
	if got := run(env, "parse-ss", "--host", "from-flag"); got != 0 {
		t.Fatalf("exit %d: %s", got, errb)
	}
	first := strings.SplitN(out.String(), "\n", 2)[0]
	for _, want := range []string{`"pop":"fra2"`, `"host":"from-flag"`, `"ts_ms":42`} {
		if !strings.Contains(first, want) {
			t.Errorf("%s lacks %s", first, want)
		}
	}
	if strings.Contains(errb.String(), "--salt is empty") {
		t.Error("salt from CCAB_COLLECTOR_SALT not used")
	}
}

// Without --ts-ms the sampling time is now, and without --salt there is a warning.
func TestDefaults(t *testing.T) {
	in := read(t, filepath.Join(testvectors.Dir(t), "ss_tin_iproute2-6.1.txt"))
	env, out, errb := testEnv(in, nil)
	if got := run(env, "parse-ss"); got != 0 {
		t.Fatalf("exit %d: %s", got, errb)
	}
	if !strings.Contains(out.String(), `"ts_ms":1763769600000`) || !strings.Contains(out.String(), `"sample_rate":1.0`) {
		t.Errorf("defaults not applied: %.300s", out)
	}
	if !strings.Contains(errb.String(), "--salt is empty") {
		t.Errorf("no salt warning: %s", errb)
	}
}

// One rule for the whole binary: the offline subcommands read the same CCAB_COLLECTOR_<FLAG>
// variables as run (config.EnvPrefix), and the usage text says so.
func TestEnvPrefixIsTheRunConfigsPrefix(t *testing.T) {
	if EnvPrefix != config.EnvPrefix {
		t.Fatalf("cli.EnvPrefix %q != config.EnvPrefix %q", EnvPrefix, config.EnvPrefix)
	}
	env, out, _ := testEnv("", nil)
	Dispatch(context.Background(), env, "ccab-collector", nil, []string{"--help"})
	if !strings.Contains(out.String(), "CCAB_COLLECTOR_<FLAG>") {
		t.Fatalf("usage does not name CCAB_COLLECTOR_<FLAG>: %s", out.String())
	}
}
