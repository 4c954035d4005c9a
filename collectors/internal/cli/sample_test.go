package cli

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/internal/testvectors"
)

// `sample --once` reads the sockets of the test's own namespace over netlink (no privilege
// needed): a loopback connection to a listener on a known port gives one record.
func TestSampleOnce(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback: %v", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("ping"))
	defer (<-accepted).Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	env, out, errb := testEnv("", map[string]string{"CCAB_COLLECTOR_PORT": port, "CCAB_COLLECTOR_POP": "nrt1"})
	status := Dispatch(context.Background(), env, "ccab-collector", []Command{Sample()},
		[]string{"sample", "--once", "--salt", "s", "--host", "edge-1", "--arm", "bbr"})
	if status != ExitOK {
		t.Fatalf("exit %d: %s", status, errb)
	}
	recs := testvectors.DecodeJSONL(t, out.Bytes())
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1 (the accepted socket on port %s):\n%s\n%s", len(recs), port, out, errb)
	}
	r := recs[0]
	for k, want := range map[string]string{"schema": "tcp_sample/1", "pop": "nrt1", "host": "edge-1", "arm": "bbr",
		"state": "ESTAB", "local_port": port, "peer_prefix": "127.0.0.0/24", "recv_q_bytes": "4"} {
		if got := toString(r[k]); got != want {
			t.Errorf("%s = %s, want %s", k, got, want)
		}
	}
	if toString(r["kernel"]) == "" || toString(r["cc"]) == "" || r["rtt_us"] == nil {
		t.Errorf("kernel, cc or rtt_us missing: %v", r)
	}
	if !strings.Contains(errb.String(), "sample: tick 1: 1 records of 1 sockets") {
		t.Errorf("stderr: %s", errb)
	}
}

func TestSampleUsage(t *testing.T) {
	for _, args := range [][]string{
		{"sample", "--port", "70000"},
		{"sample", "--sample-rate", "0"},
		{"sample", "--interval", "-1s"},
		{"sample", "stray"},
	} {
		env, _, errb := testEnv("", nil)
		if status := Dispatch(context.Background(), env, "ccab-collector", []Command{Sample()}, args); status != ExitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, status, ExitUsage, errb)
		}
	}
	env, _, errb := testEnv("", nil)
	if status := Dispatch(context.Background(), env, "ccab-collector", []Command{Sample()},
		[]string{"sample", "--once", "--netns", "ccab-no-such-namespace"}); status != ExitFailure ||
		!strings.Contains(errb.String(), "ccab-no-such-namespace") {
		t.Errorf("missing namespace: exit %d: %s", status, errb)
	}
}

func toString(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}
