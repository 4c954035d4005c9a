package netlink

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HashFilter is the poller's sampling decision as the kernel can take it (sampler.Selection):
// keep a socket when splitmix64(FNV-1a(seed; local addr16, local port, peer addr16, peer
// port)) < Threshold, addresses as 16 bytes with IPv4 in its IPv4-mapped form. Seed is the
// FNV-1a state after the salt.
type HashFilter struct {
	Seed      uint64
	Threshold uint64
}

// eBPF (linux/bpf.h): opcodes used here.
const (
	ebpfLD    = 0x00
	ebpfALU64 = 0x07
	ebpfJMP   = 0x05
	ebpfK     = 0x00
	ebpfX     = 0x08
	ebpfDW    = 0x18
	ebpfIMM   = 0x00
	ebpfABS   = 0x20
	ebpfB     = 0x10
	ebpfH     = 0x08

	ebpfMUL  = 0x20
	ebpfRSH  = 0x70
	ebpfXOR  = 0xa0
	ebpfMOV  = 0xb0
	ebpfJA   = 0x00
	ebpfJEQ  = 0x10
	ebpfJLT  = 0xa0
	ebpfEXIT = 0x90

	bpfProgLoad           = 5  // BPF_PROG_LOAD
	bpfProgTypeSockFilter = 1  // BPF_PROG_TYPE_SOCKET_FILTER
	soAttachBPF           = 50 // SO_ATTACH_BPF
)

type ebpfInsn struct {
	code uint8
	regs uint8 // dst | src<<4
	off  int16
	imm  int32
}

// asm builds an eBPF program with forward jumps to labels.
type asm struct {
	p      []ebpfInsn
	labels map[string]int
	fix    map[int]string // instruction index → label its offset must reach
}

func (a *asm) ins(code, dst, src uint8, off int16, imm int32) {
	a.p = append(a.p, ebpfInsn{code: code, regs: dst | src<<4, off: off, imm: imm})
}
func (a *asm) label(name string) { a.labels[name] = len(a.p) }
func (a *asm) jmp(code, dst, src uint8, imm int32, to string) {
	a.fix[len(a.p)] = to
	a.ins(code, dst, src, 0, imm)
}
func (a *asm) imm64(dst uint8, v uint64) {
	a.ins(ebpfLD|ebpfDW|ebpfIMM, dst, 0, 0, int32(uint32(v)))
	a.ins(0, 0, 0, 0, int32(uint32(v>>32)))
}
func (a *asm) ldabs(size uint8, off int32) { a.ins(ebpfLD|ebpfABS|size, 0, 0, 0, off) }

func (a *asm) resolve() ([]ebpfInsn, error) {
	for i, l := range a.fix {
		t, ok := a.labels[l]
		if !ok {
			return nil, fmt.Errorf("ebpf: no label %q", l)
		}
		a.p[i].off = int16(t - (i + 1))
	}
	return a.p, nil
}

// Registers: r6 = skb (LD_ABS needs it there), r7 = the hash, r8 = the FNV prime; LD_ABS
// writes r0 and clobbers r1-r5.
const (
	r0, r1, r2, r6, r7, r8 = 0, 1, 2, 6, 7, 8
)

