package ss

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/internal/testvectors"
)

// want maps tcp_sample/1 keys to the JSON text of their expected value.
type want map[string]string

func checkFields(t *testing.T, got map[string]any, w want) {
	t.Helper()
	for k, text := range w {
		var v any
		dec := json.NewDecoder(strings.NewReader(text))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("bad test: %s: %v", k, err)
		}
		g, ok := got[k]
		if !ok {
			t.Errorf("%s missing", k)
		} else if !testvectors.SameValue(g, v) {
			t.Errorf("%s = %v, want %s", k, g, text)
		}
	}
}

func TestParseFormats(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		opts Options
		want []want // one per record, selected fields
	}{
		{
			name: "iproute2 4.15 two-line with header, 10.8Mbps rates, bbr v1 startup",
			in: "State      Recv-Q Send-Q Local Address:Port               Peer Address:Port\n" +
				"ESTAB      0      0      192.0.2.10:443                198.51.100.7:51234\n" +
				"\t bbr wscale:8,7 rto:216 rtt:15.924/4.256 ato:40 mss:1348 pmtu:1500 rcvmss:1208 advmss:1428 cwnd:16 bytes_acked:3744 bytes_received:8845 segs_out:15 segs_in:16 data_segs_out:6 data_segs_in:13 bbr:(bw:2.0Mbps,mrtt:14.451,pacing_gain:2.88672,cwnd_gain:2.88672) send 10.8Mbps lastsnd:8208 lastrcv:8188 lastack:8188 pacing_rate 22.7Mbps delivery_rate 2.0Mbps app_limited busy:68ms rcv_rtt:18.349 rcv_space:28800 rcv_ssthresh:46964 minrtt:14.451\n",
			want: []want{{
				"state": `"ESTAB"`, "cc": `"bbr"`, "cc_version": `null`, "local_port": `443`,
				"peer_prefix": `"198.51.100.0/24"`, "rtt_us": `15924`, "rttvar_us": `4256`, "rto_ms": `216`,
				"mss": `1348`, "cwnd": `16`, "ssthresh": `null`, "bbr_bw_bps": `2000000`, "bbr_min_rtt_us": `14451`,
				"bbr_pacing_gain": `2.88672`, "bbr_cwnd_gain": `2.88672`, "pacing_rate_bps": `22700000`,
				"delivery_rate_bps": `2000000`, "app_limited": `true`, "busy_ms": `68`, "rwnd_limited_ms": `0`,
				"sndbuf_limited_ms": `0`, "min_rtt_us": `14451`, "bytes_acked": `3744`, "bytes_received": `8845`,
				// kernel 4.15, ss 4.15: no bytes_sent/delivered/snd_wnd yet → null, not 0
				"bytes_sent": `null`, "bytes_retrans": `null`, "delivered": `null`, "snd_wnd": `null`,
				"unacked": `0`, "lost": `0`, "retrans_out": `0`, "total_retrans": `0`, "reordering": `3`,
				"notsent_bytes": `0`, "lastsnd_ms": `8208`,
			}},
		},
		{
			name: "iproute2 5.2 one-line -emoitnO with uid/ino/sk/skmem, %.1fM rates",
			in: "State    Recv-Q Send-Q          Local Address:Port            Peer Address:Port\n" +
				"ESTAB    0      0                   127.0.0.1:13265              127.0.0.1:36743 uid:1974 ino:48271 sk:1 <-> skmem:(r0,rb2227595,t0,tb2626560,f0,w0,o0,bl0,d0) ts sack reno wscale:7,7 rto:211 rtt:10.067/16.429 ato:40 mss:65483 pmtu:65535 rcvmss:536 advmss:65483 cwnd:10 bytes_sent:41868244 bytes_acked:41868244 bytes_received:21581866 segs_out:242512 segs_in:351469 data_segs_out:242511 data_segs_in:242511 send 520.4Mbps lastsnd:14355 lastrcv:14355 lastack:14314 pacing_rate 1040.7Mbps delivery_rate 74837.7Mbps delivered:242512 app_limited busy:1861946ms rcv_rtt:92427.6 rcv_space:43725 rcv_ssthresh:43690 minrtt:0.007\n",
			want: []want{{
				"cc": `"reno"`, "rtt_us": `10067`, "rttvar_us": `16429`, "pacing_rate_bps": `1040700000`,
				"delivery_rate_bps": `74837700000`, "min_rtt_us": `7`, "bytes_retrans": `0`, "snd_wnd": `null`,
				"bbr_bw_bps": `null`, "app_limited": `true`, "peer_prefix": `"127.0.0.0/24"`,
			}},
		},
		{
			name: "iproute2 6.x Process header column, raw bps, MPTCP ULP tail",
			in: "State Recv-Q Send-Q Local Address:Port  Peer Address:Port Process\n" +
				"ESTAB 0      0          127.0.0.1:44180    127.0.0.1:42225 cubic wscale:7,7 rto:201 rtt:0.036/0.02 mss:16640 pmtu:65535 rcvmss:536 advmss:65483 cwnd:10 bytes_sent:1 bytes_acked:2 segs_out:3 segs_in:2 data_segs_out:1 send 36977777778bps lastsnd:7 lastrcv:7 lastack:7 pacing_rate 72200677960bps delivery_rate 8874666664bps delivered:2 rcv_space:33280 rcv_ssthresh:33280 minrtt:0.015 snd_wnd:33280 tcp-ulp-mptcp flags:Mmec token:0000(id:0)/39429ce(id:0) seq:e3ed00de37c805c sfseq:1 ssnoff:d4e4d561 maplen:0\n",
			want: []want{{
				"cc": `"cubic"`, "rtt_us": `36`, "rttvar_us": `20`, "pacing_rate_bps": `72200677960`,
				"delivery_rate_bps": `8874666664`, "snd_wnd": `33280`, "app_limited": `false`,
				"bytes_received": `0`, "data_segs_in": `0`,
			}},
		},
		{
			name: "Google BBRv3 extended block with version:3, -HOe without State column, IPv6",
			in:   "0      554248 [2001:db8:1::2]:443 [2001:db8:2::2]:49138 timer:(on,201ms,0) uid:33 ino:91234 sk:3f cgroup:/system.slice/nginx.service <-> ts usec_ts sack bbr wscale:7,7 rto:252 rtt:52.197/1.2 mss:1448 cwnd:34 ssthresh:29 bytes_sent:9120448 bytes_retrans:118736 bytes_acked:8412832 segs_out:6301 segs_in:2870 data_segs_out:6299 bbr:(bw:443960bps,mrtt:52.197,pacing_gain:2.77344,cwnd_gain:2,version:3,bw_hi:443960bps,bw_lo:8bps,inflight_hi:0,inflight_lo:0,extra_acked:2,mode:0,phase:STARTUP) send 7.55Mbps lastsnd:4 lastrcv:17000 lastack:4 pacing_rate 1.33Gbps/2.5Gbps delivery_rate 466Mbps delivered:5812 busy:16920ms rwnd_limited:123ms(4.5%) sndbuf_limited:7ms(0.0%) unacked:31 retrans:2/82 lost:3 sacked:12 dsack_dups:4 reordering:12 reord_seen:9 rcv_space:14480 rcv_ssthresh:64088 notsent:441344 minrtt:50.1 rcv_ooopack:2 snd_wnd:262144 rcv_wnd:65536 rehash:1\n",
			opts: Options{DefaultState: "ESTAB"},
			want: []want{{
				"state": `"ESTAB"`, "cc": `"bbr"`, "cc_version": `3`, "peer_prefix": `"2001:db8:2::/48"`,
				"local_port": `443`, "send_q_bytes": `554248`, "recv_q_bytes": `0`, "bbr_bw_bps": `443960`,
				"bbr_min_rtt_us": `52197`, "bbr_pacing_gain": `2.77344`, "bbr_cwnd_gain": `2.0`,
				"pacing_rate_bps": `1330000000`, "delivery_rate_bps": `466000000`, "rwnd_limited_ms": `123`,
				"sndbuf_limited_ms": `7`, "retrans_out": `2`, "total_retrans": `82`, "lost": `3`, "sacked": `12`,
				"reordering": `12`, "unacked": `31`, "min_rtt_us": `50100`, "rttvar_us": `1200`, "ssthresh": `29`,
			}},
		},
		{
			name: "IPv4-mapped peers, timer token, 4762104bps",
			in:   "0      398200 [::ffff:140.82.23.101]:5202 [::ffff:137.25.146.88]:56512 timer:(on,078ms,0) ts sack bbr wscale:6,10 rto:237 rtt:36.788/3.994 ato:40 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:44 bytes_sent:128872 bytes_acked:66608 bytes_received:37 segs_out:90 segs_in:12 data_segs_out:89 data_segs_in:1 bbr:(bw:4762104bps,mrtt:30.236,pacing_gain:2.88672,cwnd_gain:2.88672) send 13854953bps lastsnd:2 lastrcv:132 lastack:3 pacing_rate 13609384bps delivery_rate 4762720bps delivered:47 busy:132ms unacked:43 rcv_space:14600 rcv_ssthresh:42230 notsent:335936 minrtt:30.236 snd_wnd:128192\n",
			opts: Options{DefaultState: "ESTAB"},
			want: []want{{
				"peer_prefix": `"137.25.146.0/24"`, "local_port": `5202`, "bbr_bw_bps": `4762104`,
				"cc_version": `null`, "snd_wnd": `128192`, "notsent_bytes": `335936`,
			}},
		},
		{
			name: "bbr2 name, k rates, process name with a space, missing lastsnd",
			in:   `0      0      192.0.2.10:443 203.0.113.5:61000 users:(("Web Content",pid=4242,fd=37)) ts sack bbr2 wscale:7,7 rto:220 rtt:18.5/2.25 mss:1448 cwnd:20 bytes_sent:1000 bytes_acked:1000 segs_out:10 segs_in:8 data_segs_out:5 bbr:(bw:1.2kbps,mrtt:18.965,pacing_gain:0.75,cwnd_gain:2) send 12.5Mbps pacing_rate 950.3kbps delivery_rate 800bps delivered:6 busy:20ms rcv_space:14480 minrtt:18.965 snd_wnd:65535` + "\n",
			want: []want{{
				"state": `""`, "cc": `"bbr2"`, "cc_version": `2`, "bbr_bw_bps": `1200`, "pacing_rate_bps": `950300`,
				"delivery_rate_bps": `800`, "bbr_pacing_gain": `0.75`, "lastsnd_ms": `null`, "lastrcv_ms": `null`,
			}},
		},
		{
			name: "iproute2 3.x -emoi: Netid column, timer/ino/sk on the socket line, skmem on the info line",
			in: "Netid State      Recv-Q Send-Q Local Address:Port Peer Address:Port\n" +
				"tcp   ESTAB      0      1154056   10.7.7.84:54127    10.7.7.83:34342 timer:(on,200ms,0) ino:57003 sk:ffff88063c51d0c0 <->\n" +
				"\t skmem:(r0,rb89280,t0,tb2097152,f726504,w1436184,o0,bl0) ts sack cubic wscale:7,6 rto:310 rtt:107.375/1 mss:1448 cwnd:568 ssthresh:108 send 61.3Mbps unacked:568 retrans:0/21 reordering:127 rcv_space:29200\n" +
				"tcp   ESTAB      0      325800    10.246.7.151:57614 10.246.7.152:46811\n" +
				"\t cubic wscale:7,7 rto:201 rtt:0.081/0.006 mss:1448 cwnd:90 ssthresh:63 send 12871.1Mbps pacing_rate 1570.5Mbps/2.0Gbps unacked:90 retrans:0/305 rcv_space:29200\n",
			want: []want{
				{"cc": `"cubic"`, "rtt_us": `107375`, "rttvar_us": `1000`, "reordering": `127`, "total_retrans": `21`,
					"send_q_bytes": `1154056`, "pacing_rate_bps": `null`, "bytes_acked": `null`, "segs_out": `null`,
					"busy_ms": `null`, "app_limited": `null`, "delivery_rate_bps": `null`, "unacked": `568`, "lost": `0`},
				{"pacing_rate_bps": `1570500000`, "total_retrans": `305`, "rtt_us": `81`, "rttvar_us": `6`},
			},
		},
		{
			name: "FIN-WAIT-1 with ecn flags, --- shutdown mark, lost",
			in: "tcp   FIN-WAIT-1 0      1      80.220.8.55:22384 91.198.174.208:443 ino:0 sk:510b cgroup:unreachable:6c46 ---\n" +
				"\t skmem:(r0,rb87380,t0,tb130560,f0,w0,o0,bl0,d0) ts sack ecn ecnseen bbr wscale:9,10 rto:3744 rtt:33.364/18.714 ato:40 mss:36 pmtu:68 rcvmss:536 advmss:1448 cwnd:1 bytes_sent:701 bytes_acked:702 bytes_received:254 segs_out:6 segs_in:3 data_segs_out:2 data_segs_in:1 bbr:(bw:10176bps,mrtt:27.924,pacing_gain:2.88672,cwnd_gain:2.88672) send 8632bps lastsnd:601107881 lastrcv:601107884 lastack:601107810 pacing_rate 11658680bps delivery_rate 10192bps delivered:3 app_limited busy:23371222ms lost:1 rcv_space:14480 rcv_ssthresh:42242 minrtt:27.924\n",
			want: []want{{
				"state": `"FIN-WAIT-1"`, "cc": `"bbr"`, "rto_ms": `3744`, "lost": `1`, "busy_ms": `23371222`,
				"peer_prefix": `"91.198.174.0/24"`, "local_port": `22384`, "send_q_bytes": `1`,
			}},
		},
		{
			name: "unbracketed IPv6 of old iproute2, info line indented with spaces",
			in: "ESTAB      801736 360                            face:face:face:face::1:22                                      face:face:face:face::face:46779\n" +
				"         cubic wscale:9,7 rto:223 rtt:22.195/8.202 ato:40 mss:1428 cwnd:11 ssthresh:7 bytes_acked:203649 bytes_received:334034603 segs_out:18513 segs_in:241825 data_segs_out:4192 data_segs_in:241672 send 5.7Mbps lastsnd:2 lastack:3 pacing_rate 6.8Mbps unacked:10 retrans:0/1 rcv_rtt:29.375 rcv_space:1241704 minrtt:0.013\n",
			want: []want{{
				"peer_prefix": `"face:face:face::/48"`, "local_port": `22`, "recv_q_bytes": `801736`,
				"lastrcv_ms": `null`, "notsent_bytes": `0`, "busy_ms": `null`, "min_rtt_us": `13`,
			}},
		},
		{
			name: "no cc token, fractional rto of a HZ=300 kernel, rto hidden, zone",
			in: "UNCONN 1 0 140.197.113.99:22 165.121.234.111:21364 wscale:6,7 rto:226.666 rtt:33.49/1.669 mss:1448 cwnd:10 bytes_sent:4140 segs_out:21 segs_in:31\n" +
				"ESTAB 0 0 [fe80::1]%eth0:22 [fe80::2]%eth0:50000 cubic rtt:1/0.5 mss:1448 cwnd:10\n",
			want: []want{
				{"cc": `""`, "state": `"UNCONN"`, "rto_ms": `227`, "recv_q_bytes": `1`},
				{"rto_ms": `3000`, "peer_prefix": `"fe80::/48"`, "min_rtt_us": `null`, "rcv_space": `0`},
			},
		},
		{
			name: "an option flag unknown to the parser before the CC name",
			in:   "ESTAB 0 0 10.0.0.1:443 10.0.0.9:448 ts sack ecn_future cubic wscale:7,7 rtt:1.5/0.5 tcp-ulp-tls version: 1.3 cipher: aes-gcm-128 rxconf: sw\n",
			want: []want{{"cc": `"cubic"`}},
		},
		{
			name: "minrtt ~0U means no RTT sample",
			in:   "ESTAB 0 0 10.0.0.1:443 10.0.0.9:448 cubic rtt:1.5/0.5 mss:1448 minrtt:4294967.295 cwnd:10\n",
			want: []want{{"min_rtt_us": `null`, "rtt_us": `1500`}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := parseAll(t, tc.in, tc.opts)
			if len(errs) > 0 {
				t.Fatalf("skipped: %v", errs)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d records, want %d", len(got), len(tc.want))
			}
			for i := range got {
				checkFields(t, got[i], tc.want[i])
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		in     string
		reason Reason
		substr string
	}{
		{"\t cubic rtt:1/0.5 mss:1448\n", ReasonOrphanInfo, "no socket line"},
		{"ESTAB 0 0 10.0.0.1:443 10.0.0.2:nosuchsvc\n\t cubic rtt:1/0.5\n", ReasonAddress, "run ss with -n"},
		{"time:1754776664023490865\n", ReasonSocketLine, "1 columns where Recv-Q"},
		{"ESTAB 0 0 10.0.0.1:443 *:*\n", ReasonListening, "wildcard"},
		{"LISTEN 0 4096 0.0.0.0:22 0.0.0.0:* cubic cwnd:10\n", ReasonListening, "listening socket"},
		{"ESTAB 0 0 10.0.0.1:443 10.0.0.2:*x\n", ReasonAddress, "port"},
		{"ESTAB 0 0 *:443 10.0.0.2:1\n", ReasonAddress, "wildcard"},
		{"ESTAB 0 0 10.0.0.1:443 10.0.0.9:443\n", ReasonNoInfo, "no TCP info"},
		{"udp UNCONN 0 0 10.0.0.1:53 10.0.0.9:53\n", ReasonNotTCP, `"udp"`},
		{"ESTAB x 0 10.0.0.1:443 10.0.0.9:445 cubic\n", ReasonSocketLine, "Recv-Q"},
		{"ESTAB 0 0 [10.0.0.1:443 10.0.0.9:447 cubic\n", ReasonAddress, "lacks ']'"},
		{"ESTAB 0 0 10.0.0.1:99999 10.0.0.9:447 cubic\n", ReasonAddress, "port"},
		{"ESTAB 0 0 300.0.0.1:1 10.0.0.9:447 cubic\n", ReasonAddress, "local address"},
	} {
		sc := NewScanner(strings.NewReader(tc.in))
		if !sc.Scan() {
			t.Fatalf("%q: no entry", tc.in)
		}
		_, err := ParseEntry(sc.Entry(), Options{})
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Reason != tc.reason || !strings.Contains(err.Error(), tc.substr) {
			t.Errorf("%q: err = %v; want reason %s containing %q", tc.in, err, tc.reason, tc.substr)
		}
	}
}

func TestScannerGrouping(t *testing.T) {
	in := "State Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n" +
		"ESTAB 0 0 10.0.0.1:1 10.0.0.2:2\n\t cubic\n\t rtt:1/1\n\n" +
		"ESTAB 0 0 10.0.0.1:1 10.0.0.2:3 cubic\n" +
		"  0 0 10.0.0.1:1 10.0.0.2:4 cubic\n" // indented socket line (right-aligned column)
	sc := NewScanner(strings.NewReader(in))
	var got []string
	for sc.Scan() {
		e := sc.Entry()
		got = append(got, e.Lines()+": "+e.Text)
	}
	want := []string{
		"lines 2-4: ESTAB 0 0 10.0.0.1:1 10.0.0.2:2 cubic rtt:1/1",
		"line 6: ESTAB 0 0 10.0.0.1:1 10.0.0.2:3 cubic",
		"line 7: 0 0 10.0.0.1:1 10.0.0.2:4 cubic",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestTokenize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{`a  b	c`, []string{"a", "b", "c"}},
		{`users:(("Web Content",pid=1,fd=2)) cubic`, []string{`users:(("Web Content",pid=1,fd=2))`, "cubic"}},
		{`skmem:(r0,rb1) ts`, []string{`skmem:(r0,rb1)`, "ts"}},
		{`bad:(open ts sack`, []string{"bad:(open", "ts", "sack"}},
		{`x:(")" y`, []string{`x:(")"`, "y"}},
	} {
		if got := tokenize(tc.in); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("tokenize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]int64{
		"4762104bps": 4762104, "10.8Mbps": 10800000, "1.33Gbps": 1330000000, "466Mbps": 466000000,
		"1.2kbps": 1200, "950.3Kbps": 950300, "2.5Tbps": 2500000000000, "8bps": 8, "0bps": 0,
		"12871.1Mbps": 12871100000, "1e+03bps": 1000,
	} {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("parseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "bps", "Mbps", "10Mbit", "-1bps", "1.2mbps", "NaNbps"} {
		if _, err := parseRate(in); err == nil {
			t.Errorf("parseRate(%q) succeeded", in)
		}
	}
}

// An entry with very many info lines is cut at the length limit, in linear time.
func TestScannerHugeEntry(t *testing.T) {
	in := "ESTAB 0 0 10.0.0.1:1 10.0.0.2:2 cubic\n" + strings.Repeat("\tx\n", 600000) + "ESTAB 0 0 10.0.0.1:1 10.0.0.2:3 cubic\n"
	sc := NewScanner(strings.NewReader(in))
	var got []Entry
	for sc.Scan() {
		got = append(got, sc.Entry())
	}
	if len(got) != 2 || !got[0].TooLong || got[0].LastLine != 600001 || got[1].TooLong {
		t.Fatalf("entries: %d, first too long %v", len(got), len(got) > 0 && got[0].TooLong)
	}
	if _, err := ParseEntry(got[0], Options{}); err == nil || !strings.Contains(err.Error(), string(ReasonTooLong)) {
		t.Errorf("ParseEntry = %v", err)
	}
}

func parseOne(t *testing.T, in string) Socket {
	t.Helper()
	sc := NewScanner(strings.NewReader(in))
	if !sc.Scan() {
		t.Fatalf("%q: no entry", in)
	}
	s, err := ParseEntry(sc.Entry(), Options{DefaultState: "ESTAB"})
	if err != nil {
		t.Fatalf("%q: %v", in, err)
	}
	return s
}

func sampleJSON(t *testing.T, s Socket) map[string]any {
	t.Helper()
	r := s.Record(anon.SockKey{Salt: "s"}, record.Meta{SampleRate: 1})
	b, err := record.AppendTCP(nil, &r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// ss without -n prints service names for known ports: they are read, not a reason to drop
// the socket.
func TestServiceNames(t *testing.T) {
	named := parseOne(t, "ESTAB 0 0 10.0.0.1:https 10.0.0.2:http-alt\n\t cubic rtt:1/0.5\n")
	num := parseOne(t, "ESTAB 0 0 10.0.0.1:443 10.0.0.2:8080\n\t cubic rtt:1/0.5\n")
	if named.Local.Port() != 443 || named.Peer.Port() != 8080 || named.Sample.LocalPort != 443 {
		t.Fatalf("ports %v %v", named.Local, named.Peer)
	}
	k := anon.SockKey{Salt: "s"}
	if a, b := named.Record(k, record.Meta{}), num.Record(k, record.Meta{}); a.SockID != b.SockID {
		t.Errorf("sock_id %s by name, %s by number", a.SockID, b.SockID)
	}
	for _, p := range []string{"[2001:db8::1]:ssh", "10.0.0.1:domain", "10.0.0.1:imaps"} {
		if _, err := parseAddrPort(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// One token that cannot be read nulls its own fields only; the socket is kept, and the
// field never becomes a hidden-means-zero default.
func TestUnreadableTokensNulled(t *testing.T) {
	const base = "ESTAB 0 0 10.0.0.1:443 10.0.0.9:444 ts sack cubic wscale:7,7 rto:204 rtt:1.5/0.5 mss:1448 cwnd:10 " +
		"bytes_sent:1000 bytes_acked:1000 segs_out:9 segs_in:5 data_segs_out:8 delivery_rate 1000bps busy:10ms rcv_space:14480 snd_wnd:1000 minrtt:1.2"
	for _, tc := range []struct {
		extra  string
		null   []string
		substr string
	}{
		{"rtt:abc/1", []string{"rtt_us", "rttvar_us"}, "rtt: invalid decimal"},
		{"bbr:(bw:1Mbps,mrtt:x,pacing_gain:1,cwnd_gain:2)", []string{"bbr_min_rtt_us"}, "bbr: mrtt"},
		{"bbr:(bw:1.2xbps,mrtt:1,future_thing,pacing_gain:1)", []string{"bbr_bw_bps"}, "bbr: bw"},
		{"pacing_rate", []string{"pacing_rate_bps"}, "pacing_rate: missing"},
		{"pacing_rate 12Mbit", []string{"pacing_rate_bps"}, "bps unit"},
		{"rwnd_limited:12", []string{"rwnd_limited_ms"}, "ms unit"},
		{"retrans:1", []string{"retrans_out", "total_retrans"}, "retrans"},
		{"bytes_retrans:99999999999999999999", []string{"bytes_retrans"}, "out of range"},
		{"lost:x", []string{"lost"}, "lost"},
		{"reordering:x", []string{"reordering"}, "reordering"},
	} {
		s := parseOne(t, base+" "+tc.extra+"\n")
		got := sampleJSON(t, s)
		for _, k := range tc.null {
			if got[k] != nil {
				t.Errorf("%s: %s = %v, want null", tc.extra, k, got[k])
			}
		}
		if got["mss"] != float64(1448) || got["cwnd"] != float64(10) || got["bytes_acked"] != float64(1000) || got["unacked"] != float64(0) {
			t.Errorf("%s: other fields lost: %v", tc.extra, got)
		}
		if !strings.Contains(strings.Join(s.Unread, "; "), tc.substr) {
			t.Errorf("%s: Unread = %q, want %q", tc.extra, s.Unread, tc.substr)
		}
	}
}

// A socket whose info continues on a line that lost its indent (wrapped output) is kept
// with what it printed, and nothing it may have lost becomes a zero default.
func TestIncompleteEntryNoDefaults(t *testing.T) {
	in := "ESTAB 0 0 10.0.0.1:22 10.0.0.2:40000\n" +
		"\t cubic wscale:7,6 rto:234 rtt:33.199/17.225 ato:17.225 mss:1418 cwnd:9 bytes_acked:188396\n" +
		"ssthresh:9 send 3.1Mbps lastsnd:3 lastrcv:4 lastack:193\n" +
		"retrans:0/4 unacked:1 reordering:4 rcv_rtt:47.25 rcv_space:28960\n" +
		"ESTAB 0 0 10.0.0.1:22 10.0.0.2:40001\n\t cubic rtt:1/0.5 bytes_acked:1\n"
	sc := NewScanner(strings.NewReader(in))
	var socks []Socket
	var reasons []Reason
	for sc.Scan() {
		s, err := ParseEntry(sc.Entry(), Options{DefaultState: "ESTAB"})
		var pe *ParseError
		if errors.As(err, &pe) {
			reasons = append(reasons, pe.Reason)
			continue
		}
		socks = append(socks, s)
	}
	if len(socks) != 2 || len(reasons) != 2 || reasons[0] != ReasonSocketLine {
		t.Fatalf("%d sockets, reasons %v", len(socks), reasons)
	}
	got := sampleJSON(t, socks[0])
	for _, k := range []string{"unacked", "retrans_out", "total_retrans", "reordering", "lost", "sacked", "rcv_space", "bytes_received", "ssthresh"} {
		if got[k] != nil {
			t.Errorf("incomplete socket: %s = %v, want null (the line holding it was lost)", k, got[k])
		}
	}
	if got["rto_ms"] != float64(234) || got["bytes_acked"] != float64(188396) || !socks[0].Incomplete {
		t.Errorf("incomplete socket lost what it printed: %v", got)
	}
	if g := sampleJSON(t, socks[1]); g["unacked"] != float64(0) || g["reordering"] != float64(3) || socks[1].Incomplete {
		t.Errorf("complete socket: %v", g)
	}
}
