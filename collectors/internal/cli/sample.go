package cli

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sampler"
)

// Sample is `sample`: read TCP sockets over netlink sock_diag (no ss) and print
// tcp_sample/1 JSON lines, once or every interval.
func Sample() Command {
	return Command{Name: "sample", Summary: "sample TCP sockets over netlink (no ss) → tcp_sample/1 JSON lines", Run: runSample}
}

func runSample(ctx context.Context, env Env, args []string) int {
	const cmd = "sample"
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	var ports portList
	var namespaces, states stringList
	once := fs.Bool("once", false, "sample once and exit (same as --reps 1)")
	reps := fs.Int("reps", 0, "number of ticks, then exit; 0: until interrupted")
	interval := fs.Duration("interval", sampler.DefaultInterval, "time between ticks")
	fs.Var(&ports, "port", "only sockets with one of these local `ports` (comma-separated, e.g. 443,8443)")
	fs.Var(&namespaces, "netns", "sample these network `namespaces` (names in /run/netns or paths, comma-separated; \"\" = own) instead of the collector's own")
	fs.Var(&states, "state", "TCP `states` to sample, as ss names them (comma-separated; default ESTAB; \"all\")")
	minAcked := fs.Uint64("min-bytes-acked", 0, "only connections with at least this many `bytes` acked (bulk transfers)")
	maxPerTick := fs.Int("max-per-tick", sampler.DefaultMaxPerTick, "at most this many records per tick (the smallest sampling hashes); negative: no cap")
	maxTickTime := fs.Duration("max-tick-time", sampler.DefaultMaxTickTime, "stop a tick's dump after this long; negative: no limit")
	salt := fs.String("salt", "", "secret salt of sock_id and of the sampling hash (keep it the same across the fleet)")
	bootID := fs.String("boot-id", "", "boot id that keys sock_id (default: "+sampler.BootIDPath+")")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ccab-collector %s [--once] [--interval 10s] [--sample-rate 1] [--port 443,...] [--netns NAME] [host flags]\n\n"+
			"Reads TCP sockets over NETLINK_SOCK_DIAG (tcp_info, congestion control, BBR info) and prints\n"+
			"tcp_sample/1 JSON lines; one summary line per tick on stderr. --kernel defaults to uname -r.\n\n", cmd)
		fs.PrintDefaults()
	}
	if done, status := parseFlags(fs, env, args); done {
		return status
	}
	meta, err := h.meta()
	if err != nil {
		return usageError(env.Stderr, cmd, err)
	}
	if meta.Kernel == "" {
		meta.Kernel = kernelRelease()
	}
	if *once {
		*reps = 1
	}
	if *reps < 0 {
		return usageError(env.Stderr, cmd, fmt.Errorf("--reps %d is negative", *reps))
	}
	if *interval <= 0 {
		return usageError(env.Stderr, cmd, fmt.Errorf("--interval %s is not positive", *interval))
	}
	if *salt == "" {
		fmt.Fprintf(env.Stderr, "%s: warning: --salt is empty; sock_id can then be recomputed from a guessed 4-tuple\n", cmd)
	}
	if *maxPerTick == 0 {
		*maxPerTick = -1 // the flag's 0 means "none", not "default"
	}
	if *maxTickTime == 0 {
		*maxTickTime = -1
	}
	out := bufio.NewWriter(env.Stdout)
	enc := record.NewEncoder(out)
	failed, writeErr := false, error(nil)
	tick := 0
	cfg := sampler.Config{
		Interval:      *interval,
		SampleRate:    meta.SampleRate,
		Salt:          *salt,
		BootID:        *bootID,
		States:        states,
		LocalPorts:    ports,
		MinBytesAcked: *minAcked,
		MaxPerTick:    *maxPerTick,
		MaxTickTime:   *maxTickTime,
		Namespaces:    namespaces,
		OnTick: func(st sampler.TickStats, err error) {
			tick++
			fmt.Fprintf(env.Stderr, "%s: tick %d: %d records of %d sockets (skipped: filter %d, rate %d, cap %d; decode errors %d), rate %.4g, dump %s, %d netlink bytes%s\n",
				cmd, tick, st.Sampled, st.Sockets, st.SkippedFilter, st.SkippedRate, st.SkippedCap, st.DecodeErrors,
				st.EffectiveRate, st.DumpDuration.Round(10*time.Microsecond), st.NetlinkBytes, truncatedNote(st))
			if err != nil {
				failed = true
				fmt.Fprintf(env.Stderr, "%s: tick %d: %v\n", cmd, tick, err)
			}
			if ferr := out.Flush(); ferr != nil && writeErr == nil {
				writeErr = ferr
			}
		},
	}
	if *reps == 1 {
		cfg.KeepClosed = -1 // one tick: no connection to follow
	}
	smp, err := sampler.New(cfg)
	if err != nil {
		fmt.Fprintf(env.Stderr, "%s: %v\n", cmd, err)
		return ExitFailure
	}
	defer smp.Close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = smp.Run(runCtx, *reps, func() record.Meta { return meta }, func(recs []record.TCPSample) {
		for i := range recs {
			if writeErr != nil {
				break
			}
			if err := enc.Encode(&recs[i]); err != nil {
				writeErr = err
			}
		}
		if writeErr != nil {
			cancel()
		}
	})
	if ferr := out.Flush(); ferr != nil && writeErr == nil {
		writeErr = ferr
	}
	switch {
	case writeErr != nil:
		fmt.Fprintf(env.Stderr, "%s: write: %v\n", cmd, writeErr)
		return ExitFailure
	case err != nil && ctx.Err() == nil:
		fmt.Fprintf(env.Stderr, "%s: %v\n", cmd, err)
		return ExitFailure
	case failed && *reps == 1:
		return ExitFailure
	}
	return ExitOK
}

func truncatedNote(st sampler.TickStats) string {
	if st.Truncated {
		return " (truncated at --max-tick-time)"
	}
	return ""
}

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// portList is a comma-separated list of ports; repeating the flag adds to it.
type portList []uint16

func (p *portList) String() string {
	s := make([]string, len(*p))
	for i, v := range *p {
		s[i] = strconv.Itoa(int(v))
	}
	return strings.Join(s, ",")
}

func (p *portList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.ParseUint(f, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("port %q is not in 1-65535", f)
		}
		*p = append(*p, uint16(n))
	}
	return nil
}

// stringList is a comma-separated list; repeating the flag adds to it.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		*s = append(*s, strings.TrimSpace(f))
	}
	return nil
}
