package agent_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ccab-dev/ccab/internal/netnstest"
	"github.com/ccab-dev/ccab/rollout/agent"
	"github.com/ccab-dev/ccab/rollout/internal/testkit"
	"github.com/ccab-dev/ccab/rollout/status"
)

// brokers returns CCAB_KAFKA_BROKERS, or the local broker of `ccab kafka up` if it answers,
// or skips the test.
func brokers(t *testing.T) []string {
	t.Helper()
	if b := os.Getenv("CCAB_KAFKA_BROKERS"); b != "" {
		return strings.Split(b, ",")
	}
	const local = "127.0.0.1:19092"
	c, err := net.DialTimeout("tcp", local, 2*time.Second)
	if err != nil {
		t.Skipf("needs a Kafka broker: CCAB_KAFKA_BROKERS is unset and none answers at %s "+
			"(start one with `.venv/bin/ccab kafka up`): %v", local, err)
	}
	c.Close()
	return []string{local}
}

func topics(t *testing.T, bs []string) (string, string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	tag := netnstest.Tag()
	asg, st := "test.ccab.assignments."+tag, "test.ccab.agent_status."+tag
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	compact := "compact"
	if _, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{"cleanup.policy": &compact}, asg); err != nil {
		t.Fatalf("create %s: %v", asg, err)
	}
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, st); err != nil {
		t.Fatalf("create %s: %v", st, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, asg, st)
	})
	return asg, st
}

func produce(t *testing.T, bs []string, topic, key string, value []byte) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bs...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: value}).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// statuses collects the status topic in the background.
type statuses struct {
	mu  sync.Mutex
	all []status.Status
}

func watch(t *testing.T, bs []string, topic string) *statuses {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	w := &statuses{}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				var s status.Status
				if json.Unmarshal(r.Value, &s) == nil {
					w.mu.Lock()
					w.all = append(w.all, s)
					w.mu.Unlock()
				}
			})
		}
	}()
	return w
}

// wait polls until a status matches (generous deadline; no timing assertion).
func (w *statuses) wait(t *testing.T, what string, match func(status.Status) bool) status.Status {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		for _, s := range w.all {
			if match(s) {
				w.mu.Unlock()
				return s
			}
		}
		w.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Fatalf("no status %s within 60 s; got %+v", what, w.all)
	return status.Status{}
}

func (w *statuses) count(match func(status.Status) bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.all {
		if match(s) {
			n++
		}
	}
	return n
}

func is(state string, gen int64) func(status.Status) bool {
	return func(s status.Status) bool { return s.State == state && s.Generation == gen && s.Host == "edge-test-1" }
}

// With a real broker: on start the agent reads the compacted topic to its end and applies
// only the newest record for its host; later records are applied, refused or ignored; a
// restarted agent re-sends its status without flipping anything.
func TestKafkaAgent(t *testing.T) {
	bs := brokers(t)
	l := newLab(t)
	asgTopic, stTopic := topics(t, bs)
	w := watch(t, bs, stTopic)
	stateFile := filepath.Join(t.TempDir(), "state.json")
	kc := agent.KafkaConfig{Brokers: bs, AssignmentsTopic: asgTopic, StatusTopic: stTopic,
		HeartbeatInterval: 300 * time.Millisecond, BackoffMax: time.Second}

	produce(t, bs, asgTopic, "edge-test-1", testkit.Sign(t, rec(1, "reno", nil)))
	produce(t, bs, asgTopic, "edge-other", testkit.Sign(t, testkit.Record{RolloutID: "x", Generation: 9, Host: "edge-other", CC: "reno"}))
	produce(t, bs, asgTopic, "edge-test-1", testkit.Sign(t, rec(2, "bbr", nil)))

	start := func() (context.CancelFunc, chan struct{}) {
		a := newAgent(t, l, stateFile)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = a.Run(ctx, kc) }()
		return cancel, done
	}
	cancel, done := start()
	s := w.wait(t, "applied gen 2", is(status.Applied, 2))
	if s.CCEffective != "bbr" || nsCC(t, l.host) != "bbr" {
		t.Errorf("applied gen 2: %+v, namespace %s", s, nsCC(t, l.host))
	}
	if n := w.count(is(status.Applied, 1)); n != 0 {
		t.Errorf("generation 1 was applied on start (%d statuses); only the newest record should be", n)
	}
	w.wait(t, "heartbeat gen 2", is(status.Heartbeat, 2))

	produce(t, bs, asgTopic, "edge-test-1", testkit.Sign(t, rec(3, "bbr2", nil)))
	s = w.wait(t, "refused gen 3", is(status.Refused, 3))
	if !strings.Contains(s.Reason, "not available") || s.CCEffective != "bbr" {
		t.Errorf("bbr2: %+v", s)
	}
	produce(t, bs, asgTopic, "edge-test-1", testkit.Sign(t, rec(2, "cubic", nil))) // stale
	produce(t, bs, asgTopic, "edge-test-1", testkit.Sign(t, rec(4, "cubic", nil)))
	w.wait(t, "applied gen 4", is(status.Applied, 4))
	if nsCC(t, l.host) != "cubic" {
		t.Errorf("namespace runs %s after gen 4, want cubic", nsCC(t, l.host))
	}
	if n := w.count(func(s status.Status) bool {
		return s.Generation == 2 && s.CCEffective == "cubic" && s.State != status.Heartbeat
	}); n != 0 {
		t.Errorf("stale generation 2 produced %d statuses", n)
	}
	cancel()
	<-done

	// Restart: the newest record (gen 4) equals the state file: status re-sent, no flip.
	before := w.count(is(status.Applied, 4))
	setCC(t, l.host, "cubic")
	cancel, done = start()
	defer func() { cancel(); <-done }()
	w.wait(t, "re-sent applied gen 4", func(s status.Status) bool {
		return is(status.Applied, 4)(s) && w.countLocked(is(status.Applied, 4)) > before
	})
	if nsCC(t, l.host) != "cubic" {
		t.Errorf("restart changed the namespace to %s", nsCC(t, l.host))
	}
}

// countLocked counts while w.mu is held (used inside wait's match).
func (w *statuses) countLocked(match func(status.Status) bool) int {
	n := 0
	for _, s := range w.all {
		if match(s) {
			n++
		}
	}
	return n
}
