package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ccab-dev/ccab/rollout/prefixset"
	"github.com/ccab-dev/ccab/rollout/status"
)

// KafkaConfig is how the agent talks to Kafka (always from its own network namespace).
type KafkaConfig struct {
	Brokers           []string
	AssignmentsTopic  string // compacted, key = host
	StatusTopic       string // key = host
	ClientID          string
	HeartbeatInterval time.Duration
	// MaxBufferedStatus bounds statuses waiting for Kafka; beyond it a new status is dropped
	// and counted (the agent never blocks on Kafka).
	MaxBufferedStatus int
	BackoffMin        time.Duration
	BackoffMax        time.Duration
}

func (c *KafkaConfig) defaults() {
	if c.ClientID == "" {
		c.ClientID = "ccab-agent"
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 30 * time.Second
	}
	if c.MaxBufferedStatus <= 0 {
		c.MaxBufferedStatus = 1000
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = 500 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 30 * time.Second
	}
}

// Run re-asserts the state file's algorithm, then reads the host's assignments from Kafka
// and applies them until ctx is done, sending a status after every attempt and a heartbeat
// every HeartbeatInterval. On start it reads the compacted topic from the beginning to its
// end and applies only the newest record keyed to the host. Kafka errors are retried with
// backoff and never touch the kernel. Run returns nil when ctx is done.
func (a *Agent) Run(ctx context.Context, kc KafkaConfig) error {
	kc.defaults()
	if len(kc.Brokers) == 0 {
		return errors.New("kafka: no brokers configured")
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(kc.Brokers...),
		kgo.ClientID(kc.ClientID),
		kgo.ConsumeTopics(kc.AssignmentsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.MaxBufferedRecords(kc.MaxBufferedStatus),
		kgo.RetryBackoffFn(func(n int) time.Duration { return backoff(n, kc.BackoffMin, kc.BackoffMax) }),
	)
	if err != nil {
		return fmt.Errorf("kafka: new client for %v: %w", kc.Brokers, err)
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = cl.Flush(fctx) // best effort: deliver the last statuses
		cl.Close()
	}()
	send := func(s status.Status) {
		a.send(cl, kc.StatusTopic, s)
	}

	if s, changed, err := a.Reassert(); err != nil {
		a.log.Error("re-assert state file", "err", err)
	} else if changed {
		send(s)
	}
	send(a.Heartbeat())

	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		t := time.NewTicker(kc.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				send(a.Heartbeat())
			}
		}
	}()
	defer func() { <-hbDone }()

	// Catch up: the end offsets of every partition, retried until Kafka answers.
	ends, err := a.endOffsets(ctx, cl, kc)
	if err != nil {
		return nil // ctx done
	}
	var cu CatchUp
	caughtUp := func(pos map[int32]int64) bool {
		for p, end := range ends {
			if pos[p] < end {
				return false
			}
		}
		return true
	}
	pos := map[int32]int64{}
	live := caughtUp(pos)
	if live {
		a.log.Info("assignments topic is empty; waiting for records", "topic", kc.AssignmentsTopic)
	}
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		ok := true
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			ok = false
			a.m.Errors.WithLabelValues("kafka_consume").Inc()
			a.log.Warn("kafka fetch", "topic", t, "partition", p, "err", err)
		})
		if ok && !fs.Empty() {
			a.m.KafkaUp.Set(1)
		} else if !ok {
			a.m.KafkaUp.Set(0)
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos[r.Partition] = r.Offset + 1
			if string(r.Key) != a.cfg.Host || r.Value == nil { // other hosts; tombstones
				return
			}
			if live {
				a.handle(r.Value, send)
			} else {
				cu.Add(a, r.Value)
			}
		})
		if !live && caughtUp(pos) {
			live = true
			a.log.Info("caught up with the assignments topic", "topic", kc.AssignmentsTopic, "found", cu.Found())
			cu.Finish(func(raw []byte) { a.handle(raw, send) })
		}
	}
	return nil
}

// CatchUp is what the agent keeps while it reads the compacted assignments topic to its end
// at start: the newest record for the host that passes every check that needs no kernel
// (size, shape, signature, host, generation rule), and a newer one that does not. So a bad
// record last on the topic cannot hide the controller's newest good one from a restarting
// agent (it ends where a running agent would have: the good one applied, the bad one
// refused), and intermediate generations are still never replayed.
type CatchUp struct {
	apply, reject []byte
}

// Add takes the next record (in offset order) keyed to the host.
func (c *CatchUp) Add(a *Agent, raw []byte) {
	if a.Admissible(raw) {
		c.apply, c.reject = raw, nil
	} else {
		c.reject = raw
	}
}

// Found reports whether any record was added.
func (c *CatchUp) Found() bool { return c.apply != nil || c.reject != nil }

