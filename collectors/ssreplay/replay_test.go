package ssreplay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sampler"
	"github.com/ccab-dev/ccab/collectors/ss"
)

// fixtureSocket is one socket of a generated snapshot: what the ss line carries.
type fixtureSocket struct {
	local, peer string // addr:port, IPv6 in brackets
	cc          string
	cwnd        int
	rttUs       int
	bytesSent   int
	bytesRetr   int
	mrttUs      int // BBR only; -1: ~0U (no sample yet)
}

// ssLine prints s as `ss -tinHOe state established` does (iproute2 6.1, -n rates), as
// ccab sim --raw writes it.
func ssLine(s fixtureSocket) string {
	var b strings.Builder
	fmt.Fprintf(&b, "0      0      %s %s timer:(on,208ms,0) uid:33 ino:2748025 sk:c23c9 cgroup:/system.slice/nginx.service <->", s.local, s.peer)
	fmt.Fprintf(&b, " ts sack %s wscale:10,9 rto:204 rtt:%g/%g mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:%d",
		s.cc, float64(s.rttUs)/1000, float64(s.rttUs)/4000, s.cwnd)
	fmt.Fprintf(&b, " bytes_sent:%d", s.bytesSent)
	if s.bytesRetr > 0 {
		fmt.Fprintf(&b, " bytes_retrans:%d", s.bytesRetr)
	}
	fmt.Fprintf(&b, " bytes_acked:%d segs_out:%d segs_in:%d data_segs_out:%d", s.bytesSent-s.bytesRetr, s.bytesSent/1448+2, 5, s.bytesSent/1448)
	if strings.HasPrefix(s.cc, "bbr") {
		mrtt := fmt.Sprintf("%g", float64(s.mrttUs)/1000)
		if s.mrttUs < 0 {
			mrtt = "4.29497e+06"
		}
		fmt.Fprintf(&b, " bbr:(bw:2919472bps,mrtt:%s,pacing_gain:1,cwnd_gain:2)", mrtt)
	}
	fmt.Fprintf(&b, " send 4341401bps lastsnd:1 lastrcv:2725 lastack:31 pacing_rate 2890280bps delivery_rate 2626216bps delivered:649")
	fmt.Fprintf(&b, " busy:2819ms rcv_space:14480 rcv_ssthresh:64088 minrtt:%g snd_wnd:319488", float64(s.rttUs)/1000-0.5)
	return b.String()
}

