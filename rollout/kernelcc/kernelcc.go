// Package kernelcc reads and sets the kernel's TCP congestion control: the sysctls under
// net.ipv4 (tcp_available_congestion_control, tcp_allowed_congestion_control,
// tcp_congestion_control) and the BBR module's version. Only this package writes sysctls.
//
// net.ipv4.tcp_congestion_control is per network namespace and /proc/sys/net shows the
// namespace of the calling thread: call these methods inside netns.Do to act on another
// namespace. A non-init namespace may only choose a name listed in the init namespace's
// tcp_allowed_congestion_control (the kernel answers EPERM otherwise).
package kernelcc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Kernel reads procfs and sysfs below the given roots ("/proc", "/sys" on a host; a
// directory tree in tests).
type Kernel struct {
	ProcFS string
	SysFS  string
	// LoadModules allows Ensure to run modprobe tcp_<name> for a name that is not available.
	LoadModules bool
	// Modprobe is the modprobe command (default "modprobe").
	Modprobe string
}

// ErrNotAvailable: the kernel does not offer the algorithm (and no module was loaded).
var ErrNotAvailable = errors.New("not available")

func (k Kernel) sysctl(name string) string {
	return filepath.Join(k.ProcFS, "sys/net/ipv4", name)
}

func (k Kernel) readList(name string) ([]string, error) {
	b, err := os.ReadFile(k.sysctl(name))
	if err != nil {
		return nil, fmt.Errorf("read net.ipv4.%s: %w", name, err)
	}
	return strings.Fields(string(b)), nil
}

// Available is net.ipv4.tcp_available_congestion_control (global).
func (k Kernel) Available() ([]string, error) { return k.readList("tcp_available_congestion_control") }

// Allowed is net.ipv4.tcp_allowed_congestion_control (global; what non-init namespaces may set).
func (k Kernel) Allowed() ([]string, error) { return k.readList("tcp_allowed_congestion_control") }

// Current is net.ipv4.tcp_congestion_control of the calling thread's namespace.
func (k Kernel) Current() (string, error) {
	b, err := os.ReadFile(k.sysctl("tcp_congestion_control"))
	if err != nil {
		return "", fmt.Errorf("read net.ipv4.tcp_congestion_control: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Release is the kernel release (kernel.osrelease).
func (k Kernel) Release() string {
	b, err := os.ReadFile(filepath.Join(k.ProcFS, "sys/kernel/osrelease"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Ensure checks that name is available, loading module tcp_<name> first if LoadModules is set
// and it is not. It returns the available list it checked against and an error wrapping
// ErrNotAvailable when the kernel does not offer name.
func (k Kernel) Ensure(name string) ([]string, error) {
	avail, err := k.Available()
	if err != nil {
		return nil, err
	}
	if slices.Contains(avail, name) {
		return avail, nil
	}
	if !k.LoadModules {
		return avail, fmt.Errorf("congestion control %q %w (kernel offers %s; module loading is off)",
			name, ErrNotAvailable, strings.Join(avail, " "))
	}
	mp := k.Modprobe
	if mp == "" {
		mp = "modprobe"
	}
	out, merr := exec.Command(mp, "tcp_"+name).CombinedOutput()
	if avail2, err := k.Available(); err == nil {
		avail = avail2
	}
	if slices.Contains(avail, name) {
		return avail, nil
	}
	return avail, fmt.Errorf("congestion control %q %w (kernel offers %s; %s tcp_%s: %v %s)",
		name, ErrNotAvailable, strings.Join(avail, " "), mp, name, merr, strings.TrimSpace(string(out)))
}

// Set writes net.ipv4.tcp_congestion_control of the calling thread's namespace and reads it
// back; it returns the value read back.
func (k Kernel) Set(name string) (string, error) {
	f, err := os.OpenFile(k.sysctl("tcp_congestion_control"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return k.readBack(fmt.Errorf("open net.ipv4.tcp_congestion_control for writing: %w", err))
	}
	_, werr := f.Write([]byte(name + "\n"))
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr != nil {
		if errors.Is(werr, syscall.EPERM) {
			werr = fmt.Errorf("%w (a non-init network namespace may only set a name in the init namespace's "+
				"net.ipv4.tcp_allowed_congestion_control)", werr)
		}
		return k.readBack(fmt.Errorf("set net.ipv4.tcp_congestion_control=%s: %w", name, werr))
	}
	got, err := k.Current()
	if err != nil {
		return "", err
	}
	if got != name {
		return got, fmt.Errorf("net.ipv4.tcp_congestion_control reads back %q after setting %q", got, name)
	}
	return got, nil
}

func (k Kernel) readBack(err error) (string, error) {
	cur, _ := k.Current()
	return cur, err
}

// BBRVersion tells which BBR the kernel's "bbr" is, as far as sysfs can: "3" when module
// tcp_bbr declares MODULE_VERSION "3" (/sys/module/tcp_bbr/version), the version it declares
// otherwise, and "1" when it declares none (mainline BBR has no MODULE_VERSION). "" when bbr
// is not available. bbr2 (Google's v2alpha) is its own name: BBRVersion("bbr2") is "2" (and "bbr3", ccab's BPF one, "3").
func (k Kernel) BBRVersion(name string, avail []string) string {
	if !slices.Contains(avail, name) {
		return ""
	}
	switch name {
	case "bbr2":
		return "2"
	case "bbr3":
		return "3"
	case "bbr":
		b, err := os.ReadFile(filepath.Join(k.SysFS, "module/tcp_bbr/version"))
		if err != nil {
			return "1"
		}
		return strings.TrimSpace(string(b))
	}
	return ""
}
