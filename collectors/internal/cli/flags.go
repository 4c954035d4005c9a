package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ccab-dev/ccab/collectors/record"
)

// hostFlags are the record.Meta fields every subcommand takes.
type hostFlags struct {
	pop, host, kernel, arm, rolloutID string
	sampleRate                        float64
}

func (h *hostFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&h.pop, "pop", "", "`PoP` the host belongs to")
	fs.StringVar(&h.host, "host", "", "host `name`")
	fs.StringVar(&h.kernel, "kernel", "", "kernel release of the host (uname -r)")
	fs.StringVar(&h.arm, "arm", "", "rollout arm of the host (\"\" when none)")
	fs.StringVar(&h.rolloutID, "rollout-id", "", "rollout the arm belongs to (\"\" when none)")
	fs.Float64Var(&h.sampleRate, "sample-rate", 1, "probability with which each record was sampled, in (0, 1]")
}

func (h *hostFlags) meta() (record.Meta, error) {
	if !(h.sampleRate > 0 && h.sampleRate <= 1) {
		return record.Meta{}, fmt.Errorf("--sample-rate %v is not in (0, 1]", h.sampleRate)
	}
	return record.Meta{Pop: h.pop, Host: h.host, Kernel: h.kernel, Arm: h.arm, RolloutID: h.rolloutID,
		SampleRate: h.sampleRate}, nil
}

// parseFlags parses args, then fills every flag not given on the command line from the
// environment variable CCAB_<NAME> (upper case, '-' → '_'). It returns done=true with the
// exit status when the command should stop (help, or a usage error, already reported).
func parseFlags(fs *flag.FlagSet, env Env, args []string) (done bool, status int) {
	fs.SetOutput(env.Stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, ExitOK
		}
		return true, ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "%s: unexpected arguments %q (input is read from stdin)\n", fs.Name(), fs.Args())
		return true, ExitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		name := envName(f.Name)
		if v := env.Getenv(name); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
		}
	})
	if err != nil {
		fmt.Fprintf(env.Stderr, "%s: %v\n", fs.Name(), err)
		return true, ExitUsage
	}
	return false, ExitOK
}

// EnvPrefix is the one rule of ccab-collector's environment: every flag of every subcommand
// is also CCAB_COLLECTOR_<FLAG> (run's config.EnvPrefix is the same string; a test checks it).
const EnvPrefix = "CCAB_COLLECTOR_"

func envName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func usageError(w io.Writer, cmd string, err error) int {
	fmt.Fprintf(w, "%s: %v\n", cmd, err)
	return ExitUsage
}
