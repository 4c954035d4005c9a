package netlink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccab-dev/ccab/collectors/internal/netns"
)

// ErrStop, returned by a Dump callback, ends the dump early without an error.
var ErrStop = errors.New("netlink: stop dump")

// RecvBufferSize is the receive buffer of a Conn. The kernel sends a dump in datagrams of
// at most 32 KiB (netlink_dump caps max_recvmsg_len there), so this never truncates.
const RecvBufferSize = 64 << 10

// recvTimeout bounds one recvmsg: a kernel that stops answering a dump is an error.
const recvTimeout = 5 * time.Second

// Conn is a NETLINK_SOCK_DIAG socket. It stays in the network namespace it was created in,
// whatever thread later uses it. A Conn is not safe for concurrent use.
type Conn struct {
	ns     string // namespace file, "" for the process's own
	inode  uint64 // inode of the network namespace (0 if it could not be read)
	fd     int    // -1 when closed or broken
	seq    uint32
	buf    []byte
	closed bool
}

// Open returns a sock_diag socket in the network namespace whose file is nsPath
// (/run/netns/NAME, /proc/PID/ns/net; see netns.Path), or in the process's own namespace
// when nsPath is "". Entering another namespace needs CAP_SYS_ADMIN; dumping TCP sockets
// with tcp_info needs no privilege.
func Open(nsPath string) (*Conn, error) {
	c := &Conn{ns: nsPath, fd: -1, buf: make([]byte, RecvBufferSize), seq: uint32(time.Now().UnixNano())}
	if err := c.open(); err != nil {
		return nil, err
	}
	return c, nil
}

// NetnsInode returns the inode of the Conn's network namespace (its id on this boot, as
// `ls -iL /proc/self/ns/net` or `stat -L -c %i` shows it; 0 if it could not be read). It keys
// sock_id.
func (c *Conn) NetnsInode() uint64 { return c.inode }

// Namespace returns the namespace file the Conn was opened in ("" for the process's own).
func (c *Conn) Namespace() string { return c.ns }

func (c *Conn) open() error {
	fd := -1
	err := netns.Do(c.ns, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
		var st unix.Stat_t
		if err == nil && unix.Stat("/proc/thread-self/ns/net", &st) == nil {
			c.inode = st.Ino
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("open sock_diag socket%s: %w", nsSuffix(c.ns), err)
	}
	tv := unix.NsecToTimeval(recvTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return fmt.Errorf("sock_diag socket%s: SO_RCVTIMEO: %w", nsSuffix(c.ns), err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("bind sock_diag socket%s: %w", nsSuffix(c.ns), err)
	}
	c.fd = fd
	return nil
}

func nsSuffix(ns string) string {
	if ns == "" {
		return ""
	}
	return " in " + ns
}

// Close releases the socket.
func (c *Conn) Close() error {
	c.closed = true
	return c.drop()
}

// drop closes the socket after a dump that did not run to its end (its remaining messages
// would otherwise be read by the next dump); the next Dump opens a new one.
func (c *Conn) drop() error {
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}

// DumpStats describes one dump.
type DumpStats struct {
	Messages    int   // SOCK_DIAG_BY_FAMILY messages handed to the callback
	Bytes       int64 // bytes received
	Recvs       int   // recvmsg calls
	Interrupted bool  // NLM_F_DUMP_INTR: sockets came or went during the dump (normal on busy hosts)
	Stale       int   // messages of an older request, skipped
	Stopped     bool  // the callback returned ErrStop
}

// Dump sends req and calls fn with every message of the answer, one at a time, as the
// kernel streams them: nothing is held beyond the current datagram, and msg is only valid
// during the call. fn returning ErrStop ends the dump early (no error); any other error
// ends it and is returned. Errors name the family and the namespace.
func (c *Conn) Dump(ctx context.Context, req Request, fn func(msg []byte) error) (DumpStats, error) {
	var st DumpStats
	if c.closed {
		return st, fmt.Errorf("netlink dump of %s: connection closed", FamilyName(req.Family))
	}
	if c.fd < 0 {
		if err := c.open(); err != nil {
			return st, fmt.Errorf("netlink dump of %s: %w", FamilyName(req.Family), err)
		}
	}
	fail := func(err error) (DumpStats, error) {
		c.drop()
		return st, fmt.Errorf("netlink dump of %s%s: %w", FamilyName(req.Family), nsSuffix(c.ns), err)
	}
	c.seq++
	if err := unix.Sendto(c.fd, req.Marshal(c.seq), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fail(fmt.Errorf("send request: %w", err))
	}
	le := binary.LittleEndian
	for {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		n, _, rflags, _, err := unix.Recvmsg(c.fd, c.buf, nil, 0)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if errors.Is(err, syscall.EAGAIN) {
				return fail(fmt.Errorf("no answer within %s", recvTimeout))
			}
			return fail(fmt.Errorf("recvmsg: %w", err))
		}
		st.Recvs++
		st.Bytes += int64(n)
		if rflags&unix.MSG_TRUNC != 0 {
			return fail(fmt.Errorf("datagram larger than the %d-byte buffer", len(c.buf)))
		}
		b := c.buf[:n]
		for len(b) >= nlmsgHdrLen {
			l := int(le.Uint32(b[0:]))
			if l < nlmsgHdrLen || l > len(b) {
				return fail(fmt.Errorf("malformed nlmsghdr: length %d with %d bytes left", l, len(b)))
			}
			typ, flags, seq := le.Uint16(b[4:]), le.Uint16(b[6:]), le.Uint32(b[8:])
			msg := b[:l]
			adv := (l + 3) &^ 3
			if adv > len(b) {
				adv = len(b)
			}
			b = b[adv:]
			if seq != c.seq {
				st.Stale++
				continue
			}
			if flags&nlmFDumpIntr != 0 {
				st.Interrupted = true
			}
			switch typ {
			case nlmsgDone:
				// The payload of NLMSG_DONE is an int: a negative errno when the dump failed.
				if l >= nlmsgHdrLen+4 {
					if e := int32(le.Uint32(msg[nlmsgHdrLen:])); e < 0 {
						return fail(fmt.Errorf("kernel ended the dump with %w", syscall.Errno(-e)))
					}
				}
				return st, nil
			case nlmsgError:
				if l >= nlmsgHdrLen+4 {
					if e := int32(le.Uint32(msg[nlmsgHdrLen:])); e < 0 {
						return fail(fmt.Errorf("kernel refused the request: %w", syscall.Errno(-e)))
					}
				}
				continue // an ACK
			case sockDiagByFamily:
				st.Messages++
				if err := fn(msg); err != nil {
					c.drop()
					if errors.Is(err, ErrStop) {
						st.Stopped = true
						return st, nil
					}
					return st, err
				}
			}
		}
	}
}
