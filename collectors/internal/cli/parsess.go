package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/ss"
)

// bootIDPath holds the kernel's boot id, which keys sock_id by default.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// ParseSS is `parse-ss`: ss -tin / ss -tinHOe text on stdin → tcp_sample/1 JSON lines.
func ParseSS() Command {
	return Command{Name: "parse-ss", Summary: "ss -tin or ss -tinHOe text on stdin → tcp_sample/1 JSON lines", Run: runParseSS}
}

func runParseSS(ctx context.Context, env Env, args []string) int {
	const cmd = "parse-ss"
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	tsMs := fs.Int64("ts-ms", 0, "sampling time, unix epoch ms (default now)")
	salt := fs.String("salt", "", "secret salt of sock_id (keep it the same across the fleet)")
	bootID := fs.String("boot-id", "", "boot id that keys sock_id (default: "+bootIDPath+")")
	netnsIno := fs.Uint64("netns-inode", 0, "inode of the network namespace ss ran in (stat -L -c %i /proc/self/ns/net there), so that sock_id matches the netlink sampler's; 0: a namespace-less sock_id")
	state := fs.String("state", "ESTAB", "state to record when ss printed no State column (ss … state established)")
	strict := fs.Bool("strict", false, "exit 1 if any line was skipped")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ss -tinHOe state established | ccab-collector %s [flags]\n\n", cmd)
		fs.PrintDefaults()
	}
	if done, status := parseFlags(fs, env, args); done {
		return status
	}
	meta, err := h.meta()
	if err != nil {
		return usageError(env.Stderr, cmd, err)
	}
	meta.TsMs = *tsMs
	if meta.TsMs == 0 {
		meta.TsMs = env.Now().UnixMilli()
	}
	if *bootID == "" && env.ReadFile != nil {
		if b, err := env.ReadFile(bootIDPath); err == nil {
			*bootID = strings.TrimSpace(string(b))
		}
	}
	if *salt == "" {
		fmt.Fprintf(env.Stderr, "%s: warning: --salt is empty; sock_id can then be recomputed from a guessed 4-tuple\n", cmd)
	}
	key := anon.SockKey{Salt: *salt, BootID: *bootID, Netns: *netnsIno}.Hasher()

	out := bufio.NewWriter(env.Stdout)
	enc := record.NewEncoder(out)
	sk := newSkips(cmd, env.Stderr)
	records, partial := 0, 0
	sc := ss.NewScanner(env.Stdin)
	for sc.Scan() {
		if ctx.Err() != nil {
			break
		}
		e := sc.Entry()
		sock, err := ss.ParseEntry(e, ss.Options{DefaultState: *state})
		if err != nil {
			reason := "error"
			var pe *ss.ParseError
			if errors.As(err, &pe) {
				reason = string(pe.Reason)
			}
			sk.add(e.Lines(), reason, e.LastLine-e.FirstLine+1, err)
			continue
		}
		if len(sock.Unread) > 0 {
			partial++
			if partial <= maxReported {
				fmt.Fprintf(env.Stderr, "%s: %s: kept; unreadable, so null: %s\n", cmd, e.Lines(), strings.Join(sock.Unread, "; "))
			}
		}
		r := sock.Record(key, meta)
		if err := enc.Encode(&r); err != nil {
			fmt.Fprintf(env.Stderr, "%s: %s: %v\n", cmd, e.Lines(), err)
			return ExitFailure
		}
		records++
	}
	if partial > 0 {
		fmt.Fprintf(env.Stderr, "%s: %d records with unreadable tokens (their fields null)\n", cmd, partial)
	}
	return finish(env, cmd, out, sc.Err(), sk, records, *strict)
}

// finish flushes the output and prints the summary line.
func finish(env Env, cmd string, out *bufio.Writer, readErr error, sk *skips, records int, strict bool) int {
	status := ExitOK
	if err := out.Flush(); err != nil {
		fmt.Fprintf(env.Stderr, "%s: write: %v\n", cmd, err)
		status = ExitFailure
	}
	if readErr != nil {
		fmt.Fprintf(env.Stderr, "%s: read: %v\n", cmd, readErr)
		status = ExitFailure
	}
	fmt.Fprintln(env.Stderr, sk.summary(records))
	if strict && sk.total > 0 {
		status = ExitFailure
	}
	return status
}
