package closecap

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/internal/netns"
	"github.com/ccab-dev/ccab/collectors/internal/netnstest"
	"github.com/ccab-dev/ccab/collectors/netlink"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sampler"
	"github.com/ccab-dev/ccab/internal/testvectors"
)

var (
	recordVector = flag.Bool("record", false, "capture contracts/vectors/tcp_conn_destroy_linux-6.18.* anew (root)")
	updateVector = flag.Bool("update", false, "rewrite the vector's expected records from its events and inputs")
)

// The contract vector: real destroy events of this kernel, as hex lines, and the inputs
// that are not in them (vectorParams). contracts/vectors/README.md describes them.
const vectorName = "tcp_conn_destroy_linux-6.18"

type vectorParams struct {
	Comment     string      `json:"comment"`
	Salt        string      `json:"salt"`
	BootID      string      `json:"boot_id"`
	NetnsInode  uint64      `json:"netns_inode"`
	NetnsCC     string      `json:"netns_default_cc"`
	SampleRate  float64     `json:"sample_rate"`
	Pop         string      `json:"pop"`
	Host        string      `json:"host"`
	Kernel      string      `json:"kernel"`
	Arm         string      `json:"arm"`
	RolloutID   string      `json:"rollout_id"`
	ReceivedMs  []int64     `json:"received_ms"` // per event: when it was received (ts_ms)
	PollerSeen  []bookParam `json:"poller_seen"` // what the poller saw of some of the sockets
	ClientBytes []int64     `json:"client_read_bytes"`
}

type bookParam struct {
	Cookie    uint64 `json:"cookie"`
	CC        string `json:"cc"`
	CCVersion int64  `json:"cc_version"`
	FirstMs   int64  `json:"first_seen_ms"`
	LastMs    int64  `json:"last_seen_ms"`
}

