// Package netns runs code inside another network namespace. A socket belongs to the network
// namespace of the thread that created it, for its whole life, so entering a namespace is
// only needed while sockets are created: Do enters it on a locked OS thread of a fresh
// goroutine, runs fn, and goes back.
//
// Entering a namespace takes CAP_SYS_ADMIN (setns(2)), and reading /run/netns/NAME needs
// the permission to open that file.
package netns

import (
	"fmt"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is where `ip netns add NAME` bind-mounts named namespaces.
const Dir = "/run/netns"

// Path returns the file of the namespace called name: /run/netns/NAME, or name itself when
// it holds a slash (/proc/PID/ns/net). "" is the calling process's own namespace and gives
// "".
func Path(name string) string {
	if name == "" || strings.Contains(name, "/") {
		return name
	}
	return Dir + "/" + name
}

// Do runs fn with the calling OS thread in the network namespace at path ("" runs fn
// directly). fn runs on a goroutine of its own, locked to its thread; if the thread cannot
// go back to its original namespace it stays locked and the Go runtime discards it when the
// goroutine ends, so no other goroutine ever runs in the wrong namespace.
func Do(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open own network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open network namespace %s: %w", path, err)
			return
		}
		err = unix.Setns(target, unix.CLONE_NEWNET)
		unix.Close(target)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s (needs CAP_SYS_ADMIN): %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: it dies with this goroutine.
			errc <- fmt.Errorf("return from network namespace %s: %w", path, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
