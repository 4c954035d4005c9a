// Package config is the configuration of `ccab-collector run`: a JSON file, environment
// variables CCAB_COLLECTOR_<FLAG> and flags, with precedence flags > env > file > defaults.
//
// JSON, because it needs nothing beyond the standard library and is what the rest of ccab
// writes; unknown keys are an error (a typo must not silently fall back to a default).
// Durations are strings ("250ms", "5s"), sizes are integers of bytes or strings with a
// unit ("16MiB", "1GiB").
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ccab-dev/ccab/collectors/nginxlog"
	"github.com/ccab-dev/ccab/collectors/sink"
	"github.com/ccab-dev/ccab/collectors/tailer"
)

// EnvPrefix prefixes the environment variable of every flag.
const EnvPrefix = "CCAB_COLLECTOR_"

// Config is everything `run` needs. JSON keys are the file's.
type Config struct {
	Pop              string   `json:"pop"`
	Host             string   `json:"host"`   // default: os.Hostname()
	Kernel           string   `json:"kernel"` // default: uname -r
	SampleRate       float64  `json:"sample_rate"`
	StateDir         string   `json:"state_dir"`
	RolloutStateFile string   `json:"rollout_state_file"`
	ProcFS           string   `json:"procfs"`
	CCNetns          string   `json:"cc_netns"` // network namespace whose default cc is the host's ("" = own)
	MetricsAddr      string   `json:"metrics_addr"`
	LogLevel         string   `json:"log_level"`
	LogFormat        string   `json:"log_format"`
	Output           string   `json:"output"` // kafka, stdout, discard
	Reps             int      `json:"-"`      // polls of each source, 0 = until stopped
	Once             bool     `json:"-"`      // --once: Reps = 1
	Nginx            Nginx    `json:"nginx"`
	TCPInfo          TCPInfo  `json:"tcp_info"`
	CloseCapture     CloseCap `json:"close_capture"`
	SSReplay         SSReplay `json:"ss_replay"`
	Kafka            Kafka    `json:"kafka"`
	Queue            Queue    `json:"queue"`
	Spool            Spool    `json:"spool"`
	Recovery         Recovery `json:"recovery"`
}

// Nginx configures the access-log tailer.
type Nginx struct {
	Enabled            bool              `json:"enabled"`
	Paths              []string          `json:"paths"`
	Format             string            `json:"format"`      // json, a predefined name, or log_format text
	FormatName         string            `json:"format_name"` // which log_format directive of Format
	Syslog             string            `json:"syslog"`      // auto, on, off: syslog headers before lines
	FieldMap           map[string]string `json:"field_map"`   // log_format variable → variable whose field it fills
	PollInterval       Duration          `json:"poll_interval"`
	GlobInterval       Duration          `json:"glob_interval"`
	RotateGrace        Duration          `json:"rotate_grace"`
	CheckpointInterval Duration          `json:"checkpoint_interval"`
	StartAt            string            `json:"start_at"`
	MaxLineBytes       Size              `json:"max_line_bytes"`
	BatchLines         int               `json:"batch_lines"`
}

// TCPInfo configures the netlink sampler (collectors/sampler).
type TCPInfo struct {
	Enabled       bool     `json:"enabled"`
	Interval      Duration `json:"interval"`
	Salt          string   `json:"salt"`
	SampleRate    float64  `json:"sample_rate"`
	LocalPorts    []string `json:"local_ports"`
	Namespaces    []string `json:"namespaces"`
	MinBytesAcked int64    `json:"min_bytes_acked"`
	MaxPerTick    int      `json:"max_per_tick"`
}

// CloseCap configures the close-time capture (collectors/closecap): tcp_conn/1 records
// from the kernel's TCP destroy broadcasts. It runs when tcp_info.enabled and this are on,
// with tcp_info's salt, sample rate, local ports and namespaces.
type CloseCap struct {
	Enabled   bool     `json:"enabled"`
	RcvBuf    Size     `json:"rcvbuf"`     // receive buffer per namespace (SO_RCVBUFFORCE, else SO_RCVBUF)
	BPFFilter bool     `json:"bpf_filter"` // attach the in-kernel classic BPF filter
	Coalesce  Duration `json:"coalesce"`   // a reader wakes at most once per this
	// SockPolicyPinDir is ccab-agent's --sockpolicy-pin-dir: records get policy_generation
	// from the socket policy's per-connection map there. "": none.
	SockPolicyPinDir string `json:"sockpolicy_pin_dir"`
}

