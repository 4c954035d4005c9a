// Command ccab-agent applies signed congestion-control assignments to its host (or to a
// network namespace standing for a host) and reports what the host runs. See rollout/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ccab-dev/ccab/internal/netns"
	"github.com/ccab-dev/ccab/rollout/agent"
	"github.com/ccab-dev/ccab/rollout/assignment"
	"github.com/ccab-dev/ccab/rollout/bpfcc"
	"github.com/ccab-dev/ccab/rollout/kernelcc"
	"github.com/ccab-dev/ccab/rollout/qdisc"
	"github.com/ccab-dev/ccab/rollout/sockpolicy"
	"github.com/ccab-dev/ccab/rollout/status"
)

// Exit statuses.
const (
	exitApplied = 0
	exitFailed  = 1 // refused, error, or a startup failure
	exitUsage   = 2
	exitStale   = 3 // --once: generation not newer than the applied one; nothing done
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ccab-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hostname, _ := os.Hostname()
	var (
		brokers     = fs.String("brokers", "127.0.0.1:19092", "Kafka bootstrap servers, comma separated")
		asgTopic    = fs.String("assignments-topic", "ccab.assignments.v1", "compacted topic of assignment/1 records (key = host)")
		statusTopic = fs.String("status-topic", "ccab.agent_status.v1", "topic for agent_status/1 records (key = host)")
		host        = fs.String("host", hostname, "this host's name: the Kafka key of its assignments")
		pop         = fs.String("pop", "", "this host's PoP (reported in agent_status)")
		pubKey      = fs.String("public-key", "", "file with the controller's Ed25519 public key, raw 32 bytes in base64 (required)")
		stateFile   = fs.String("state-file", "/var/lib/ccab-agent/state.json", "state file (last applied assignment; read by the collector)")
		nsFlag      = fs.String("netns", "", "network namespace (name in /run/netns or a path) whose sysctl and qdisc to manage; Kafka stays in the agent's own namespace")
		procfs      = fs.String("procfs", "/proc", "procfs root")
		sysfs       = fs.String("sysfs", "/sys", "sysfs root")
		loadMods    = fs.Bool("load-modules", false, "run modprobe tcp_<cc> for an algorithm the kernel does not offer yet (needs CAP_SYS_MODULE)")
		modprobe    = fs.String("modprobe", "modprobe", "modprobe command")
		tcPath      = fs.String("tc", "tc", "tc command")
		bpfCC       = fs.Bool("bpf-cc", true, "load ccab's BPF congestion control (bbr2, bbr3) when the kernel lacks the assigned one (needs root, BTF, struct_ops)")
		bpfDir      = fs.String("bpf-dir", bpfcc.DefaultDir, "bpffs directory where the loaded BPF congestion controls are pinned")
		bpfUsersDir = fs.String("bpf-users-dir", bpfcc.DefaultUsersDir, "directory recording which hosts use which BPF congestion control (shared by the agents of one machine)")
		qdiscIfs    = fs.String("qdisc-interfaces", "", "comma-separated egress interfaces for the qdisc (default: every interface that is up and not loopback)")
		heartbeat   = fs.Duration("heartbeat-interval", 30*time.Second, "interval between heartbeat statuses")
		metricsAddr = fs.String("metrics-addr", "127.0.0.1:9465", "address for /metrics (empty: off)")
		once        = fs.Bool("once", false, "apply one record from --assignment-file, print the agent_status JSON, exit (0 applied, 1 refused/error, 3 stale); no Kafka")
		asgFile     = fs.String("assignment-file", "", "assignment/1 record for --once")
		releaseBPF  = fs.String("release-bpf", "", "remove --host's use of ccab's BPF congestion control NAME and unregister it when no host uses it; exit (labs: teardown of a host that is going away)")
		logLevel    = fs.String("log-level", "info", "debug, info, warn or error")
		spCgroup    = fs.String("sockpolicy-cgroup", "", "cgroup v2 directory whose connections assignment/2 socket policies decide (e.g. nginx's; the root cgroup decides every connection of the host); empty: socket policies are refused")
		setsTopic   = fs.String("prefix-sets-topic", "ccab.prefix_sets.v1", "compacted topic of prefix_set/1 chunks (key name/version/chunk) that assignment/3 policies name; read from --brokers, also with --once; empty: such assignments are refused")
		spPinDir    = fs.String("sockpolicy-pin-dir", "/sys/fs/bpf/ccab-sockpolicy", "bpffs directory where the sock_ops program and its maps are pinned (the policy outlives the agent; the collector reads conn_policy there); empty: not pinned, detached when the agent exits")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: ccab-agent --public-key FILE [flags]\n"+
			"       ccab-agent --once --assignment-file F --public-key FILE [flags]\n\n"+
			"Applies signed assignment/1, /2 and /3 records for --host (from Kafka, or one file with --once) to the\n"+
			"kernel's net.ipv4.tcp_congestion_control (and root qdisc) and reports agent_status/1.\n"+
			"Every flag can also be set with CCAB_AGENT_<FLAG> (e.g. CCAB_AGENT_BROKERS,\n"+
			"CCAB_AGENT_PUBLIC_KEY); the command line wins.\n\nflags:\n")
		fs.PrintDefaults()
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		key := "CCAB_AGENT_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(key); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", key, v, err)
			}
		}
	})
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitApplied
		}
		return exitUsage
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "ccab-agent: "+format+"\n", a...)
		return exitUsage
	}
	switch {
	case envErr != nil:
		return usage("%v", envErr)
	case fs.NArg() > 0:
		return usage("unexpected arguments %q", fs.Args())
	case *releaseBPF != "":
		if *once {
			return usage("--release-bpf and --once are exclusive")
		}
		l := bpfcc.Loader{Dir: *bpfDir, UsersDir: *bpfUsersDir, ProcFS: *procfs}
		unloaded, err := l.Release(*releaseBPF, *host)
		if err != nil {
			fmt.Fprintf(stderr, "ccab-agent: release %s: %v\n", *releaseBPF, err)
			return exitFailed
		}
		fmt.Fprintf(stdout, "released %s for %s; unregistered: %v\n", *releaseBPF, *host, unloaded)
		return exitApplied
	case *pubKey == "":
		return usage("--public-key is required")
	case *host == "":
		return usage("--host is empty")
	case *once && *asgFile == "":
		return usage("--once needs --assignment-file")
	case !*once && *asgFile != "":
		return usage("--assignment-file is only read with --once")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usage("--log-level: %v", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	keyText, err := os.ReadFile(*pubKey)
	if err != nil {
		fmt.Fprintf(stderr, "ccab-agent: public key: %v\n", err)
		return exitFailed
	}
	pub, err := assignment.PublicKeyFromBase64(string(keyText))
	if err != nil {
		fmt.Fprintf(stderr, "ccab-agent: %s: %v\n", *pubKey, err)
		return exitFailed
	}
	nsPath := netns.Path(*nsFlag)
	if nsPath != "" {
		if _, err := os.Stat(nsPath); err != nil {
			fmt.Fprintf(stderr, "ccab-agent: --netns: %v\n", err)
			return exitFailed
		}
	}
	var ifs []string
	if *qdiscIfs != "" {
		ifs = strings.Split(*qdiscIfs, ",")
	}
	var loader *bpfcc.Loader
	if *bpfCC {
		loader = &bpfcc.Loader{Dir: *bpfDir, UsersDir: *bpfUsersDir, ProcFS: *procfs}
	}
	m := agent.NewMetrics()
	cfg := agent.Config{
		Host: *host, Pop: *pop, PublicKey: pub, StateFile: *stateFile, NetnsPath: nsPath,
		Kernel: kernelcc.Kernel{ProcFS: *procfs, SysFS: *sysfs, LoadModules: *loadMods, Modprobe: *modprobe},
		Tc:     qdisc.Tc{Path: *tcPath, Interfaces: ifs}, BPF: loader,
	}
	if *spCgroup != "" {
		if *once && *spPinDir == "" {
			return usage("--once with --sockpolicy-cgroup needs --sockpolicy-pin-dir (else the policy ends with the process)")
		}
		enf, err := sockpolicy.Attach(*spCgroup, sockpolicy.Options{PinDir: *spPinDir})
		if err != nil {
			fmt.Fprintf(stderr, "ccab-agent: --sockpolicy-cgroup %s: %v\n", *spCgroup, err)
			return exitFailed
		}
		defer enf.Close()
		cfg.Policy = enf
		if *setsTopic != "" {
			cfg.PrefixSets = agent.KafkaPrefixSets{Brokers: strings.Split(*brokers, ","), Topic: *setsTopic,
				ClientID: "ccab-agent-sets-" + *host}
		}
	}
	ag, err := agent.New(cfg, m, log)
	if err != nil {
		fmt.Fprintf(stderr, "ccab-agent: %v\n", err)
		return exitFailed
	}

	if *once {
		raw, err := readBounded(*asgFile, assignment.MaxRecordBytes+1) // one byte more: "too large"
		if err != nil {
			fmt.Fprintf(stderr, "ccab-agent: assignment file: %v\n", err)
			return exitFailed
		}
		out, s := ag.Apply(raw)
		switch out {
		case agent.Stale:
			fmt.Fprintf(stderr, "ccab-agent: ignored: %s (nothing changed)\n", s.Reason)
			return exitStale
		case agent.Applied, agent.Reconfirmed:
			fmt.Fprintf(stdout, "%s\n", status.Encode(s))
			return exitApplied
		default:
			fmt.Fprintf(stdout, "%s\n", status.Encode(s))
			fmt.Fprintf(stderr, "ccab-agent: %s: %s (host keeps %s)\n", s.State, s.Reason, s.CCEffective)
			return exitFailed
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *metricsAddr != "" {
		addr, err := m.Serve(ctx, *metricsAddr, log)
		if err != nil {
			fmt.Fprintf(stderr, "ccab-agent: %v\n", err)
			return exitFailed
		}
		log.Info("metrics", "addr", addr)
	}
	log.Info("ccab-agent starting", "host", *host, "netns", nsPath, "brokers", *brokers,
		"assignments_topic", *asgTopic, "state_generation", ag.State().Generation)
	if err := ag.Run(ctx, agent.KafkaConfig{
		Brokers: strings.Split(*brokers, ","), AssignmentsTopic: *asgTopic, StatusTopic: *statusTopic,
		ClientID: "ccab-agent-" + *host, HeartbeatInterval: *heartbeat,
	}); err != nil {
		fmt.Fprintf(stderr, "ccab-agent: %v\n", err)
		return exitFailed
	}
	return exitApplied
}

// readBounded reads at most max bytes of path.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}