// Finish hands the kept records to handle, oldest first, and forgets them.
func (c *CatchUp) Finish(handle func([]byte)) {
	for _, raw := range [][]byte{c.apply, c.reject} {
		if raw != nil {
			handle(raw)
		}
	}
	c.apply, c.reject = nil, nil
}

func (a *Agent) handle(raw []byte, send func(status.Status)) {
	out, s := a.Apply(raw)
	if out != Stale {
		send(s)
	}
}

// endOffsets lists the end offset of each partition of the assignments topic, retrying
// with backoff until Kafka answers or ctx is done.
func (a *Agent) endOffsets(ctx context.Context, cl *kgo.Client, kc KafkaConfig) (map[int32]int64, error) {
	adm := kadm.NewClient(cl)
	for n := 0; ; n++ {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := adm.ListEndOffsets(lctx, kc.AssignmentsTopic)
		cancel()
		if err == nil {
			err = res.Error()
		}
		if err == nil {
			ends := map[int32]int64{}
			res.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
			if len(ends) > 0 {
				a.m.KafkaUp.Set(1)
				return ends, nil
			}
			err = fmt.Errorf("topic %s has no partitions", kc.AssignmentsTopic)
		}
		a.m.KafkaUp.Set(0)
		a.m.Errors.WithLabelValues("kafka_consume").Inc()
		d := backoff(n, kc.BackoffMin, kc.BackoffMax)
		a.log.Warn("kafka: list end offsets; keeping the applied state and retrying", "topic", kc.AssignmentsTopic,
			"err", err, "retry_in", d)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(d):
		}
	}
}

// send queues a status without blocking; a full buffer drops it (counted).
func (a *Agent) send(cl *kgo.Client, topic string, s status.Status) {
	r := &kgo.Record{Topic: topic, Key: []byte(a.cfg.Host), Value: status.Encode(s)}
	state := s.State
	cl.TryProduce(context.Background(), r, func(_ *kgo.Record, err error) {
		switch {
		case err == nil:
			a.m.StatusSent.WithLabelValues(state).Inc()
		case errors.Is(err, kgo.ErrMaxBuffered):
			a.m.StatusDropped.WithLabelValues("buffer_full").Inc()
		default:
			a.m.StatusDropped.WithLabelValues("produce_failed").Inc()
			a.m.Errors.WithLabelValues("kafka_produce").Inc()
			a.log.Warn("kafka: status not delivered", "state", state, "err", err)
		}
	})
}

func backoff(n int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 0; i < n && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// KafkaPrefixSets reads prefix_set/1 chunks from the compacted topic ccab.prefix_sets.v1
// (key name/version/chunk). Each Fetch reads the topic from its start to the end offsets it
// found when called (the controller publishes a set, acknowledged by every replica, before
// the assignments naming it), keeping the records of one name and version.
type KafkaPrefixSets struct {
	Brokers  []string
	Topic    string
	ClientID string
}

// Fetch returns the raw records keyed name/version/* in partition and offset order.
func (k KafkaPrefixSets) Fetch(ctx context.Context, name string, version int64) ([][]byte, error) {
	id := k.ClientID
	if id == "" {
		id = "ccab-agent-prefix-sets"
	}
	adm, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ClientID(id))
	if err != nil {
		return nil, fmt.Errorf("kafka: new client for %v: %w", k.Brokers, err)
	}
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, k.Topic)
	adm.Close()
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: end offsets of %s: %w", k.Topic, err)
	}
	want := map[int32]int64{}
	start := map[string]map[int32]kgo.Offset{k.Topic: {}}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			start[k.Topic][o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ClientID(id), kgo.ConsumePartitions(start),
		kgo.FetchMaxBytes(32<<20))
	if err != nil {
		return nil, fmt.Errorf("kafka: new client for %v: %w", k.Brokers, err)
	}
	defer cl.Close()
	prefix := prefixset.KeyPrefix(name, version)
	// the newest record of each key, as compaction keeps it (a key written twice before the
	// cleaner ran is held once), in the order the keys first appeared
	latest, order := map[string][]byte{}, []string{}
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("kafka: reading %s: %w (%d partition(s) not read to the end)", k.Topic, err, len(want))
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, fmt.Errorf("kafka: reading %s: %w", k.Topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; ok {
				if r.Offset+1 >= end {
					delete(want, r.Partition)
				}
				if r.Offset < end && strings.HasPrefix(string(r.Key), prefix) {
					k := string(r.Key)
					if _, seen := latest[k]; !seen {
						order = append(order, k)
					}
					latest[k] = r.Value // a tombstone (nil) removes the chunk
				}
			}
		})
		if len(order) > prefixset.MaxChunks {
			return nil, fmt.Errorf("prefix set %s version %d: more than %d keys on %s", name, version, prefixset.MaxChunks, k.Topic)
		}
	}
	var out [][]byte
	for _, key := range order {
		if v := latest[key]; v != nil {
			out = append(out, v)
		}
	}
	return out, nil
}
