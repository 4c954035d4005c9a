package config

import (
	"io"
	"os"
	"path/filepath"
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
