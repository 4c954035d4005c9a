package netlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ccab-dev/ccab/collectors/internal/netns"
)

// sock_diag multicast groups (enum sknetlink_groups, include/uapi/linux/sock_diag.h). A
// NETLINK_SOCK_DIAG socket that joins one receives every TCP socket's final inet_diag
// message when the kernel destroys the socket (what `ss -E` prints), for the sockets of its
// own network namespace. On Linux 6.18 joining needs no privilege (NETLINK_SOCK_DIAG is
// NL_CFG_F_NONROOT_RECV: `nobody` without capabilities receives every user's events);
// SO_RCVBUFFORCE needs CAP_NET_ADMIN.
const (
	GroupInetTCPDestroy  = 1 // SKNLGRP_INET_TCP_DESTROY
	GroupInet6TCPDestroy = 3 // SKNLGRP_INET6_TCP_DESTROY
)

// DefaultDestroyRcvBuf is the receive buffer asked for a destroy listener (the kernel
// doubles it for its bookkeeping). One event costs about 1.3 KiB of buffer (skb truesize
// of a ~420-byte message), so 16 MiB (32 MiB charged) holds ~25,000 events: a quarter
// second of a host closing 100,000 connections per second.
const DefaultDestroyRcvBuf = 16 << 20

// destroyRecvTimeout bounds one blocking Recv, so that a reader notices its context.
const destroyRecvTimeout = 200 * time.Millisecond

// ErrOverrun is returned by Recv when the kernel reported ENOBUFS: events did not fit the
// receive buffer and were dropped (Drops counts how many).
var ErrOverrun = errors.New("netlink: destroy events dropped by the kernel (ENOBUFS)")

// DestroyConfig configures a destroy listener.
type DestroyConfig struct {
	RcvBuf     int         // receive buffer, bytes; 0: DefaultDestroyRcvBuf; SO_RCVBUFFORCE, else SO_RCVBUF (capped by net.core.rmem_max)
	LocalPorts []uint16    // in-kernel filter: only sockets with one of these local ports; empty: any
	NoFilter   bool        // do not attach a filter (it also drops never-connected sockets)
	Hash       *HashFilter // with the filter: also the sampling hash, in an eBPF program (needs CAP_BPF or CAP_SYS_ADMIN; else the classic filter alone)
	IPv4Only   bool        // join SKNLGRP_INET_TCP_DESTROY only (tests)
}

// DestroyConn is a NETLINK_SOCK_DIAG socket subscribed to the TCP destroy broadcasts of
// one network namespace. Not safe for concurrent use.
type DestroyConn struct {
	ns        string
	fd        int
	inode     uint64 // inode of the network namespace (nsfs), the namespace's id on this boot
	rcvbuf    int    // effective SO_RCVBUF (what the kernel charges against)
	forced    bool   // SO_RCVBUFFORCE worked
	filtered  bool   // a BPF filter is attached
	hashed    bool   // the eBPF filter with the sampling hash is attached
	hashErr   error  // why it is not
	buf       []byte
	lastDrops uint32
}

