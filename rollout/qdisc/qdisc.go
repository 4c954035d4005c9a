// Package qdisc ensures the root queueing discipline on egress interfaces with tc(8) and
// reads it back. Commands run in the calling thread's network namespace: call it inside
// netns.Do (a child process inherits the namespace of the locked thread that starts it).
//
// A qdisc the kernel does not offer (e.g. fq without sch_fq) is an error naming the
// interface and tc's message, for the agent to report; nothing here panics or retries.
package qdisc

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"sort"
	"strings"
)

// Tc runs tc; Path "" is "tc" from PATH.
type Tc struct {
	Path string
	// Interfaces to manage; empty means every interface that is up and not loopback.
	Interfaces []string
}

func (t Tc) bin() string {
	if t.Path == "" {
		return "tc"
	}
	return t.Path
}

// Egress lists the interfaces to manage.
func (t Tc) Egress() ([]string, error) {
	if len(t.Interfaces) > 0 {
		return t.Interfaces, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var out []string
	for _, i := range ifs {
		if i.Flags&net.FlagUp != 0 && i.Flags&net.FlagLoopback == 0 {
			out = append(out, i.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Root returns the kind of the root qdisc of dev ("noqueue", "fq", "pfifo_fast", ...).
func (t Tc) Root(dev string) (string, error) {
	out, err := exec.Command(t.bin(), "-j", "qdisc", "show", "dev", dev, "root").Output()
	if err != nil {
		return "", fmt.Errorf("tc qdisc show dev %s: %w%s", dev, err, stderr(err))
	}
	var qs []struct {
		Kind string `json:"kind"`
		Root bool   `json:"root"`
	}
	if err := json.Unmarshal(out, &qs); err != nil {
		return "", fmt.Errorf("tc -j qdisc show dev %s: %w", dev, err)
	}
	for _, q := range qs {
		if q.Root {
			return q.Kind, nil
		}
	}
	if len(qs) > 0 {
		return qs[0].Kind, nil
	}
	return "", fmt.Errorf("tc qdisc show dev %s: no root qdisc", dev)
}

// Effective summarises the root qdiscs of the egress interfaces: the kind when all agree,
// "dev=kind,dev=kind" when they differ, "" when there are no egress interfaces.
func (t Tc) Effective() (string, error) {
	devs, err := t.Egress()
	if err != nil {
		return "", err
	}
	kinds := map[string]bool{}
	parts := make([]string, 0, len(devs))
	for _, d := range devs {
		k, err := t.Root(d)
		if err != nil {
			return "", err
		}
		kinds[k] = true
		parts = append(parts, d+"="+k)
	}
	switch len(kinds) {
	case 0:
		return "", nil
	case 1:
		for k := range kinds {
			return k, nil
		}
	}
	return strings.Join(parts, ","), nil
}

// Ensure makes kind the root qdisc of every egress interface (tc qdisc replace; an
// interface that already has it is left alone) and returns Effective afterwards.
func (t Tc) Ensure(kind string) (string, error) {
	devs, err := t.Egress()
	if err != nil {
		return "", err
	}
	if len(devs) == 0 {
		return "", fmt.Errorf("qdisc %s: no egress interface (up, not loopback)", kind)
	}
	for _, d := range devs {
		cur, err := t.Root(d)
		if err != nil {
			return "", err
		}
		if cur == kind {
			continue
		}
		if out, err := exec.Command(t.bin(), "qdisc", "replace", "dev", d, "root", kind).CombinedOutput(); err != nil {
			eff, _ := t.Effective()
			return eff, fmt.Errorf("qdisc %s not set on %s: tc: %v: %s", kind, d, err, strings.TrimSpace(string(out)))
		}
	}
	eff, err := t.Effective()
	if err != nil {
		return "", err
	}
	if eff != kind {
		return eff, fmt.Errorf("qdisc %s reads back as %s", kind, eff)
	}
	return eff, nil
}

func stderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
