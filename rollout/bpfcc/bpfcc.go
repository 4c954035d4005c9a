// Package bpfcc loads ccab's congestion controls written as BPF (struct_ops
// tcp_congestion_ops: bbr2, bbr3, vivace; sources in rollout/bpf/cc/) into the kernel, so that a
// host whose kernel lacks them can still run them. See rollout/bpf/cc/README.md.
//
// Registration is global to the kernel and outlives the process that made it: the struct_ops
// link and the exported-state map are pinned in bpffs under Dir (default /sys/fs/bpf/ccab-cc/).
// Removing the link's pin unregisters the algorithm (sockets already using it keep it until they
// close: the kernel holds a reference). Which hosts (agents) use an algorithm is kept as one file
// per user in UsersDir; Release removes a user and unloads the algorithm with the last one.
package bpfcc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Impl values: which implementation of a congestion control runs (contract field cc_impl).
const (
	ImplKernel = "kernel"   // built into the kernel or a module
	ImplBPF    = "ccab-bpf" // one of ours, loaded by this package
)

// Defaults.
const (
	DefaultDir      = "/sys/fs/bpf/ccab-cc"
	DefaultUsersDir = "/run/ccab-cc/users"
	bpffsRoot       = "/sys/fs/bpf"
	linkPin         = "link"
	statePin        = "state"
)

// ErrUnsupported: the kernel cannot run BPF congestion controls (no BTF, no struct_ops, no
// bpffs). The error text says which.
var ErrUnsupported = errors.New("kernel cannot load BPF congestion controls")

type object struct {
	load func() (*ebpf.CollectionSpec, error)
}

var objects = map[string]object{
	"bbr2":   {loadBbr2},
	"bbr3":   {loadBbr3},
	"vivace": {loadVivace},
}

