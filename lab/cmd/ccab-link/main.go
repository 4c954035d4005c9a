// Command ccab-link is a userspace link emulator between two network namespaces (TUN
// devices): fixed one-way delay, a constant rate or a Mahimahi delivery trace, a droptail
// buffer, random and Gilbert–Elliott loss, Prometheus metrics. `ccab-link gen-trace` writes
// cellular-like Mahimahi traces. See lab/link/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ccab-dev/ccab/internal/atomicfile"
	"github.com/ccab-dev/ccab/lab/link"
)

const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	status := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(status)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "gen-trace" {
		return genTrace(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	return runLink(ctx, args, stdout, stderr)
}

const runUsage = `usage: ccab-link [run] --netns-a NS --netns-b NS [flags]
       ccab-link gen-trace [flags]      (ccab-link gen-trace -h)

Creates a TUN device in each of two network namespaces and moves packets between them:
"up" is A→B, "down" is B→A. Per direction, in this order: random loss, Gilbert–Elliott
loss, a droptail bottleneck buffer served at a constant rate or by a Mahimahi delivery
trace, then a fixed one-way delay. Packets keep their order. Rates and buffers count IP
bytes (no link-layer framing); a GSO super-packet counts as its MTU-sized segments.

Each direction flag (--delay-ms, --rate-bps, --buffer-bytes, --buffer-bdp, --loss) sets both
directions; its -up-/-down- form (--delay-up-ms, --rate-down-bps, --loss-up ...) overrides
one. When ready it prints one JSON line {"event":"ready",...} on stdout (and writes it to
--ready-file); on SIGTERM/SIGINT it stops, removes the devices and prints
{"event":"stopped",...} with the totals. Needs CAP_NET_ADMIN and CAP_SYS_ADMIN (root).

flags:
`

type dirFlag struct {
	both, up, down string
}

func runLink(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ccab-link", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, runUsage)
		fs.PrintDefaults()
	}
	var (
		nsA      = fs.String("netns-a", "", "namespace of side A: a name under /run/netns or a path like /proc/PID/ns/net (\"\": ccab-link's own)")
		nsB      = fs.String("netns-b", "", "namespace of side B (as --netns-a)")
		devA     = fs.String("dev-a", "lk-a", "TUN device name in A (≤ 15 bytes)")
		devB     = fs.String("dev-b", "lk-b", "TUN device name in B")
		addrA    = fs.String("addr-a", "", "IPv4 address/prefix for A's device, e.g. 10.77.0.1/24 (\"\": leave unaddressed, configure with ip)")
		addrB    = fs.String("addr-b", "", "IPv4 address/prefix for B's device, e.g. 10.77.0.2/24")
		mtu      = fs.Int("mtu", 1500, "MTU of both devices, bytes (a trace opportunity is 1500 bytes)")
		traceUp  = fs.String("trace-up", "", "Mahimahi trace file for A→B (one ms timestamp per line = one 1500-byte delivery opportunity; loops); replaces the rate")
		traceDn  = fs.String("trace-down", "", "Mahimahi trace file for B→A")
		geP      = fs.Float64("ge-p", 0, "Gilbert–Elliott: probability per packet of moving good→bad (0: off)")
		geR      = fs.Float64("ge-r", 0, "Gilbert–Elliott: probability per packet of moving bad→good (mean burst = 1/r packets)")
		geBad    = fs.Float64("ge-loss-bad", 1, "Gilbert–Elliott: loss probability in the bad state (1-h)")
		geGood   = fs.Float64("ge-loss-good", 0, "Gilbert–Elliott: loss probability in the good state (1-k)")
		geDir    = fs.String("ge-direction", "both", "directions with Gilbert–Elliott loss: both, up or down")
		seed     = fs.Uint64("seed", 1, "seed of the loss processes (per direction streams)")
		slackUs  = fs.Float64("release-slack-us", 50, "batching: a wake-up also releases segments due within this many µs (never more than the delay)")
		noOff    = fs.Bool("no-offload", false, "disable GSO/TSO through the TUN devices (one syscall per MTU packet; slower)")
		metrics  = fs.String("metrics-addr", "", "listen address for Prometheus /metrics in ccab-link's own namespace, e.g. 127.0.0.1:9470 (port 0 picks one; printed in the ready line); \"\": off")
		ready    = fs.String("ready-file", "", "write the ready JSON line to this file (atomically) once the devices are up")
		maxHeld  = fs.Int64("max-held-bytes", 1<<30, "safety cap per direction on bytes held (queue + delay line); beyond it packets are dropped (cause memory)")
		rtPrio   = fs.Int("rt-priority", 0, "> 0: run the two releasing threads SCHED_FIFO at this priority (1-99): less wake-up jitter when the host is busy; they sleep between deadlines")
		logLevel = fs.String("log-level", "info", "debug, info, warn or error")
		cpuProf  = fs.String("cpu-profile", "", "write a Go CPU profile (pprof) of the whole run to this file")
	)
	delay := dirFlags(fs, "delay", "-ms", "0", "fixed one-way delay, milliseconds (fractions allowed)")
	rate := dirFlags(fs, "rate", "-bps", "0", "bottleneck rate, bits per second of IP bytes (e.g. 20e6); 0 = unlimited")
	bufB := dirFlags(fs, "buffer", "-bytes", "0", "droptail buffer of the bottleneck, bytes; 0 = unlimited (unless a BDP buffer is given)")
	bufBDP := dirFlags(fs, "buffer", "-bdp", "0", "droptail buffer in bandwidth-delay products: rate (or the trace's mean) × (up + down delay); ignored if the bytes form is set")
	loss := dirFlags(fs, "loss", "", "0", "random loss probability per packet, 0..1 (e.g. 0.01 = 1%)")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ccab-link: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "ccab-link: --log-level: %v\n", err)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "ccab-link: "+format+"\n", a...)
		return exitUsage
	}

	cfg := link.Config{
		A:       link.Endpoint{Netns: *nsA, Dev: *devA, Addr: *addrA, MTU: *mtu},
		B:       link.Endpoint{Netns: *nsB, Dev: *devB, Addr: *addrB, MTU: *mtu},
		Seed:    *seed,
		Slack:   time.Duration(*slackUs * 1e3),
		Offload: !*noOff,
		Log:     log, MaxHeldBytes: *maxHeld, RTPriority: *rtPrio,
	}
	if *devA == *devB && *nsA == *nsB {
		return usageErr("--dev-a and --dev-b must differ when both sides are in the same namespace")
	}
	dirs := []*link.DirConfig{&cfg.Up, &cfg.Down}
	names := []string{"up", "down"}
	traces := []string{*traceUp, *traceDn}
	bdps := make([]float64, 2)
	for i, d := range dirs {
		var err error
		get := func(f dirFlag) (float64, error) {
			name, v := f.both, fs.Lookup(f.both).Value.String()
			if sel := []string{f.up, f.down}[i]; set[sel] {
				name, v = sel, fs.Lookup(sel).Value.String()
			}
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("--%s: %q is not a number", name, v)
			}
			return x, nil
		}
		var ms, bdp float64
		if ms, err = get(delay); err == nil {
			d.Delay = time.Duration(ms * 1e6)
			if d.RateBps, err = get(rate); err == nil {
				var bb float64
				if bb, err = get(bufB); err == nil {
					d.BufferBytes = int64(bb)
					if bdp, err = get(bufBDP); err == nil {
						d.Loss, err = get(loss)
					}
				}
			}
		}
		if err != nil {
			return usageErr("%v", err)
		}
		if traces[i] != "" {
			tr, err := link.LoadTrace(traces[i])
			if err != nil {
				return usageErr("--trace-%s: %v", names[i], err)
			}
			d.Trace, d.TraceName = tr, traces[i]
		}
		if *geDir == "both" || *geDir == names[i] {
			d.GEP, d.GER, d.GELossBad, d.GELossGood = *geP, *geR, *geBad, *geGood
		} else if *geDir != "up" && *geDir != "down" {
			return usageErr("--ge-direction must be both, up or down")
		}
		bdps[i] = bdp
	}
	// The BDP form applies when the bytes form (for this direction) was not given; the
	// BDP uses the round trip, so both delays must be known first.
	rtt := cfg.Up.Delay + cfg.Down.Delay
	for i, d := range dirs {
		if bdp := bdps[i]; d.BufferBytes == 0 && bdp > 0 {
			r := d.RateBps
			if d.Trace != nil {
				r = d.Trace.MeanBps()
			}
			if r == 0 || rtt == 0 {
				return usageErr("--buffer-bdp for %s needs a rate (or trace) and a non-zero delay", names[i])
			}
			d.BufferBytes = max(int64(bdp*r/8*rtt.Seconds()), int64(2**mtu))
		}
	}

	m := link.NewMetrics()
	cfg.Metrics = m
	var metricsURL string
	var srv *http.Server
	if *metrics != "" {
		ln, err := net.Listen("tcp", *metrics)
		if err != nil {
			log.Error("metrics listener", "addr", *metrics, "err", err)
			return exitError
		}
		metricsURL = ln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
	}

	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			log.Error("cpu profile", "err", err)
			return exitError
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Error("cpu profile", "err", err)
			return exitError
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	l, err := link.Open(cfg)
	if err != nil {
		log.Error("open link", "err", err)
		return exitError
	}
	readyLine, _ := json.Marshal(map[string]any{
		"event": "ready", "pid": os.Getpid(), "metrics_addr": metricsURL,
		"a":  map[string]any{"netns": *nsA, "dev": *devA, "addr": *addrA},
		"b":  map[string]any{"netns": *nsB, "dev": *devB, "addr": *addrB},
		"up": describe(cfg.Up), "down": describe(cfg.Down), "offload": cfg.Offload,
	})
	fmt.Fprintf(stdout, "%s\n", readyLine)
	if *ready != "" {
		if err := atomicfile.WriteFile(*ready, append(readyLine, '\n'), 0o644); err != nil {
			log.Error("ready file", "err", err)
		}
	}
	log.Info("link up", "a", *devA, "b", *devB, "metrics", metricsURL)
	runErr := l.Run(ctx.Done())
	up, down := l.Stats()
	stopLine, _ := json.Marshal(map[string]any{"event": "stopped", "up": up, "down": down,
		"error": errString(runErr)})
	fmt.Fprintf(stdout, "%s\n", stopLine)
	if runErr != nil {
		log.Error("link failed", "err", runErr)
		return exitError
	}
	return exitOK
}

