package netlink

import "testing"

// TestDestroyHashProgramShape: the program's jumps land inside it, it ends with exit, and it
// stays far below the verifier's limits (the real check is the kernel's: closecap's tests
// load it and compare its selection with the poller's).
func TestDestroyHashProgramShape(t *testing.T) {
	for _, ports := range [][]uint16{nil, {443}, {80, 443, 8443}} {
		p, err := DestroyHashProgram(ports, HashFilter{Seed: 1, Threshold: 1 << 63})
		if err != nil {
			t.Fatal(err)
		}
		for i, in := range p {
			if in.code&0x07 == ebpfJMP && in.code != ebpfJMP|ebpfEXIT {
				if to := i + 1 + int(in.off); to <= i || to >= len(p) {
					t.Errorf("ports %v: jump at %d to %d (program of %d)", ports, i, to, len(p))
				}
			}
		}
		if last := p[len(p)-1]; last.code != ebpfJMP|ebpfEXIT {
			t.Errorf("ports %v: last instruction %#x is not exit", ports, last.code)
		}
		t.Logf("ports %v: %d instructions", ports, len(p))
	}
}
