package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ccab-dev/ccab/collectors/metrics"
)

// KafkaConfig is how the sink talks to Kafka.
type KafkaConfig struct {
	Brokers            []string
	ClientID           string
	Linger             time.Duration
	MaxBufferedRecords int           // franz-go's own bound; above the sink's MaxInflight
	DialTimeout        time.Duration // per connection attempt
	Topics             []string      // every topic the collector writes (read back after an unclean stop)
}

// NewKafkaClient returns the producer: idempotent (franz-go's default, which also means it
// retries a record without limit and fails it only when it knows it was not written),
// acks=all, zstd batches, records keyed by host and partitioned by the key's murmur2 hash
// like the Java client, so one host's records stay in order in one partition per topic.
func NewKafkaClient(cfg KafkaConfig, log *slog.Logger) (*kgo.Client, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("kafka: no brokers configured")
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()),
		kgo.ProducerLinger(cfg.Linger),
		kgo.MaxBufferedRecords(cfg.MaxBufferedRecords),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.DialTimeout(cfg.DialTimeout),
		kgo.WithLogger(kgoLogger{log.With("component", "franz-go")}),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka: new client for %v: %w", cfg.Brokers, err)
	}
	return cl, nil
}

// KafkaReadback reads back the records keyed key that reached cfg.Topics at or after a
// time, and returns their source positions (headers ccab-stream / ccab-pos).
func KafkaReadback(cfg KafkaConfig, key string, m *metrics.Metrics) Readback {
	return func(ctx context.Context, sinceMs int64) (*PosSet, error) {
		admCl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID(cfg.ClientID+"-readback"),
			kgo.DialTimeout(cfg.DialTimeout))
		if err != nil {
			return nil, fmt.Errorf("readback: client: %w", err)
		}
		defer admCl.Close()
		adm := kadm.NewClient(admCl)
		starts, err := adm.ListOffsetsAfterMilli(ctx, sinceMs, cfg.Topics...)
		if err == nil {
			err = starts.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("readback: list offsets after %d ms of %v: %w", sinceMs, cfg.Topics, err)
		}
		ends, err := adm.ListEndOffsets(ctx, cfg.Topics...)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("readback: list end offsets of %v: %w", cfg.Topics, err)
		}
		type tp struct {
			t string
			p int32
		}
		parts := map[string]map[int32]kgo.Offset{}
		left := map[tp]int64{}
		starts.Each(func(lo kadm.ListedOffset) {
			end, ok := ends.Lookup(lo.Topic, lo.Partition)
			if !ok || lo.Offset < 0 || lo.Offset >= end.Offset {
				return
			}
			if parts[lo.Topic] == nil {
				parts[lo.Topic] = map[int32]kgo.Offset{}
			}
			parts[lo.Topic][lo.Partition] = kgo.NewOffset().At(lo.Offset)
			left[tp{lo.Topic, lo.Partition}] = end.Offset
		})
		set := NewPosSet()
		if len(left) == 0 {
			return set, nil
		}
		cons, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID(cfg.ClientID+"-readback"),
			kgo.DialTimeout(cfg.DialTimeout), kgo.ConsumePartitions(parts),
			kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
		if err != nil {
			return nil, fmt.Errorf("readback: consumer: %w", err)
		}
		defer cons.Close()
		for len(left) > 0 {
			fetches := cons.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("readback: %d partitions not read to their end: %w", len(left), err)
			}
			var ferr error
			fetches.EachError(func(t string, p int32, err error) {
				ferr = fmt.Errorf("readback: fetch %s/%d: %w", t, p, err)
			})
			if ferr != nil {
				return nil, ferr
			}
			fetches.EachRecord(func(r *kgo.Record) {
				m.RecoveryScanned.Inc()
				k := tp{r.Topic, r.Partition}
				end, ok := left[k]
				if !ok {
					return
				}
				if string(r.Key) == key {
					var stream string
					pos, havePos := int64(0), false
					for _, h := range r.Headers {
						switch h.Key {
						case HeaderStream:
							stream = string(h.Value)
						case HeaderPos:
							if v, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
								pos, havePos = v, true
							}
						}
					}
					if stream != "" && havePos {
						set.Add(stream, pos)
					}
				}
				if r.Offset+1 >= end {
					delete(left, k)
				}
			})
		}
		return set, nil
	}
}

// kgoLogger sends franz-go's warnings and errors to slog.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		k.l.Error(msg, keyvals...)
	case kgo.LogLevelWarn:
		k.l.Warn(msg, keyvals...)
	default:
		k.l.Debug(msg, keyvals...)
	}
}