func errString(err error) any {
	if err == nil {
		return nil
	}
	return err.Error()
}

func describe(d link.DirConfig) map[string]any {
	out := map[string]any{"delay_ms": d.Delay.Seconds() * 1000, "rate_bps": d.RateBps,
		"buffer_bytes": d.BufferBytes, "loss": d.Loss}
	if d.Trace != nil {
		out["trace"], out["trace_mean_bps"] = d.TraceName, d.Trace.MeanBps()
	}
	if d.GEP > 0 {
		out["ge"] = map[string]float64{"p": d.GEP, "r": d.GER, "loss_bad": d.GELossBad, "loss_good": d.GELossGood}
	}
	return out
}

// dirFlags registers --NAME<unit>, --NAME-up<unit> and --NAME-down<unit> as string flags
// holding numbers.
func dirFlags(fs *flag.FlagSet, name, unit, def, help string) dirFlag {
	f := dirFlag{both: name + unit, up: name + "-up" + unit, down: name + "-down" + unit}
	fs.String(f.both, def, help+" (both directions)")
	fs.String(f.up, def, "A→B only: overrides --"+f.both)
	fs.String(f.down, def, "B→A only: overrides --"+f.both)
	return f
}

const genUsage = `usage: ccab-link gen-trace [flags] > trace.txt

Writes a cellular-like Mahimahi trace (one ms timestamp per line, one 1500-byte delivery
opportunity each; the trace loops). The rate is Markov-modulated: radio states with mean
rates --rates-mbps, exponential dwell times (--dwell-s) with moves to a neighbouring state;
multiplied by slow log-normal fading (--fade-sigma-db, correlation --fade-corr-ms), short deep
fades (--deep-fade-hz, --deep-fade-ms, --deep-fade-db) and handover outages with no delivery
at all (--handover-hz, --outage-ms). Same seed, same trace. A summary (mean rate, 1-second
percentiles, outages) goes to stderr.

flags:
`

