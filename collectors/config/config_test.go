package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPrecedenceFlagsOverEnvOverFileOverDefaults(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.json")
	os.WriteFile(file, []byte(`{"pop":"file-pop","host":"file-host","kernel":"file-kernel",
		"nginx":{"poll_interval":"1s","paths":["/a","/b"]},"spool":{"max_bytes":"64MiB"}}`), 0o644)
	env := map[string]string{
		"CCAB_COLLECTOR_CONFIG":        file,
		"CCAB_COLLECTOR_HOST":          "env-host",
		"CCAB_COLLECTOR_KERNEL":        "env-kernel",
		"CCAB_COLLECTOR_KAFKA_BROKERS": "e1:9092,e2:9092",
	}
	c, err := Load([]string{"--kernel", "flag-kernel", "--spool-full", "block"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct{ name, got, want string }{
		{"pop (file)", c.Pop, "file-pop"},
		{"host (env over file)", c.Host, "env-host"},
		{"kernel (flag over env)", c.Kernel, "flag-kernel"},
		{"spool.full (flag over default)", c.Spool.Full, "block"},
		{"topic (default)", c.Kafka.TopicHTTP, "ccab.http.v1"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %q, want %q", ch.name, ch.got, ch.want)
		}
	}
	if c.Nginx.PollInterval.Std() != time.Second || len(c.Nginx.Paths) != 2 || c.Spool.MaxBytes != 64<<20 {
		t.Errorf("file values not applied: %+v %+v", c.Nginx, c.Spool)
	}
	if len(c.Kafka.Brokers) != 2 || c.Kafka.Brokers[1] != "e2:9092" {
		t.Errorf("brokers from env = %v", c.Kafka.Brokers)
	}
}

func TestEveryFlagHasAnEnvVariable(t *testing.T) {
	// Each flag f is settable as CCAB_COLLECTOR_<F>: a bad value in every such variable
	// must be reported for the flags that parse values.
	c, err := Load(nil, func(k string) string {
		if k == "CCAB_COLLECTOR_NGINX_POLL_INTERVAL" {
			return "not-a-duration"
		}
		return ""
	}, io.Discard)
	if err == nil {
		t.Fatalf("bad env value accepted: %+v", c.Nginx)
	}
}

func TestUnknownKeysAreRefused(t *testing.T) {
	c := Default()
	if err := Decode([]byte(`{"nginx":{"pollinterval":"1s"}}`), &c); err == nil {
		t.Fatal("a misspelt key was accepted")
	}
}

func TestValidate(t *testing.T) {
	c := Default()
	c.Once = true
	if err := c.Validate(); err != nil || c.Reps != 1 {
		t.Fatalf("--once: err %v, reps %d", err, c.Reps)
	}
	c.SampleRate = 0
	if err := c.Validate(); err == nil {
		t.Fatal("sample rate 0 accepted")
	}
}

// An empty entry of --tcp-info-namespaces is the collector's own namespace (the sampler's
// ""), kept, not dropped: ",blue" samples the own namespace and blue.
func TestNamespacesEmptyEntryIsOwn(t *testing.T) {
	for _, tc := range []struct {
		flag string
		want []string
	}{
		{",blue", []string{"", "blue"}},
		{"blue, ", []string{"blue", ""}},
		{"blue,/proc/1/ns/net", []string{"blue", "/proc/1/ns/net"}},
		{"", nil},
	} {
		c, err := Load([]string{"--tcp-info-namespaces", tc.flag}, func(string) string { return "" }, io.Discard)
		if err == nil {
			err = c.Validate()
		}
		if err != nil || strings.Join(c.TCPInfo.Namespaces, "|") != strings.Join(tc.want, "|") || len(c.TCPInfo.Namespaces) != len(tc.want) {
			t.Errorf("--tcp-info-namespaces %q = %q, %v; want %q", tc.flag, c.TCPInfo.Namespaces, err, tc.want)
		}
	}
	env := map[string]string{"CCAB_COLLECTOR_TCP_INFO_NAMESPACES": ",blue"}
	if c, err := Load(nil, func(k string) string { return env[k] }, io.Discard); err != nil || len(c.TCPInfo.Namespaces) != 2 {
		t.Errorf("env ,blue = %q, %v", c.TCPInfo.Namespaces, err)
	}
	for _, bad := range []string{",", "blue,blue"} {
		c, err := Load([]string{"--tcp-info-namespaces", bad}, func(string) string { return "" }, io.Discard)
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), "twice") {
			t.Errorf("--tcp-info-namespaces %q: err %v, want a duplicate refused", bad, err)
		}
	}
}

func TestNginxFieldMapAndSyslog(t *testing.T) {
	c, err := Load([]string{"--nginx-field-map", "my_rtt=tcpinfo_rtt,up=tcpinfo_rttvar", "--nginx-syslog", "on"}, func(string) string { return "" }, io.Discard)
	if err != nil || c.Nginx.FieldMap["my_rtt"] != "tcpinfo_rtt" || c.Nginx.FieldMap["up"] != "tcpinfo_rttvar" || c.Nginx.Syslog != "on" {
		t.Fatalf("%+v, %v", c.Nginx, err)
	}
	if err := Decode([]byte(`{"nginx":{"field_map":{"a":"tcpinfo_rtt"},"syslog":"maybe"}}`), &c); err != nil || c.Nginx.FieldMap["a"] != "tcpinfo_rtt" {
		t.Fatalf("file: %+v, %v", c.Nginx, err)
	}
	if err := c.Validate(); err == nil {
		t.Fatal("syslog maybe accepted")
	}
}
