// Command netlinkbench measures the netlink sampler against `ss -tinHOe` on the same
// loopback sockets, and the sampler's resident memory on many sockets. Holder processes
// (itself, -mode hold) open the sockets (half as clients, half accepted), each within its
// RLIMIT_NOFILE (raised to the hard limit; raising the hard limit needs CAP_SYS_RESOURCE,
// which a container may lack), so run it in a fresh network namespace
// (bench/collector/netlink_bench.sh does).
//
//	netlinkbench -mode speed -sockets 10000 -reps 5 -collector bin/ccab-collector
//	netlinkbench -mode rss -sockets 100000 -collector bin/ccab-collector
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccab-dev/ccab/collectors/netlink"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sampler"
)

func main() {
	mode := flag.String("mode", "speed", "speed (netlink vs ss), rss (sampler memory), or hold (open sockets, wait for EOF on stdin)")
	portBase := flag.Int("port-base", 900, "hold: first listener port")
	sockets := flag.Int("sockets", 10000, "loopback sockets to open (each connection is two)")
	reps := flag.Int("reps", 5, "repetitions per measurement (the median is printed)")
	collector := flag.String("collector", "ccab-collector", "path of the ccab-collector binary")
	flag.Parse()
	var err error
	if *mode == "hold" {
		if err = openSockets(*sockets, *portBase); err == nil {
			fmt.Println("ready")
			io.Copy(io.Discard, os.Stdin) // hold until the parent closes stdin
			return
		}
		fmt.Fprintf(os.Stderr, "netlinkbench: hold: %v\n", err)
		os.Exit(1)
	}
	stop, err := hold(*sockets)
	if err != nil {
		fmt.Fprintf(os.Stderr, "netlinkbench: %v\n", err)
		os.Exit(1)
	}
	defer stop()
	switch *mode {
	case "speed":
		err = speed(*sockets, *reps, *collector)
	case "rss":
		err = rss(*sockets, *collector)
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		stop()
		fmt.Fprintf(os.Stderr, "netlinkbench: %v\n", err)
		os.Exit(1)
	}
}

// perHolder is how many sockets one holder process opens: below the 20000 RLIMIT_NOFILE
// hard limit seen in containers without CAP_SYS_RESOURCE.
const perHolder = 18000

// hold starts holder processes until n sockets are open; stop closes them.
func hold(n int) (stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var holders []*exec.Cmd
	var stdins []io.WriteCloser
	stop = func() {
		for _, w := range stdins {
			w.Close()
		}
		for _, h := range holders {
			h.Wait()
		}
	}
	for i := 0; i*perHolder < n; i++ {
		k := min(perHolder, n-i*perHolder)
		cmd := exec.Command(self, "-mode", "hold", "-sockets", fmt.Sprint(k), "-port-base", fmt.Sprint(900+i*10))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			stop()
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			stop()
			return nil, err
		}
		holders, stdins = append(holders, cmd), append(stdins, in)
		buf := make([]byte, 6)
		if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
			stop()
			return nil, fmt.Errorf("holder %d did not open its %d sockets", i, k)
		}
	}
	return stop, nil
}

// openSockets opens n/2 loopback connections with raw syscalls (no Go poller, so the
// holder's own memory stays small) and keeps them open until the process exits.
func openSockets(n, portBase int) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if need := uint64(n + 100); lim.Cur < need {
		lim.Cur = need
		if lim.Max < need {
			lim.Max = need // needs CAP_SYS_RESOURCE
		}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", need, err)
		}
	}
	const perListener = 20000
	var ln int
	for i := 0; i < n/2; i++ {
		if i%perListener == 0 {
			var err error
			if ln, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
				return err
			}
			unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
			if err := unix.Bind(ln, &unix.SockaddrInet4{Port: portBase + i/perListener, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
				return fmt.Errorf("bind: %w", err)
			}
			if err := unix.Listen(ln, 4096); err != nil {
				return err
			}
		}
		c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("socket %d: %w", 2*i, err)
		}
		if err := unix.Connect(c, &unix.SockaddrInet4{Port: portBase + i/perListener, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return fmt.Errorf("connect %d: %w", i, err)
		}
		if _, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC); err != nil {
			return fmt.Errorf("accept %d: %w", i, err)
		}
	}
	return nil
}

type result struct {
	wall, cpu time.Duration
	rssKB     int64
	bytes     int64
}

func median(rs []result) result {
	sort.Slice(rs, func(i, j int) bool { return rs[i].wall < rs[j].wall })
	m := rs[len(rs)/2]
	cpus := make([]time.Duration, len(rs))
	for i, r := range rs {
		cpus[i] = r.cpu
	}
	sort.Slice(cpus, func(i, j int) bool { return cpus[i] < cpus[j] })
	m.cpu = cpus[len(cpus)/2]
	return m
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// child runs a command, its stdout counted and thrown away, and returns its wall and CPU
// time (user + system, from wait4's rusage) and peak RSS.
func child(name string, args ...string) (result, error) {
	var out counter
	cmd := exec.Command(name, args...)
	cmd.Stdout = &out
	cmd.Stderr = io.Discard
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("%s: %w", name, err)
	}
	wall := time.Since(start)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return result{wall: wall, cpu: cpu, rssKB: ru.Maxrss, bytes: out.n}, nil
}

func selfCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func speed(n, reps int, collector string) error {
	ctx := context.Background()
	var ssR, procR, tickR, dumpR []result
	for range reps {
		r, err := child("ss", "-tinHOe", "state", "established")
		if err != nil {
			return err
		}
		ssR = append(ssR, r)

		r, err = child(collector, "sample", "--once", "--salt", "bench", "--sample-rate", "1",
			"--max-per-tick", "-1", "--max-tick-time", "-1s")
		if err != nil {
			return err
		}
		procR = append(procR, r)

		// In process: the sampler's tick (dump, decode, sock_id, records; no JSON).
		smp, err := sampler.New(sampler.Config{Salt: "bench", MaxPerTick: -1, MaxTickTime: -1, KeepClosed: -1})
		if err != nil {
			return err
		}
		c0, t0 := selfCPU(), time.Now()
		recs, st, err := smp.Tick(ctx, record.Meta{}, time.Now())
		tickR = append(tickR, result{wall: time.Since(t0), cpu: selfCPU() - c0, bytes: st.NetlinkBytes})
		smp.Close()
		if err != nil {
			return err
		}
		if len(recs) != n {
			return fmt.Errorf("sampler tick gave %d records for %d sockets", len(recs), n)
		}

		// In process: the netlink dump and decode alone.
		conn, err := netlink.Open("")
		if err != nil {
			return err
		}
		c0, t0 = selfCPU(), time.Now()
		decoded := 0
		var bytes int64
		for _, fam := range []uint8{netlink.AFInet, netlink.AFInet6} {
			ds, err := conn.Dump(ctx, netlink.Request{Family: fam, States: netlink.States(netlink.StateEstablished), Ext: netlink.ExtTCPSample},
				func(msg []byte) error {
					if _, err := netlink.Decode(msg); err == nil {
						decoded++
					}
					return nil
				})
			if err != nil {
				return err
			}
			bytes += ds.Bytes
		}
		dumpR = append(dumpR, result{wall: time.Since(t0), cpu: selfCPU() - c0, bytes: bytes})
		conn.Close()
		if decoded != n {
			return fmt.Errorf("dump decoded %d of %d sockets", decoded, n)
		}
	}
	s, p, tk, d := median(ssR), median(procR), median(tickR), median(dumpR)
	k := fmt.Sprintf("%dk", n/1000)
	fmt.Printf("netlink dump+decode %s sockets (in process): %s wall, %s CPU, %.1f MB netlink\n", k, ms(d.wall), ms(d.cpu), float64(d.bytes)/1e6)
	fmt.Printf("netlink sampler tick %s sockets (in process, records, no JSON): %s wall, %s CPU\n", k, ms(tk.wall), ms(tk.cpu))
	fmt.Printf("ccab-collector sample --once %s sockets (process, JSON out): %s wall, %s CPU, %.1f MB JSON, peak RSS %d MB\n", k, ms(p.wall), ms(p.cpu), float64(p.bytes)/1e6, p.rssKB/1024)
	fmt.Printf("ss -tinHOe %s sockets (process, text out): %s wall, %s CPU, %.1f MB text\n", k, ms(s.wall), ms(s.cpu), float64(s.bytes)/1e6)
	fmt.Printf("netlink dump %s sockets: %s wall, %s CPU; ss -tinHOe: %s wall, %s CPU; ratio ss/ours = %.1f× wall, %.1f× CPU (ours = sampler tick in process); ratio ss/ccab-collector process = %.1f× wall, %.1f× CPU (median of %d)\n",
		k, ms(tk.wall), ms(tk.cpu), ms(s.wall), ms(s.cpu),
		s.wall.Seconds()/tk.wall.Seconds(), s.cpu.Seconds()/tk.cpu.Seconds(),
		s.wall.Seconds()/p.wall.Seconds(), s.cpu.Seconds()/p.cpu.Seconds(), reps)
	return nil
}

func rss(n int, collector string) error {
	k := fmt.Sprintf("%dk", n/1000)
	for _, v := range []struct {
		label string
		args  []string
	}{
		{"defaults (cap 20000/tick), 3 ticks", []string{"--reps", "3", "--interval", "1s"}},
		{"no cap, 3 ticks", []string{"--reps", "3", "--interval", "1s", "--max-per-tick", "-1", "--max-tick-time", "-1s"}},
		{"sample-rate 0.1, 3 ticks", []string{"--reps", "3", "--interval", "1s", "--sample-rate", "0.1"}},
	} {
		r, err := child(collector, append([]string{"sample", "--salt", "bench"}, v.args...)...)
		if err != nil {
			return err
		}
		fmt.Printf("sampler RSS with %s sockets, %s: peak %d MB (%s wall, %s CPU for 3 ticks, %.1f MB JSON)\n",
			k, v.label, r.rssKB/1024, ms(r.wall-2*time.Second), ms(r.cpu), float64(r.bytes)/1e6)
	}
	return nil
}