func genTrace(args []string, stdout, stderr io.Writer) int {
	p := link.DefaultCellular()
	fs := flag.NewFlagSet("ccab-link gen-trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, genUsage); fs.PrintDefaults() }
	out := fs.String("out", "", "output file (default stdout)")
	rates := fs.String("rates-mbps", "4,12,30", "mean rate of each radio state, Mbit/s of IP bytes, comma separated (poor → good)")
	fs.Uint64Var(&p.Seed, "seed", p.Seed, "random seed")
	fs.Float64Var(&p.DurationS, "duration-s", p.DurationS, "trace length, seconds (it loops)")
	fs.Float64Var(&p.DwellS, "dwell-s", p.DwellS, "mean time in a radio state, seconds")
	fs.Float64Var(&p.FadeSigmaD, "fade-sigma-db", p.FadeSigmaD, "std deviation of slow fading, dB")
	fs.Float64Var(&p.FadeCorrMs, "fade-corr-ms", p.FadeCorrMs, "correlation time of slow fading, ms")
	fs.Float64Var(&p.DeepFadeHz, "deep-fade-hz", p.DeepFadeHz, "deep fades per second (Poisson)")
	fs.Float64Var(&p.DeepFadeMs, "deep-fade-ms", p.DeepFadeMs, "mean deep-fade duration, ms")
	fs.Float64Var(&p.DeepFadeDB, "deep-fade-db", p.DeepFadeDB, "attenuation during a deep fade, dB")
	fs.Float64Var(&p.HandoverHz, "handover-hz", p.HandoverHz, "handovers per second (Poisson)")
	fs.Float64Var(&p.OutageMs, "outage-ms", p.OutageMs, "mean handover outage (no delivery), ms (at least 20)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	p.RatesMbps = nil
	for _, s := range strings.Split(*rates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			fmt.Fprintf(stderr, "ccab-link gen-trace: --rates-mbps: %q is not a number\n", s)
			return exitUsage
		}
		p.RatesMbps = append(p.RatesMbps, v)
	}
	tr, err := link.GenCellular(p)
	if err != nil {
		fmt.Fprintf(stderr, "ccab-link gen-trace: %v\n", err)
		return exitUsage
	}
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintf(stderr, "ccab-link gen-trace: %v\n", err)
			return exitError
		}
		defer f.Close()
		w = f
	}
	if err := tr.Write(w); err != nil {
		fmt.Fprintf(stderr, "ccab-link gen-trace: write: %v\n", err)
		return exitError
	}
	s := link.Summarize(tr)
	fmt.Fprintf(stderr, "trace: %d opportunities over %d ms: mean %.2f Mbit/s; per second p10 %.2f, p50 %.2f, p90 %.2f Mbit/s; %d ms without delivery in runs ≥ 20 ms\n",
		len(tr.Ms), tr.PeriodMs, tr.MeanBps()/1e6, s.P10Mbps, s.P50Mbps, s.P90Mbps, s.OutageMs)
	return exitOK
}