// SSReplay configures the replay of recorded `ss -tinHOe` snapshots (collectors/ssreplay):
// a directory of <ts_ms>.txt files, such as `ccab sim --raw` writes per host. On when Dir
// is set. sock_id is keyed by tcp_info.salt, as for the netlink sampler.
type SSReplay struct {
	Dir              string   `json:"dir"`
	Interval         Duration `json:"interval"`           // between looks for new snapshots (without --once)
	SampleRate       float64  `json:"sample_rate"`        // fraction of each snapshot's sockets kept; 1: all
	SourceSampleRate float64  `json:"source_sample_rate"` // rate at which the files' sockets were selected upstream
	State            string   `json:"state"`              // state of sockets printed without a State column
}

// Kafka configures the producer.
type Kafka struct {
	Brokers         []string `json:"brokers"`
	TopicTCP        string   `json:"topic_tcp"`
	TopicHTTP       string   `json:"topic_http"`
	TopicConn       string   `json:"topic_conn"`
	ClientID        string   `json:"client_id"`
	Linger          Duration `json:"linger"`
	MaxInflight     int      `json:"max_inflight_records"`
	StallTimeout    Duration `json:"stall_timeout"`
	RetryBackoff    Duration `json:"retry_backoff"`
	ShutdownTimeout Duration `json:"shutdown_timeout"`
	DialTimeout     Duration `json:"dial_timeout"`
}

// Queue configures the in-memory queue between sources and sink.
type Queue struct {
	MaxRecords int `json:"max_records"`
}

// Spool configures the disk spool.
type Spool struct {
	Dir           string   `json:"dir"` // default <state_dir>/spool
	SegmentBytes  Size     `json:"segment_bytes"`
	MaxBytes      Size     `json:"max_bytes"`
	FsyncInterval Duration `json:"fsync_interval"`
	Full          string   `json:"full"` // shed or block
	ReplayChunk   int      `json:"replay_chunk"`
}

// Recovery configures the read-back from Kafka after an unclean stop.
type Recovery struct {
	Lookback Duration `json:"lookback"`
	Timeout  Duration `json:"timeout"`
}

// Default is the configuration before the file, env and flags.
func Default() Config {
	return Config{
		SampleRate:       1,
		StateDir:         "/var/lib/ccab-collector",
		RolloutStateFile: "/var/lib/ccab-agent/state.json",
		ProcFS:           "/proc",
		MetricsAddr:      "127.0.0.1:9464",
		LogLevel:         "info",
		LogFormat:        "text",
		Output:           "kafka",
		Nginx: Nginx{
			Enabled: true, Paths: []string{"/var/log/nginx/access.log"}, Format: "json", Syslog: "auto",
			PollInterval: D(250 * time.Millisecond), GlobInterval: D(5 * time.Second),
			RotateGrace: D(5 * time.Second), CheckpointInterval: D(5 * time.Second),
			StartAt: tailer.StartBeginning, MaxLineBytes: 1 << 20, BatchLines: 1024,
		},
		TCPInfo:      TCPInfo{Enabled: false, Interval: D(10 * time.Second), SampleRate: 1, MaxPerTick: 20000},
		CloseCapture: CloseCap{Enabled: true, RcvBuf: 16 << 20, BPFFilter: true, Coalesce: D(50 * time.Millisecond)},
		SSReplay:     SSReplay{Interval: D(10 * time.Second), SampleRate: 1, SourceSampleRate: 1, State: "ESTAB"},
		Kafka: Kafka{
			Brokers: []string{"127.0.0.1:19092"}, TopicTCP: "ccab.tcp.v1", TopicHTTP: "ccab.http.v1", TopicConn: "ccab.tcp_conn.v1",
			ClientID: "ccab-collector", Linger: D(10 * time.Millisecond), MaxInflight: 20000,
			StallTimeout: D(5 * time.Second), RetryBackoff: D(2 * time.Second),
			ShutdownTimeout: D(10 * time.Second), DialTimeout: D(5 * time.Second),
		},
		Queue: Queue{MaxRecords: 100000},
		Spool: Spool{SegmentBytes: 16 << 20, MaxBytes: 1 << 30, FsyncInterval: D(time.Second),
			Full: string(sink.FullShed), ReplayChunk: 2000},
		Recovery: Recovery{Lookback: D(time.Minute), Timeout: D(time.Minute)},
	}
}

