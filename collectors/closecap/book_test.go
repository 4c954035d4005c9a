package closecap

import (
	"testing"

	"github.com/ccab-dev/ccab/collectors/record"
)

func TestBook(t *testing.T) {
	b := NewBook(2)
	b.Observe(1, 10, &record.TCPSample{CC: "bbr", CCVersion: record.Int(1), TsMs: 1000})
	b.Observe(1, 10, &record.TCPSample{CC: "bbr", CCVersion: record.Int(1), TsMs: 2000})
	b.Observe(2, 10, &record.TCPSample{CC: "cubic", TsMs: 1500}) // same cookie, other namespace
	b.Observe(1, 11, &record.TCPSample{CC: "reno", TsMs: 1500})  // over the bound: not kept
	b.Observe(1, 12, &record.TCPSample{TsMs: 1500})              // no cc: nothing to remember
	if b.Len() != 2 {
		t.Fatalf("len %d, want 2", b.Len())
	}
	e, ok := b.take(1, 10)
	if !ok || e.cc != "bbr" || e.ccVersion != 1 || e.firstMs != 1000 || e.lastMs != 2000 {
		t.Fatalf("take(1, 10) = %+v, %v", e, ok)
	}
	if _, ok := b.take(1, 10); ok {
		t.Fatal("an entry taken twice")
	}
	if n := b.Sweep(1600); n != 1 || b.Len() != 0 {
		t.Fatalf("sweep removed %d, %d left", n, b.Len())
	}
}
