package link

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/ccab-dev/ccab/internal/netns"
)

// Endpoint is one side of the link: a TUN device created inside a network namespace.
type Endpoint struct {
	Netns string // name under /run/netns, a path (/proc/PID/ns/net), or "" for our own
	Dev   string // interface name (≤ 15 bytes)
	Addr  string // optional IPv4 address with prefix (10.0.0.1/24); "" leaves the device unaddressed
	MTU   int    // 0 keeps the kernel's default (1500)
}

// openTUN opens /dev/net/tun on a thread inside the endpoint's namespace, so the device is
// created there and stays there; the returned descriptor is non-blocking (the link polls it
// on its own threads, not through Go's poller) and the device disappears when it is closed
// (it is not persistent), also when the process dies.
// It then sets the address, MTU and IFF_UP with ioctls on a socket of that namespace.
func openTUN(ep Endpoint, offload bool) (int, error) {
	var fd int = -1
	err := netns.Do(netns.Path(ep.Netns), func() error {
		var err error
		fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(ep.Dev)
		if err != nil {
			return fmt.Errorf("device name %q: %w", ep.Dev, err)
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fmt.Errorf("TUNSETIFF %s: %w", ep.Dev, err)
		}
		if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetHdrLen); err != nil {
			return fmt.Errorf("TUNSETVNETHDRSZ: %w", err)
		}
		off := 0
		if offload {
			off = tunFCsum | tunFTSO4 | tunFTSO6
		}
		if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, off); err != nil {
			return fmt.Errorf("TUNSETOFFLOAD: %w", err)
		}
		return configure(ep)
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, err
	}
	return fd, nil
}

// configure runs on a thread inside the endpoint's namespace.
func configure(ep Endpoint) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(s)
	ifr, _ := unix.NewIfreq(ep.Dev)
	if ep.MTU > 0 {
		ifr.SetUint32(uint32(ep.MTU))
		if err := unix.IoctlIfreq(s, unix.SIOCSIFMTU, ifr); err != nil {
			return fmt.Errorf("set MTU %d on %s: %w", ep.MTU, ep.Dev, err)
		}
	}
	if ep.Addr != "" {
		pfx, err := netip.ParsePrefix(ep.Addr)
		if err != nil || !pfx.Addr().Is4() {
			return fmt.Errorf("address %q: want IPv4 with a prefix length (10.0.0.1/24)", ep.Addr)
		}
		a := pfx.Addr().As4()
		if err := ifr.SetInet4Addr(a[:]); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(s, unix.SIOCSIFADDR, ifr); err != nil {
			return fmt.Errorf("set address %s on %s: %w", ep.Addr, ep.Dev, err)
		}
		mask := uint32(0xffffffff) << (32 - pfx.Bits())
		if pfx.Bits() == 0 {
			mask = 0
		}
		m := [4]byte{byte(mask >> 24), byte(mask >> 16), byte(mask >> 8), byte(mask)}
		if err := ifr.SetInet4Addr(m[:]); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(s, unix.SIOCSIFNETMASK, ifr); err != nil {
			return fmt.Errorf("set netmask /%d on %s: %w", pfx.Bits(), ep.Dev, err)
		}
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get flags of %s: %w", ep.Dev, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set %s up: %w", ep.Dev, err)
	}
	return nil
}