// Names are the congestion controls this package can load.
func Names() []string {
	n := make([]string, 0, len(objects))
	for k := range objects {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Offers tells whether name is one of ours.
func Offers(name string) bool { _, ok := objects[name]; return ok }

// Loader loads, tracks and unloads the algorithms. The zero value uses the defaults.
type Loader struct {
	Dir      string // bpffs directory for the pins (default DefaultDir)
	UsersDir string // who uses which algorithm (default DefaultUsersDir)
	BTFPath  string // kernel BTF (default /sys/kernel/btf/vmlinux)
	ProcFS   string // default /proc

	// As registers an algorithm under another name (tests: a unique name, so that they never
	// touch a "bbr2" someone else registered).
	As map[string]string
}

// kname is the name name is registered under.
func (l Loader) kname(name string) string {
	if n, ok := l.As[name]; ok {
		return n
	}
	return name
}

func (l Loader) dir() string      { return or(l.Dir, DefaultDir) }
func (l Loader) usersDir() string { return or(l.UsersDir, DefaultUsersDir) }
func (l Loader) procfs() string   { return or(l.ProcFS, "/proc") }

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Check says why this kernel cannot run our algorithms (nil when it can): kernel BTF, the
// struct_ops map type, and a bpffs for the pins (mounted at /sys/fs/bpf when nothing is).
func (l Loader) Check() error {
	btfPath := or(l.BTFPath, "/sys/kernel/btf/vmlinux")
	if _, err := os.Stat(btfPath); err != nil {
		return fmt.Errorf("%w: no kernel BTF (%v); needs CONFIG_DEBUG_INFO_BTF", ErrUnsupported, err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if err := features.HaveMapType(ebpf.StructOpsMap); err != nil {
		return fmt.Errorf("%w: no struct_ops maps (%v); needs Linux 5.6+ with CONFIG_BPF_JIT and BTF", ErrUnsupported, err)
	}
	if err := ensureBPFFS(filepath.Dir(l.dir())); err != nil {
		return fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	return nil
}

// ensureBPFFS mounts bpffs at /sys/fs/bpf if dir is below it and nothing is mounted there.
func ensureBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if dir != bpffsRoot && !strings.HasPrefix(dir, bpffsRoot+"/") {
		return fmt.Errorf("%s is not on a bpffs", dir)
	}
	if err := unix.Statfs(bpffsRoot, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return os.MkdirAll(dir, 0o700)
	}
	if err := unix.Mount("bpf", bpffsRoot, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %v", bpffsRoot, err)
	}
	return os.MkdirAll(dir, 0o700)
}

func (l Loader) available() ([]string, error) {
	b, err := os.ReadFile(filepath.Join(l.procfs(), "sys/net/ipv4/tcp_available_congestion_control"))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

func (l Loader) allowed() ([]string, error) {
	b, err := os.ReadFile(filepath.Join(l.procfs(), "sys/net/ipv4/tcp_allowed_congestion_control"))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// Loaded reports whether name is registered by us (its link is pinned).
func (l Loader) Loaded(name string) bool {
	_, err := os.Stat(filepath.Join(l.dir(), l.kname(name), linkPin))
	return err == nil
}

// Ensure registers name (one of Names) unless it is registered already, and checks that the
// kernel then lists it in tcp_available_congestion_control and tcp_allowed_congestion_control
// (our algorithms carry TCP_CONG_NON_RESTRICTED, so network namespaces may choose them).
// It returns true when it loaded the algorithm now. A kernel that offers name itself (its own
// module) is not overridden: Ensure refuses, callers use the kernel's.
func (l Loader) Ensure(name string) (bool, error) {
	obj, ok := objects[name]
	if !ok {
		return false, fmt.Errorf("no BPF implementation of %q (have %s)", name, strings.Join(Names(), ", "))
	}
	kn := l.kname(name)
	avail, err := l.available()
	if err != nil {
		return false, err
	}
	if l.Loaded(name) {
		if !slices.Contains(avail, kn) {
			return false, fmt.Errorf("%s is pinned at %s but the kernel does not list it: remove the stale pin",
				kn, filepath.Join(l.dir(), kn))
		}
		return false, l.verify(kn)
	}
	if slices.Contains(avail, kn) {
		return false, fmt.Errorf("the kernel offers its own %s: not loading ccab's BPF one over it", kn)
	}
	if err := l.Check(); err != nil {
		return false, err
	}
	spec, err := obj.load()
	if err != nil {
		return false, fmt.Errorf("%s: read BPF object: %w", name, err)
	}
	if err := setStructOpsName(spec, kn); err != nil {
		return false, err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return false, fmt.Errorf("%s: the verifier refused it: %v", name, ve)
		}
		return false, fmt.Errorf("%s: load: %w", name, err)
	}
	defer coll.Close()
	var ops *ebpf.Map
	for _, m := range coll.Maps {
		if m.Type() == ebpf.StructOpsMap {
			ops = m
		}
	}
	if ops == nil {
		return false, fmt.Errorf("%s: object has no struct_ops map", name)
	}
	lk, err := link.AttachStructOps(link.StructOpsOptions{Map: ops})
	if err != nil {
		return false, fmt.Errorf("%s: register tcp_congestion_ops: %w", name, err)
	}
	defer lk.Close()
	dir := filepath.Join(l.dir(), kn)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	if st := coll.Maps["cc_state"]; st != nil {
		_ = os.Remove(filepath.Join(dir, statePin))
		if err := st.Pin(filepath.Join(dir, statePin)); err != nil {
			return false, fmt.Errorf("%s: pin state map: %w", name, err)
		}
	}
	if err := lk.Pin(filepath.Join(dir, linkPin)); err != nil {
		_ = os.RemoveAll(dir)
		return false, fmt.Errorf("%s: pin link: %w", name, err)
	}
	return true, l.verify(kn)
}

func (l Loader) verify(name string) error {
	avail, err := l.available()
	if err != nil {
		return err
	}
	if !slices.Contains(avail, name) {
		return fmt.Errorf("%s registered but not in tcp_available_congestion_control (%s)", name, strings.Join(avail, " "))
	}
	allowed, err := l.allowed()
	if err != nil {
		return err
	}
	if !slices.Contains(allowed, name) {
		return fmt.Errorf("%s registered but not in tcp_allowed_congestion_control (%s)", name, strings.Join(allowed, " "))
	}
	return nil
}

// setStructOpsName writes name into the tcp_congestion_ops .name of the object's struct_ops map.
func setStructOpsName(spec *ebpf.CollectionSpec, name string) error {
	if len(name) >= 16 {
		return fmt.Errorf("congestion control name %q longer than 15 bytes", name)
	}
	for _, ms := range spec.Maps {
		if ms.Type != ebpf.StructOpsMap {
			continue
		}
		st, ok := ms.Value.(*btf.Struct)
		if !ok || len(ms.Contents) != 1 {
			return fmt.Errorf("struct_ops map %s: unexpected layout", ms.Name)
		}
		data, ok := ms.Contents[0].Value.([]byte)
		if !ok {
			return fmt.Errorf("struct_ops map %s: unexpected contents", ms.Name)
		}
		for _, m := range st.Members {
			if m.Name != "name" {
				continue
			}
			off := int(m.Offset.Bytes())
			if off+16 > len(data) {
				return fmt.Errorf("struct_ops map %s: name outside the value", ms.Name)
			}
			field := data[off : off+16]
			clear(field)
			copy(field, name)
			return nil
		}
		return fmt.Errorf("struct_ops map %s: no name member", ms.Name)
	}
	return fmt.Errorf("object has no struct_ops map")
}

// Unload unregisters name (removes its pins) and waits until the kernel no longer lists it
// (the link is released by a kernel work item, after the pin is gone). Sockets using it keep it
// until they close. It is not an error when name is not loaded.
func (l Loader) Unload(name string) error {
	kn := l.kname(name)
	dir := filepath.Join(l.dir(), kn)
	err := os.Remove(filepath.Join(dir, linkPin))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unload %s: %w", name, err)
	}
	if err == nil {
		for i := 0; ; i++ {
			avail, aerr := l.available()
			if aerr != nil || !slices.Contains(avail, kn) {
				break
			}
			if i == 500 {
				return fmt.Errorf("unload %s: still in tcp_available_congestion_control 5 s after its link was unpinned", kn)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := os.Remove(filepath.Join(dir, statePin)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unload %s: %w", name, err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) {
		return fmt.Errorf("unload %s: %w", name, err)
	}
	return nil
}

func (l Loader) userFile(name, user string) (string, error) {
	if user == "" || strings.ContainsAny(user, "/\x00") || user == "." || user == ".." {
		return "", fmt.Errorf("bad user name %q", user)
	}
	return filepath.Join(l.usersDir(), name, user), nil
}

// lock serialises Use and Release across processes (the agents of one machine, one per host
// namespace in a lab, apply the same algorithm at the same moment): an exclusive flock on
// UsersDir/.lock. Without it, concurrent loaders raced and all but one failed to register.
func (l Loader) lock() (func(), error) {
	if err := os.MkdirAll(l.usersDir(), 0o755); err != nil {
		return nil, err
	}
	fd, err := unix.Open(filepath.Join(l.usersDir(), ".lock"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", l.usersDir(), err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock %s: %w", l.usersDir(), err)
	}
	return func() { unix.Close(fd) }, nil
}

// Use ensures name is loaded and records user (an agent's host name) as using it.
func (l Loader) Use(name, user string) (loaded bool, err error) {
	f, err := l.userFile(name, user)
	if err != nil {
		return false, err
	}
	unlock, err := l.lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	if loaded, err = l.Ensure(name); err != nil {
		return loaded, err
	}
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		return loaded, err
	}
	return loaded, os.WriteFile(f, nil, 0o644)
}

// Users lists who uses name.
func (l Loader) Users(name string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(l.usersDir(), name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}

// Release records that user no longer uses name and unloads name when no one does. It
// returns true when it unloaded.
func (l Loader) Release(name, user string) (bool, error) {
	f, err := l.userFile(name, user)
	if err != nil {
		return false, err
	}
	unlock, err := l.lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	users, err := l.Users(name)
	if err != nil || len(users) > 0 || !l.Loaded(name) {
		return false, err
	}
	return true, l.Unload(name)
}
