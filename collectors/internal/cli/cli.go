// Package cli holds the subcommands of ccab-collector. Each subcommand is a Command: it
// reads flags and its input from an Env, so tests run it end to end without a process.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// Exit statuses.
const (
	ExitOK      = 0
	ExitFailure = 1 // I/O error, or --strict and something was skipped
	ExitUsage   = 2
)

// Env is everything a subcommand touches outside itself.
type Env struct {
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	Getenv   func(string) string
	Now      func() time.Time
	ReadFile func(string) ([]byte, error)
}

// OSEnv is the process's environment.
func OSEnv() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv,
		Now: time.Now, ReadFile: os.ReadFile}
}

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, env Env, args []string) int
}

// Dispatch runs the command named by args[0].
func Dispatch(ctx context.Context, env Env, prog string, cmds []Command, args []string) int {
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", prog)
		sorted := append([]Command(nil), cmds...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
		for _, c := range sorted {
			fmt.Fprintf(w, "  %-12s %s\n", c.Name, c.Summary)
		}
		fmt.Fprintf(w, "\nRun '%s <command> -h' for a command's flags. Every flag can also be set\n"+
			"with an environment variable CCAB_COLLECTOR_<FLAG> (e.g. CCAB_COLLECTOR_POP,\n"+
			"CCAB_COLLECTOR_KAFKA_BROKERS); a flag on the command line wins.\n", prog)
	}
	if len(args) == 0 {
		usage(env.Stderr)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(env.Stdout)
		return ExitOK
	}
	for _, c := range cmds {
		if c.Name == args[0] {
			return c.Run(ctx, env, args[1:])
		}
	}
	fmt.Fprintf(env.Stderr, "%s: unknown command %q\n", prog, args[0])
	usage(env.Stderr)
	return ExitUsage
}

// skips counts skipped lines by reason and reports the first few on stderr.
type skips struct {
	cmd      string
	w        io.Writer
	byReason map[string]int
	total    int
	reported int
}

// maxReported bounds the per-line messages; the summary still counts every skipped line.
const maxReported = 100

func newSkips(cmd string, w io.Writer) *skips {
	return &skips{cmd: cmd, w: w, byReason: map[string]int{}}
}

func (s *skips) add(where string, reason string, nlines int, err error) {
	s.byReason[reason] += nlines
	s.total += nlines
	s.reported++
	switch {
	case s.reported <= maxReported:
		fmt.Fprintf(s.w, "%s: %s: %v\n", s.cmd, where, err)
	case s.reported == maxReported+1:
		fmt.Fprintf(s.w, "%s: more skipped lines not shown (counted in the summary)\n", s.cmd)
	}
}

func (s *skips) summary(records int) string {
	reasons := make([]string, 0, len(s.byReason))
	for r := range s.byReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%s: %d", r, s.byReason[r])
	}
	out := fmt.Sprintf("%s: %d records, %d lines skipped", s.cmd, records, s.total)
	if len(parts) > 0 {
		out += " (" + strings.Join(parts, ", ") + ")"
	}
	return out
}