// DestroyHashProgram returns the eBPF socket filter of a destroy listener that applies the
// sampling hash in the kernel, besides what DestroyFilter does: unsampled events are
// dropped before they are queued. Offsets are those of DestroyFilter (nlmsghdr, then
// inet_diag_msg: family at 16, sport 20, dport 22, src 24, dst 40).
func DestroyHashProgram(ports []uint16, h HashFilter) ([]ebpfInsn, error) {
	a := &asm{labels: map[string]int{}, fix: map[int]string{}}
	a.ins(ebpfALU64|ebpfMOV|ebpfX, r6, r1, 0, 0)
	a.ldabs(ebpfH, bpfOffDport)
	a.jmp(ebpfJMP|ebpfJEQ|ebpfK, r0, 0, 0, "drop")
	if len(ports) > 0 && len(ports) <= 200 {
		a.ldabs(ebpfH, bpfOffSport)
		for _, p := range ports {
			a.jmp(ebpfJMP|ebpfJEQ|ebpfK, r0, 0, int32(p), "hash")
		}
		a.jmp(ebpfJMP|ebpfJA, 0, 0, 0, "drop")
	}
	a.label("hash")
	a.imm64(r8, fnvPrime)
	a.imm64(r7, h.Seed)
	byteAt := func(off int32) { // h ^= pkt[off]; h *= prime
		a.ldabs(ebpfB, off)
		a.ins(ebpfALU64|ebpfXOR|ebpfX, r7, r0, 0, 0)
		a.ins(ebpfALU64|ebpfMUL|ebpfX, r7, r8, 0, 0)
	}
	constByte := func(b byte) { // h ^= b; h *= prime
		if b != 0 {
			a.ins(ebpfALU64|ebpfXOR|ebpfK, r7, 0, 0, int32(b))
		}
		a.ins(ebpfALU64|ebpfMUL|ebpfX, r7, r8, 0, 0)
	}
	const offSrc, offDst = nlmsgHdrLen + 8, nlmsgHdrLen + 24
	a.ldabs(ebpfB, nlmsgHdrLen) // family
	a.jmp(ebpfJMP|ebpfJEQ|ebpfK, r0, 0, AFInet, "v4")
	// IPv6 (IPv4-mapped addresses are already in the 16-byte form the Go hash uses).
	for _, addr := range []int32{offSrc, offDst} {
		for i := int32(0); i < 16; i++ {
			byteAt(addr + i)
		}
		port := int32(bpfOffSport)
		if addr == offDst {
			port = bpfOffDport
		}
		byteAt(port)
		byteAt(port + 1)
	}
	a.jmp(ebpfJMP|ebpfJA, 0, 0, 0, "final")
	a.label("v4")
	for _, addr := range []int32{offSrc, offDst} {
		for i := 0; i < 10; i++ {
			constByte(0)
		}
		constByte(0xff)
		constByte(0xff)
		for i := int32(0); i < 4; i++ {
			byteAt(addr + i)
		}
		port := int32(bpfOffSport)
		if addr == offDst {
			port = bpfOffDport
		}
		byteAt(port)
		byteAt(port + 1)
	}
	a.label("final")
	for _, st := range []struct {
		shift int32
		mul   uint64
	}{{30, 0xbf58476d1ce4e5b9}, {27, 0x94d049bb133111eb}, {31, 0}} {
		a.ins(ebpfALU64|ebpfMOV|ebpfX, r1, r7, 0, 0)
		a.ins(ebpfALU64|ebpfRSH|ebpfK, r1, 0, 0, st.shift)
		a.ins(ebpfALU64|ebpfXOR|ebpfX, r7, r1, 0, 0)
		if st.mul != 0 {
			a.imm64(r2, st.mul)
			a.ins(ebpfALU64|ebpfMUL|ebpfX, r7, r2, 0, 0)
		}
	}
	a.imm64(r2, h.Threshold)
	a.jmp(ebpfJMP|ebpfJLT|ebpfX, r7, r2, 0, "accept")
	a.label("drop")
	a.ins(ebpfALU64|ebpfMOV|ebpfK, r0, 0, 0, 0)
	a.ins(ebpfJMP|ebpfEXIT, 0, 0, 0, 0)
	a.label("accept")
	a.ins(ebpfALU64|ebpfMOV|ebpfK, r0, 0, 0, -1) // keep the whole message
	a.ins(ebpfJMP|ebpfEXIT, 0, 0, 0, 0)
	return a.resolve()
}

const fnvPrime = 1099511628211

// bpfProgLoadAttr is the BPF_PROG_LOAD part of union bpf_attr, up to prog_name.
type bpfProgLoadAttr struct {
	progType    uint32
	insnCnt     uint32
	insns       uint64
	license     uint64
	logLevel    uint32
	logSize     uint32
	logBuf      uint64
	kernVersion uint32
	progFlags   uint32
	progName    [16]byte
}

// errNoEBPF wraps a failed BPF_PROG_LOAD (no CAP_BPF/CAP_SYS_ADMIN, or no eBPF).
var errNoEBPF = errors.New("ebpf socket filter not loaded")

// attachEBPF loads prog as a socket filter and attaches it to fd (SO_ATTACH_BPF).
func attachEBPF(fd int, prog []ebpfInsn) error {
	license := []byte("GPL\x00")
	logBuf := make([]byte, 1<<16)
	attr := bpfProgLoadAttr{
		progType: bpfProgTypeSockFilter,
		insnCnt:  uint32(len(prog)),
		insns:    uint64(uintptr(unsafe.Pointer(&prog[0]))),
		license:  uint64(uintptr(unsafe.Pointer(&license[0]))),
		logLevel: 1,
		logSize:  uint32(len(logBuf)),
		logBuf:   uint64(uintptr(unsafe.Pointer(&logBuf[0]))),
	}
	copy(attr.progName[:], "ccab_destroy")
	pfd, _, e := unix.Syscall(unix.SYS_BPF, bpfProgLoad, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if e != 0 {
		msg := string(logBuf)
		if i := indexNUL(logBuf); i >= 0 {
			msg = string(logBuf[:i])
		}
		if len(msg) > 400 {
			msg = msg[len(msg)-400:]
		}
		return fmt.Errorf("%w: BPF_PROG_LOAD: %v %s", errNoEBPF, e, msg)
	}
	defer unix.Close(int(pfd)) // the socket keeps its own reference
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, soAttachBPF, int(pfd)); err != nil {
		return fmt.Errorf("%w: SO_ATTACH_BPF: %v", errNoEBPF, err)
	}
	return nil
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}