// fixture writes a directory of snapshots: ticks 10 s apart, sockets per tick growing
// with the tick, IPv4 and IPv6, cubic and bbr; plus a file whose name is not a tick.
func fixture(t *testing.T, ticks int) (dir string, want map[int64][]fixtureSocket) {
	t.Helper()
	dir = t.TempDir()
	want = map[int64][]fixtureSocket{}
	const t0 = 1763640000000
	for k := 0; k < ticks; k++ {
		ts := int64(t0 + 10000*k)
		var lines []string
		for i := 0; i <= k; i++ {
			s := fixtureSocket{local: "192.0.2.14:443", peer: fmt.Sprintf("100.64.%d.%d:%d", k, i+1, 40000+i),
				cc: "cubic", cwnd: 10 + i, rttUs: 20000 + 1000*k + i, bytesSent: 100000 * (k + 1), mrttUs: 0}
			if i%2 == 1 {
				s.local, s.peer = "[2001:db8::14]:443", fmt.Sprintf("[2001:db8:%x::%x]:%d", k+1, i, 50000+i)
				s.cc, s.mrttUs, s.bytesRetr = "bbr", 19000+i, 1448*i
				if k == 0 {
					s.mrttUs = -1
				}
			}
			want[ts] = append(want[ts], s)
			lines = append(lines, ssLine(s))
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.txt", ts)), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("not a snapshot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, want
}

func TestSnapshots(t *testing.T) {
	snaps, bad := Snapshots([]string{"1763640120000.txt", "999.txt", "1763640030000.txt", "x.txt", "12a.txt", ".txt",
		"-5.txt", "+5.txt", "1763640030000", "notes"})
	var got []string
	for _, s := range snaps {
		got = append(got, fmt.Sprintf("%s@%d", s.Name, s.TsMs))
	}
	want := []string{"999.txt@999", "1763640030000@1763640030000", "1763640030000.txt@1763640030000", "1763640120000.txt@1763640120000"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("snapshots %v, want %v", got, want)
	}
	if want := []string{"x.txt", "12a.txt", ".txt", "-5.txt", "+5.txt", "notes"}; !reflect.DeepEqual(bad, want) {
		t.Errorf("bad names %v, want %v", bad, want)
	}
}

func encode(t *testing.T, r *record.TCPSample) map[string]any {
	t.Helper()
	b, err := record.AppendTCP(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Every socket of every snapshot becomes a record, in tick order, with ts_ms from the file
// name, the host's fields, sample_rate = source × own rate, and the fields ss printed.
func TestReplayAll(t *testing.T) {
	dir, want := fixture(t, 4)
	r, err := New(Config{Dir: dir, SourceSampleRate: 0.5, Salt: "s", BootID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	meta := record.Meta{Pop: "tst1", Host: "edge-tst1-05", Kernel: "6.1.0", Arm: "bbr1", RolloutID: "r1", CC: "bbr", SampleRate: 0.9}
	var ticks []int64
	total := 0
	ps, err := r.Poll(context.Background(), func() record.Meta { return meta }, func(s Snapshot, recs []record.TCPSample, st FileStats) error {
		ticks = append(ticks, s.TsMs)
		if st.SkippedRate != 0 || len(st.SkippedParse) != 0 || st.Records != len(recs) {
			t.Errorf("%s: stats %+v", s.Name, st)
		}
		ws := want[s.TsMs]
		if len(recs) != len(ws) {
			t.Fatalf("%s: %d records, want %d", s.Name, len(recs), len(ws))
		}
		for i, rec := range recs {
			w := ws[i]
			got := encode(t, &rec)
			// Values as fmt prints the decoded JSON (numbers kept as their text, null as <nil>).
			check := map[string]string{
				"schema": "tcp_sample/1", "ts_ms": fmt.Sprint(s.TsMs), "pop": "tst1", "host": "edge-tst1-05",
				"kernel": "6.1.0", "arm": "bbr1", "rollout_id": "r1", "cc": w.cc, "state": "ESTAB",
				"local_port": "443", "cwnd": fmt.Sprint(w.cwnd), "rtt_us": fmt.Sprint(w.rttUs),
				"bytes_sent": fmt.Sprint(w.bytesSent), "bytes_retrans": fmt.Sprint(w.bytesRetr), "sample_rate": "0.5",
				"bbr_min_rtt_us": fmt.Sprint(w.mrttUs),
			}
			if w.cc == "cubic" || w.mrttUs < 0 {
				check["bbr_min_rtt_us"] = "<nil>"
			}
			for k, v := range check {
				if g := fmt.Sprint(got[k]); g != v {
					t.Errorf("%s record %d: %s = %s, want %s", s.Name, i, k, g, v)
				}
			}
			l := netip.MustParseAddrPort(w.local)
			p := netip.MustParseAddrPort(w.peer)
			if rec.SockID == "" || strings.Contains(rec.PeerPrefix, fmt.Sprint(p.Addr())) || rec.SockID != r.key.SockID(l, p) {
				t.Errorf("%s record %d: sock_id %q peer_prefix %q", s.Name, i, rec.SockID, rec.PeerPrefix)
			}
			total++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ps.Files != 4 || !reflect.DeepEqual(ps.BadNames, []string{"README"}) || ps.Stale != 0 || ps.Failed != 0 {
		t.Errorf("poll stats %+v", ps)
	}
	if total != 1+2+3+4 || !reflect.DeepEqual(ticks, []int64{1763640000000, 1763640010000, 1763640020000, 1763640030000}) {
		t.Errorf("%d records, ticks %v", total, ticks)
	}

	// A later poll reads only what is new; a snapshot older than one already read is
	// counted as stale and not read; the bad name is not reported again.
	for name, text := range map[string]string{"1763640040000.txt": ssLine(want[1763640000000][0]), "1763640005000.txt": ssLine(want[1763640000000][0])} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	ps, err = r.Poll(context.Background(), func() record.Meta { return meta }, func(s Snapshot, recs []record.TCPSample, _ FileStats) error {
		if s.TsMs != 1763640040000 {
			t.Errorf("read %s again", s.Name)
		}
		n += len(recs)
		return nil
	})
	if err != nil || n != 1 || ps.Files != 1 || ps.Stale != 1 || len(ps.BadNames) != 0 {
		t.Errorf("second poll: %d records, %+v, %v", n, ps, err)
	}
}

// With its own rate below 1 the replay keeps the connections the netlink sampler would keep
// with the same salt, and records carry the product of the rates.
func TestReplaySampled(t *testing.T) {
	dir, _ := fixture(t, 30)
	r, err := NewReader(Config{Dir: dir, SampleRate: 0.25, SourceSampleRate: 0.5, Salt: "salt"})
	if err != nil {
		t.Fatal(err)
	}
	sel := sampler.NewSelection("salt", 0.25)
	kept, seen := 0, 0
	for k := 0; k < 30; k++ {
		ts := int64(1763640000000 + 10000*k)
		text, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%d.txt", ts)))
		if err != nil {
			t.Fatal(err)
		}
		recs, st, err := r.ReadSnapshot(bytes.NewReader(text), ts, record.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		sc := ss.NewScanner(bytes.NewReader(text))
		for sc.Scan() {
			sock, err := ss.ParseEntry(sc.Entry(), ss.Options{DefaultState: "ESTAB"})
			if err != nil {
				t.Fatal(err)
			}
			if sel.Keep(sock.Local, sock.Peer) {
				want++
			}
			seen++
		}
		if len(recs) != want || st.SkippedRate != k+1-want {
			t.Errorf("tick %d: %d records (skipped %d), want %d", k, len(recs), st.SkippedRate, want)
		}
		for _, rec := range recs {
			if rec.SampleRate != 0.125 || rec.TsMs != ts {
				t.Errorf("tick %d: sample_rate %v ts %d", k, rec.SampleRate, rec.TsMs)
			}
		}
		kept += len(recs)
	}
	if kept == 0 || kept == seen {
		t.Errorf("kept %d of %d sockets at rate 0.25", kept, seen)
	}
}

// Lines the ss parser refuses are counted by reason; the others still become records.
func TestReplayCountsSkips(t *testing.T) {
	r, err := NewReader(Config{Dir: "x"})
	if err != nil {
		t.Fatal(err)
	}
	good := ssLine(fixtureSocket{local: "10.0.0.1:443", peer: "10.0.0.2:5000", cc: "cubic", cwnd: 10, rttUs: 1000, bytesSent: 1})
	text := good + "\n0 0 10.0.0.1:443 *:*\n0 0 10.0.0.1:443 10.0.0.3:nosuchsvc cubic rtt:1/1\n\tskmem:(r0)\n"
	recs, st, err := r.ReadSnapshot(strings.NewReader(text), 5, record.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].SampleRate != 1 || st.SkippedParse[ss.ReasonListening] != 1 || st.SkippedParse[ss.ReasonAddress] != 2 || st.FirstParseErr == nil {
		t.Errorf("%d records, stats %+v", len(recs), st)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{}, {Dir: "d", SampleRate: 1.5}, {Dir: "d", SourceSampleRate: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
	r, _ := New(Config{Dir: filepath.Join(t.TempDir(), "missing")})
	if _, err := r.Poll(context.Background(), func() record.Meta { return record.Meta{} },
		func(Snapshot, []record.TCPSample, FileStats) error { return nil }); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Poll of a missing dir: %v", err)
	}
}