// OpenDestroy subscribes to the TCP destroy broadcasts of the network namespace whose file
// is nsPath ("" for the process's own). Entering another namespace needs CAP_SYS_ADMIN;
// without CAP_NET_ADMIN the receive buffer is capped by net.core.rmem_max.
func OpenDestroy(nsPath string, cfg DestroyConfig) (*DestroyConn, error) {
	if cfg.RcvBuf <= 0 {
		cfg.RcvBuf = DefaultDestroyRcvBuf
	}
	c := &DestroyConn{ns: nsPath, fd: -1, buf: make([]byte, RecvBufferSize)}
	err := netns.Do(nsPath, func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
		if err != nil {
			return err
		}
		c.fd = fd
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
			return fmt.Errorf("stat network namespace: %w", err)
		}
		c.inode = st.Ino
		return nil
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("open sock_diag destroy socket%s: %w", nsSuffix(nsPath), err)
	}
	fail := func(what string, err error) (*DestroyConn, error) {
		c.Close()
		return nil, fmt.Errorf("sock_diag destroy socket%s: %s: %w", nsSuffix(nsPath), what, err)
	}
	if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, cfg.RcvBuf); err == nil {
		c.forced = true
	} else if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, cfg.RcvBuf); err != nil {
		return fail("SO_RCVBUF", err)
	}
	if v, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
		c.rcvbuf = v
	}
	if !cfg.NoFilter && cfg.Hash != nil {
		prog, err := DestroyHashProgram(cfg.LocalPorts, *cfg.Hash)
		if err == nil {
			err = attachEBPF(c.fd, prog)
		}
		if err == nil {
			c.filtered, c.hashed = true, true
		} else {
			c.hashErr = err
		}
	}
	if !cfg.NoFilter && !c.hashed {
		prog := DestroyFilter(cfg.LocalPorts)
		if err := attachFilter(c.fd, prog); err != nil {
			return fail("SO_ATTACH_FILTER", err)
		}
		c.filtered = true
	}
	if err := unix.Bind(c.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fail("bind", err)
	}
	groups := []int{GroupInetTCPDestroy, GroupInet6TCPDestroy}
	if cfg.IPv4Only {
		groups = groups[:1]
	}
	for _, g := range groups {
		if err := unix.SetsockoptInt(c.fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, g); err != nil {
			return fail(fmt.Sprintf("join group %d", g), err)
		}
	}
	c.lastDrops, _ = c.kernelDrops()
	// Blocking with a timeout, deliberately not in Go's network poller: the poller keeps the
	// socket in its epoll set (edge-triggered) all the time, so every event arriving while
	// the reader lets events queue (closecap's coalescing) would wake an idle scheduler
	// thread for nothing. A socket nobody waits on wakes nobody.
	tv := unix.NsecToTimeval(destroyRecvTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("SO_RCVTIMEO", err)
	}
	return c, nil
}

// Namespace returns the namespace file the listener was opened in ("" for the own one).
func (c *DestroyConn) Namespace() string { return c.ns }

// NetnsInode returns the inode of the listener's network namespace.
func (c *DestroyConn) NetnsInode() uint64 { return c.inode }

// RcvBuf returns the effective receive buffer (SO_RCVBUF as the kernel reports it: twice
// what was asked) and whether SO_RCVBUFFORCE was allowed.
func (c *DestroyConn) RcvBuf() (int, bool) { return c.rcvbuf, c.forced }

// Filtered reports whether a BPF filter is attached.
func (c *DestroyConn) Filtered() bool { return c.filtered }

// HashInKernel reports whether the eBPF filter applies the sampling hash, and if not, why
// (nil when none was asked for).
func (c *DestroyConn) HashInKernel() (bool, error) { return c.hashed, c.hashErr }

// SetRcvBuf changes the receive buffer (tests shrink it to provoke ENOBUFS).
func (c *DestroyConn) SetRcvBuf(n int) error {
	if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n); err != nil {
		if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, n); err != nil {
			return err
		}
	}
	if v, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
		c.rcvbuf = v
	}
	return nil
}

// Close releases the socket.
func (c *DestroyConn) Close() error {
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}

// Recv waits up to 200 ms for an event, then calls fn with every SOCK_DIAG_BY_FAMILY
// message queued on the socket (msg is only valid during the call) and returns how many.
// It returns (0, nil) when nothing came; ErrOverrun (with the count of what it did read)
// when the kernel reported dropped events since the last call (the socket stays usable); a
// *DecodeError for a malformed datagram (skipped). It blocks its OS thread while it waits.
func (c *DestroyConn) Recv(fn func(msg []byte)) (int, error) {
	if c.fd < 0 {
		return 0, errors.New("netlink: destroy listener closed")
	}
	count := 0
	var overrun bool
	var derr error
	flags := 0 // the first recvmsg waits (SO_RCVTIMEO); the others drain
	for {
		n, _, _, _, err := unix.Recvmsg(c.fd, c.buf, nil, flags)
		switch {
		case err == nil:
		case errors.Is(err, syscall.EAGAIN):
			if overrun {
				return count, ErrOverrun
			}
			return count, derr
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ENOBUFS):
			overrun = true
			flags = unix.MSG_DONTWAIT
			continue
		default:
			return count, fmt.Errorf("recvmsg destroy events%s: %w", nsSuffix(c.ns), err)
		}
		flags = unix.MSG_DONTWAIT
		if e := c.split(c.buf[:n], fn, &count); e != nil && derr == nil {
			derr = e
		}
	}
}