// Duration is a time.Duration written as a string in JSON ("250ms").
type Duration time.Duration

// D converts a time.Duration.
func D(d time.Duration) Duration { return Duration(d) }

// Std is the time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// MarshalJSON writes "250ms".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "250ms" (or a number of nanoseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("duration: want a string like \"5s\": %w", err)
		}
		*d = Duration(n)
		return nil
	}
	return d.Set(s)
}

// Set implements flag.Value.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

func (d *Duration) String() string { return time.Duration(*d).String() }

// Size is a byte count; text may carry a unit (k, M, G: powers of 10; KiB, MiB, GiB: of 2).
type Size int64

// UnmarshalJSON reads 16777216 or "16MiB".
func (s *Size) UnmarshalJSON(b []byte) error {
	var n int64
	if err := json.Unmarshal(b, &n); err == nil {
		*s = Size(n)
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return errors.New("size: want a number of bytes or a string like \"16MiB\"")
	}
	return s.Set(str)
}

// Set implements flag.Value.
func (s *Size) Set(text string) error {
	text = strings.TrimSpace(text)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(text, u.suffix) {
			text, mult = strings.TrimSpace(strings.TrimSuffix(text, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("size %q: want a non-negative integer with an optional unit (KiB, MiB, GiB, k, M, G)", text)
	}
	*s = Size(n * mult)
	return nil
}

func (s *Size) String() string { return strconv.FormatInt(int64(*s), 10) }

// nsListValue is a comma-separated list of network namespaces in which an empty entry is
// kept: "" is the collector's own namespace (",blue" samples the own one and blue).
type nsListValue struct{ p *[]string }

func (l nsListValue) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		*l.p = nil // the default: the own namespace
		return nil
	}
	var out []string
	for _, x := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(x))
	}
	*l.p = out
	return nil
}

func (l nsListValue) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

// fieldMapValue is "var=field_var,…" (nginxlog.ParseFieldMap).
type fieldMapValue struct{ p *map[string]string }

func (v fieldMapValue) Set(s string) error {
	m, err := nginxlog.ParseFieldMap(s)
	if err != nil {
		return err
	}
	*v.p = m
	return nil
}