// TestVector decodes the recorded events with the recorded inputs and compares every
// tcp_conn/1 record with the expected lines, byte for byte.
func TestVector(t *testing.T) {
	dir := testvectors.Dir(t)
	raw, err := os.ReadFile(filepath.Join(dir, vectorName+".hex"))
	if err != nil {
		t.Fatal(err)
	}
	var p vectorParams
	pb, err := os.ReadFile(filepath.Join(dir, vectorName+".params.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(pb, &p); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, strings.Replace(vectorName, "tcp_conn_destroy", "tcp_conn", 1)+".expected.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	got := buildVector(t, raw, p)
	if *updateVector {
		if err := os.WriteFile(filepath.Join(dir, strings.Replace(vectorName, "tcp_conn_destroy", "tcp_conn", 1)+".expected.jsonl"), got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("records differ from the vector:\n got %s\nwant %s", got, want)
	}
}

func buildVector(t *testing.T, raw []byte, p vectorParams) []byte {
	t.Helper()
	book := NewBook(0)
	for _, b := range p.PollerSeen {
		ver := record.Int(b.CCVersion)
		if b.CCVersion == 0 {
			ver = nil
		}
		book.Observe(p.NetnsInode, b.Cookie, &record.TCPSample{CC: b.CC, CCVersion: ver, TsMs: b.FirstMs})
		book.Observe(p.NetnsInode, b.Cookie, &record.TCPSample{CC: b.CC, CCVersion: ver, TsMs: b.LastMs})
	}
	c := &Capture{cfg: Config{SampleRate: p.SampleRate, Book: book}, sel: sampler.NewSelection(p.Salt, p.SampleRate)}
	sp := &space{inode: p.NetnsInode, key: anon.SockKey{Salt: p.Salt, BootID: p.BootID, Netns: p.NetnsInode}.Hasher()}
	sp.ccDef.Store(p.NetnsCC)
	meta := record.Meta{Pop: p.Pop, Host: p.Host, Kernel: p.Kernel, Arm: p.Arm, RolloutID: p.RolloutID, SampleRate: p.SampleRate}
	var out bytes.Buffer
	enc := record.NewEncoder(&out)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	i := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		msg, err := hex.DecodeString(line)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := c.event(sp, msg, p.ReceivedMs[i])
		i++
		if !ok {
			t.Fatalf("event %d gave no record", i)
		}
		meta.StampConn(&r)
		if err := enc.Encode(&r); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

// TestRecordVector captures the vector (go test ./collectors/closecap -run TestRecordVector
// -record, root): behind a 20 Mbit/s tbf, one 300 KiB response on a socket with the
// namespace default (cubic) that the poller never sees, and one 1 MiB response on a bbr
// socket that the poller sampled while it was open.
func TestRecordVector(t *testing.T) {
	if !*recordVector {
		t.Skip("run with -record to capture the vector anew")
	}
	l := newLab(t)
	netnstest.Cmd(t, "tc", "-n", l.srv, "qdisc", "add", "dev", l.srvIf, "root", "tbf", "rate", "20mbit", "burst", "16k", "limit", "30000")
	const portDef, portBBR = 443, 8443
	dc, err := netlink.OpenDestroy(netns.Path(l.srv), netlink.DestroyConfig{LocalPorts: []uint16{portDef, portBBR}})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	p := vectorParams{
		Comment: "inputs of the tcp_conn/1 vector that the destroy events do not carry; see README.md",
		Salt:    "vector-salt", BootID: "00000000-0000-4000-8000-000000000000", NetnsInode: dc.NetnsInode(),
		NetnsCC: "cubic", SampleRate: 1, Pop: "nrt1", Host: "edge-1", Kernel: "6.18.44", Arm: "bbr", RolloutID: "r-2025-11",
	}
	var mu sync.Mutex
	seen := map[uint64]*bookParam{}
	smp, err := sampler.New(sampler.Config{Salt: p.Salt, BootID: p.BootID, Namespaces: []string{l.srv}, LocalPorts: []uint16{portBBR},
		Observe: func(_, cookie uint64, r *record.TCPSample) {
			mu.Lock()
			defer mu.Unlock()
			b := seen[cookie]
			if b == nil {
				b = &bookParam{Cookie: cookie, CC: r.CC, FirstMs: r.TsMs}
				if r.CCVersion != nil {
					b.CCVersion = *r.CCVersion
				}
				seen[cookie] = b
			}
			b.LastMs = r.TsMs
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer smp.Close()
	hold := make(chan struct{})
	l.server(t, portDef, "", nil)
	l.server(t, portBBR, "bbr", hold)

	c1 := l.fetch(t, portDef, 300<<10)
	p.ClientBytes = append(p.ClientBytes, c1.read)

	cl := netnstest.Dial(t, l.cli, "tcp4", fmt.Sprintf("%s:%d", l.srvIP, portBBR), "")
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], 1<<20)
	cl.Write(hdr[:])
	got := make(chan int64)
	go func() { n, _ := io.Copy(io.Discard, cl); cl.Close(); got <- n }()
	for i := 0; i < 3; i++ {
		if _, _, err := smp.Tick(context.Background(), record.Meta{}, time.Now()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
	}
	close(hold)
	p.ClientBytes = append(p.ClientBytes, <-got)
	for _, b := range seen {
		p.PollerSeen = append(p.PollerSeen, *b)
	}

	var lines []string
	for len(lines) < 2 {
		if _, err := dc.Recv(func(msg []byte) {
			lines = append(lines, hex.EncodeToString(msg))
			p.ReceivedMs = append(p.ReceivedMs, time.Now().UnixMilli())
		}); err != nil {
			t.Fatal(err)
		}
	}
	dir := testvectors.Dir(t)
	hexText := "# " + vectorName + ": two TCP destroy events (SOCK_DIAG_BY_FAMILY messages from nlmsghdr on, one per line, hex)\n" +
		"# received on SKNLGRP_INET_TCP_DESTROY in a network namespace of Linux 6.18; inputs: " + vectorName + ".params.json\n" +
		strings.Join(lines, "\n") + "\n"
	pj, _ := json.MarshalIndent(p, "", "  ")
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(vectorName+".hex", []byte(hexText))
	write(vectorName+".params.json", append(pj, '\n'))
	write(strings.Replace(vectorName, "tcp_conn_destroy", "tcp_conn", 1)+".expected.jsonl", buildVector(t, []byte(hexText), p))
	t.Logf("client read %v; poller saw %+v", p.ClientBytes, p.PollerSeen)
}

// BenchmarkEvent: one destroy event of the vector → a tcp_conn/1 record (decode, hash,
// HMAC sock_id, cc lookup) and its JSON, without the kernel and the scheduler.
func BenchmarkEvent(b *testing.B) {
	dir := testvectors.Dir(b)
	raw, err := os.ReadFile(filepath.Join(dir, vectorName+".hex"))
	if err != nil {
		b.Fatal(err)
	}
	var msg []byte
	for _, l := range strings.Split(string(raw), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			msg, _ = hex.DecodeString(l)
			break
		}
	}
	c := &Capture{cfg: Config{SampleRate: 1, Book: NewBook(0)}, sel: sampler.NewSelection("s", 1)}
	sp := &space{inode: 1, key: anon.SockKey{Salt: "s", BootID: "b", Netns: 1}.Hasher()}
	sp.ccDef.Store("cubic")
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r, ok := c.event(sp, msg, 1)
		if !ok {
			b.Fatal("no record")
		}
		buf, _ = record.AppendConn(buf[:0], &r)
	}
}