// split hands each message of one datagram to fn.
func (c *DestroyConn) split(b []byte, fn func(msg []byte), count *int) error {
	le := binary.LittleEndian
	for len(b) >= nlmsgHdrLen {
		l := int(le.Uint32(b[0:]))
		if l < nlmsgHdrLen || l > len(b) {
			return &DecodeError{What: fmt.Sprintf("malformed nlmsghdr: length %d with %d bytes left", l, len(b))}
		}
		if le.Uint16(b[4:]) == sockDiagByFamily {
			*count++
			fn(b[:l])
		}
		adv := (l + 3) &^ 3
		if adv > len(b) {
			adv = len(b)
		}
		b = b[adv:]
	}
	return nil
}

// skMeminfoDrops is SK_MEMINFO_DROPS in the u32 array of SO_MEMINFO (linux/sock_diag.h).
const (
	skMeminfoDrops = 8
	skMeminfoVars  = 9
)

// kernelDrops reads the socket's drop counter (sk_drops): netlink_overrun adds one per
// event that did not fit the receive buffer (the BPF filter's rejections are not counted).
func (c *DestroyConn) kernelDrops() (uint32, error) {
	var mi [skMeminfoVars]uint32
	l := uint32(unsafe.Sizeof(mi))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(c.fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&mi[0])), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, e
	}
	if l < (skMeminfoDrops+1)*4 {
		return 0, errors.New("SO_MEMINFO too short")
	}
	return mi[skMeminfoDrops], nil
}

// Drops returns how many events the kernel dropped for this socket since the previous
// call (SO_MEMINFO's SK_MEMINFO_DROPS, a wrapping u32).
func (c *DestroyConn) Drops() (uint64, error) {
	v, err := c.kernelDrops()
	if err != nil {
		return 0, err
	}
	d := v - c.lastDrops
	c.lastDrops = v
	return uint64(d), nil
}

// Classic BPF (linux/filter.h). A filter on a netlink socket sees the message from its
// nlmsghdr; loads of halfwords and words are in network byte order.
const (
	bpfLD  = 0x00
	bpfJMP = 0x05
	bpfRET = 0x06
	bpfH   = 0x08
	bpfB   = 0x10
	bpfABS = 0x20
	bpfJEQ = 0x10
	bpfK   = 0x00

	// offsets in a destroy message: nlmsghdr (16), then inet_diag_msg
	bpfOffSport = nlmsgHdrLen + 4 // inet_diag_sockid.idiag_sport, big-endian
	bpfOffDport = nlmsgHdrLen + 6
)

// DestroyFilter returns the classic BPF program a destroy listener attaches: drop sockets
// that never had a peer (destination port 0: listeners, sockets closed before connect),
// and, with ports, sockets whose local port is not one of them. It cannot apply the
// sampling hash (see docs/collector/close-capture.md).
func DestroyFilter(ports []uint16) []unix.SockFilter {
	const accept, drop = 0xffffffff, 0
	var p []unix.SockFilter
	ins := func(code uint16, jt, jf uint8, k uint32) {
		p = append(p, unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k})
	}
	ins(bpfLD|bpfB|bpfABS, 0, 0, nlmsgHdrLen) // family, only to have a valid first load
	ins(bpfLD|bpfH|bpfABS, 0, 0, bpfOffDport)
	if len(ports) == 0 || len(ports) > 200 {
		ins(bpfJMP|bpfJEQ|bpfK, 0, 1, 0) // dport == 0 → drop
		ins(bpfRET|bpfK, 0, 0, drop)
		ins(bpfRET|bpfK, 0, 0, accept)
		return p
	}
	ins(bpfJMP|bpfJEQ|bpfK, 0, 1, 0)
	ins(bpfRET|bpfK, 0, 0, drop)
	ins(bpfLD|bpfH|bpfABS, 0, 0, bpfOffSport)
	for i, port := range ports {
		// match → jump over the remaining compares and the drop to the accept
		ins(bpfJMP|bpfJEQ|bpfK, uint8(len(ports)-i), 0, uint32(port))
	}
	ins(bpfRET|bpfK, 0, 0, drop)
	ins(bpfRET|bpfK, 0, 0, accept)
	return p
}

func attachFilter(fd int, prog []unix.SockFilter) error {
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fp)
}