func (v fieldMapValue) String() string {
	if v.p == nil || len(*v.p) == 0 {
		return ""
	}
	var parts []string
	for k, x := range *v.p {
		parts = append(parts, k+"="+x)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

type listValue struct{ p *[]string }

func (l listValue) Set(s string) error {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	*l.p = out
	return nil
}

func (l listValue) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

// bind registers one flag per setting, each writing into c.
func (c *Config) bind(fs *flag.FlagSet) {
	fs.StringVar(&c.Pop, "pop", c.Pop, "PoP the host belongs to")
	fs.StringVar(&c.Host, "host", c.Host, "host name, also the Kafka key (default: the OS host name)")
	fs.StringVar(&c.Kernel, "kernel", c.Kernel, "kernel release (default: uname -r)")
	fs.Float64Var(&c.SampleRate, "sample-rate", c.SampleRate, "probability with which each http record was sampled, in (0, 1]")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "`dir` for the checkpoint, the spool and sink state")
	fs.StringVar(&c.RolloutStateFile, "rollout-state-file", c.RolloutStateFile, "the rollout agent's state `file` ({\"rollout_id\",\"arm\",\"cc\",\"generation\"})")
	fs.StringVar(&c.ProcFS, "path-procfs", c.ProcFS, "procfs mount point")
	fs.StringVar(&c.CCNetns, "cc-netns", c.CCNetns, "network namespace `name or path` whose net.ipv4.tcp_congestion_control is the host's default cc (default: the collector's own; set it when the host is a namespace, as in the lab)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "`host:port` of /metrics (\"\" disables)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text or json")
	fs.StringVar(&c.Output, "output", c.Output, "kafka, stdout (JSON lines, for debugging) or discard (benchmarks)")
	fs.IntVar(&c.Reps, "reps", c.Reps, "polls of each source before a graceful stop (0: until SIGTERM)")
	fs.BoolVar(&c.Once, "once", c.Once, "one poll of each source, then a graceful stop (--reps 1)")

	fs.BoolVar(&c.Nginx.Enabled, "nginx-enabled", c.Nginx.Enabled, "tail nginx access logs")
	fs.Var(listValue{&c.Nginx.Paths}, "nginx-paths", "comma-separated glob `patterns` of access logs (the live file, not rotated ones)")
	fs.StringVar(&c.Nginx.Format, "nginx-format", c.Nginx.Format, "json, a predefined name (combined, ccab), or log_format text / directives")
	fs.StringVar(&c.Nginx.FormatName, "nginx-format-name", c.Nginx.FormatName, "which log_format directive of --nginx-format to use")
	fs.StringVar(&c.Nginx.Syslog, "nginx-syslog", c.Nginx.Syslog, "syslog header before each line (nginx's access_log syslog:…): auto (strip it from lines starting with <PRI>), on (every line has one), off")
	fs.Var(fieldMapValue{&c.Nginx.FieldMap}, "nginx-field-map", "comma-separated `var=field_var`: read a log_format variable as another, e.g. my_rtt=tcpinfo_rtt,upstream_tcpinfo_rtt=tcpinfo_rtt")
	fs.Var(&c.Nginx.PollInterval, "nginx-poll-interval", "how often files are read")
	fs.Var(&c.Nginx.GlobInterval, "nginx-glob-interval", "how often glob patterns are evaluated again")
	fs.Var(&c.Nginx.RotateGrace, "nginx-rotate-grace", "keep reading a rotated-away file until it was idle this long")
	fs.Var(&c.Nginx.CheckpointInterval, "nginx-checkpoint-interval", "write the checkpoint at most this often")
	fs.StringVar(&c.Nginx.StartAt, "nginx-start-at", c.Nginx.StartAt, "beginning or end: where to start files found at the first poll without a checkpoint")
	fs.Var(&c.Nginx.MaxLineBytes, "nginx-max-line-bytes", "longer lines are skipped and counted")
	fs.IntVar(&c.Nginx.BatchLines, "nginx-batch-lines", c.Nginx.BatchLines, "lines per batch handed to the sink")

	fs.BoolVar(&c.TCPInfo.Enabled, "tcp-info-enabled", c.TCPInfo.Enabled, "sample tcp_info of established sockets over netlink")
	fs.Var(&c.TCPInfo.Interval, "tcp-info-interval", "sampling interval")
	fs.StringVar(&c.TCPInfo.Salt, "tcp-info-salt", c.TCPInfo.Salt, "fleet-wide secret for sock_id")
	fs.Float64Var(&c.TCPInfo.SampleRate, "tcp-info-sample-rate", c.TCPInfo.SampleRate, "fraction of connections sampled, in (0, 1]")
	fs.Var(listValue{&c.TCPInfo.LocalPorts}, "tcp-info-local-ports", "comma-separated local ports to sample (empty: any)")
	fs.Var(nsListValue{&c.TCPInfo.Namespaces}, "tcp-info-namespaces", "comma-separated netns names or paths; an empty entry is the collector's own namespace (\",blue\": own and blue; default: own only)")
	fs.Int64Var(&c.TCPInfo.MinBytesAcked, "tcp-info-min-bytes-acked", c.TCPInfo.MinBytesAcked, "only connections with at least this many bytes acked (0: any)")
	fs.IntVar(&c.TCPInfo.MaxPerTick, "tcp-info-max-per-tick", c.TCPInfo.MaxPerTick, "records per tick at most")

	fs.BoolVar(&c.CloseCapture.Enabled, "close-capture", c.CloseCapture.Enabled, "with --tcp-info-enabled: one tcp_conn/1 record per sampled connection when it closes (sock_diag destroy events)")
	fs.Var(&c.CloseCapture.RcvBuf, "close-capture-rcvbuf", "receive buffer of each destroy listener (SO_RCVBUFFORCE, else SO_RCVBUF up to net.core.rmem_max)")
	fs.Var(&c.CloseCapture.Coalesce, "close-capture-coalesce", "read destroy events at most once per this (they queue in the socket meanwhile); 0 or negative: at every event")
	fs.BoolVar(&c.CloseCapture.BPFFilter, "close-capture-bpf", c.CloseCapture.BPFFilter, "drop unconnected sockets and other local ports in the kernel (classic BPF)")
	fs.StringVar(&c.CloseCapture.SockPolicyPinDir, "close-capture-sockpolicy-pin-dir", c.CloseCapture.SockPolicyPinDir, "ccab-agent's --sockpolicy-pin-dir: tcp_conn/1 records of connections a socket policy decided carry its policy_generation (empty: none)")

	fs.StringVar(&c.SSReplay.Dir, "ss-replay-dir", c.SSReplay.Dir, "replay the `dir` of ss -tinHOe snapshots <ts_ms>.txt (e.g. ccab sim --raw's ss/<host>) as tcp_sample/1 records")
	fs.Var(&c.SSReplay.Interval, "ss-replay-interval", "how often the replay directory is checked for new snapshots (without --once)")
	fs.Float64Var(&c.SSReplay.SampleRate, "ss-replay-sample-rate", c.SSReplay.SampleRate, "fraction of each snapshot's connections replayed, in (0, 1] (1: all)")
	fs.Float64Var(&c.SSReplay.SourceSampleRate, "ss-replay-source-sample-rate", c.SSReplay.SourceSampleRate,
		"probability with which the snapshots' sockets were already selected (the simulator's sampling.tcp_sample_rate); records carry it × --ss-replay-sample-rate")
	fs.StringVar(&c.SSReplay.State, "ss-replay-state", c.SSReplay.State, "state of sockets printed without a State column (ss … state established)")

	fs.Var(listValue{&c.Kafka.Brokers}, "kafka-brokers", "comma-separated `host:port` seed brokers")
	fs.StringVar(&c.Kafka.TopicTCP, "topic-tcp", c.Kafka.TopicTCP, "topic of tcp_sample/1 records")
	fs.StringVar(&c.Kafka.TopicConn, "topic-conn", c.Kafka.TopicConn, "topic of tcp_conn/1 records")
	fs.StringVar(&c.Kafka.TopicHTTP, "topic-http", c.Kafka.TopicHTTP, "topic of http_request/1 records")
	fs.StringVar(&c.Kafka.ClientID, "kafka-client-id", c.Kafka.ClientID, "Kafka client id")
	fs.Var(&c.Kafka.Linger, "kafka-linger", "how long a batch waits for more records")
	fs.IntVar(&c.Kafka.MaxInflight, "kafka-max-inflight", c.Kafka.MaxInflight, "records the Kafka client may hold before new ones are spooled")
	fs.Var(&c.Kafka.StallTimeout, "kafka-stall-timeout", "no acknowledgement for this long: spool new records")
	fs.Var(&c.Kafka.RetryBackoff, "kafka-retry-backoff", "wait after a failed produce before replaying again")
	fs.Var(&c.Kafka.ShutdownTimeout, "kafka-shutdown-timeout", "how long a graceful stop waits for Kafka before spooling the rest")
	fs.Var(&c.Kafka.DialTimeout, "kafka-dial-timeout", "connection timeout")

	fs.IntVar(&c.Queue.MaxRecords, "queue-max-records", c.Queue.MaxRecords, "bound of the in-memory queue between sources and the sink")

	fs.StringVar(&c.Spool.Dir, "spool-dir", c.Spool.Dir, "spool `dir` (default <state-dir>/spool)")
	fs.Var(&c.Spool.SegmentBytes, "spool-segment-bytes", "spool segment size")
	fs.Var(&c.Spool.MaxBytes, "spool-max-bytes", "bound on the spool's size")
	fs.Var(&c.Spool.FsyncInterval, "spool-fsync-interval", "fsync spooled records at least this often (0: at every append)")
	fs.StringVar(&c.Spool.Full, "spool-full", c.Spool.Full, "shed (drop the oldest segment, counted) or block (stop reading sources) when the spool is full")
	fs.IntVar(&c.Spool.ReplayChunk, "spool-replay-chunk", c.Spool.ReplayChunk, "records replayed per round")

	fs.Var(&c.Recovery.Lookback, "recovery-lookback", "after an unclean stop, read Kafka back from this long before the last safe time")
	fs.Var(&c.Recovery.Timeout, "recovery-timeout", "give up one read-back attempt after this long (it is retried)")
}

// EnvName is the environment variable of a flag.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Load builds the configuration from defaults, the file (--config or CCAB_COLLECTOR_CONFIG),
// the environment and args, in that order of increasing precedence. It returns
// flag.ErrHelp after printing usage for -h.
func Load(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	// First pass: syntax, and where the file is.
	probe := Default()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(usage)
	path := fs.String("config", "", "JSON config `file` (also "+EnvName("config")+")")
	probe.bind(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ccab-collector run [flags]\n\nPrecedence: flags > environment (%s<FLAG>, e.g. %s) > --config file > defaults.\n\n",
			EnvPrefix, EnvName("kafka-brokers"))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	file := *path
	if file == "" {
		file = getenv(EnvName("config"))
	}

	c := Default()
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return Config{}, fmt.Errorf("config file: %w", err)
		}
		if err := Decode(b, &c); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", file, err)
		}
	}
	fs2 := flag.NewFlagSet("run", flag.ContinueOnError)
	fs2.SetOutput(io.Discard)
	fs2.String("config", "", "")
	c.bind(fs2)
	var envErr error
	fs2.VisitAll(func(f *flag.Flag) {
		if envErr != nil || f.Name == "config" {
			return
		}
		if v, ok := lookup(getenv, EnvName(f.Name)); ok {
			if err := fs2.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", EnvName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return Config{}, envErr
	}
	if err := fs2.Parse(args); err != nil {
		return Config{}, err
	}
	return c, nil
}

func lookup(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

// Decode reads a JSON config over c (keys absent from the file keep c's values).
func Decode(b []byte, c *Config) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// Validate checks values that no component checks itself.
func (c *Config) Validate() error {
	switch {
	case !(c.SampleRate > 0 && c.SampleRate <= 1):
		return fmt.Errorf("sample_rate %v is not in (0, 1]", c.SampleRate)
	case c.StateDir == "":
		return errors.New("state_dir is empty")
	case c.Output != "kafka" && c.Output != "stdout" && c.Output != "discard":
		return fmt.Errorf("output %q is not kafka, stdout or discard", c.Output)
	case c.Output == "kafka" && len(c.Kafka.Brokers) == 0:
		return errors.New("kafka.brokers is empty")
	case c.Kafka.TopicHTTP == "" || c.Kafka.TopicTCP == "" || c.Kafka.TopicConn == "":
		return errors.New("kafka topics must not be empty")
	case !c.Nginx.Enabled && !c.TCPInfo.Enabled && c.SSReplay.Dir == "":
		return errors.New("nothing to collect: nginx.enabled and tcp_info.enabled are false and ss_replay.dir is empty")
	case c.SSReplay.Dir != "" && !(c.SSReplay.SampleRate > 0 && c.SSReplay.SampleRate <= 1):
		return fmt.Errorf("ss_replay.sample_rate %v is not in (0, 1]", c.SSReplay.SampleRate)
	case c.SSReplay.Dir != "" && !(c.SSReplay.SourceSampleRate > 0 && c.SSReplay.SourceSampleRate <= 1):
		return fmt.Errorf("ss_replay.source_sample_rate %v is not in (0, 1]", c.SSReplay.SourceSampleRate)
	case c.SSReplay.Dir != "" && c.SSReplay.Interval <= 0:
		return errors.New("ss_replay.interval must be positive")
	case c.Spool.Full != string(sink.FullShed) && c.Spool.Full != string(sink.FullBlock):
		return fmt.Errorf("spool.full %q is neither shed nor block", c.Spool.Full)
	case c.Reps < 0:
		return fmt.Errorf("reps %d is negative", c.Reps)
	case c.Nginx.Syslog != "auto" && c.Nginx.Syslog != "on" && c.Nginx.Syslog != "off":
		return fmt.Errorf("nginx.syslog %q is not auto, on or off", c.Nginx.Syslog)
	}
	seen := map[string]bool{}
	for _, ns := range c.TCPInfo.Namespaces {
		if seen[ns] {
			if ns == "" {
				return errors.New(`tcp_info.namespaces lists the own namespace ("", an empty entry) twice`)
			}
			return fmt.Errorf("tcp_info.namespaces lists %q twice", ns)
		}
		seen[ns] = true
	}
	if c.Once {
		c.Reps = 1
	}
	return nil
}

// SpoolDir is the spool directory.
func (c *Config) SpoolDir() string {
	if c.Spool.Dir != "" {
		return c.Spool.Dir
	}
	return c.StateDir + "/spool"
}
