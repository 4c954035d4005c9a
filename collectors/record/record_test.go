package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestAppendFloat(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{912, "912.0"},
		{0, "0.0"},
		{1.25, "1.25"},
		{2.88672, "2.88672"},
		{-3, "-3.0"},
		{1e21, "1e+21"},
		{1e-7, "1e-07"},
		{123456789012, "123456789012.0"},
	} {
		got, err := AppendFloat(nil, tc.in)
		if err != nil || string(got) != tc.want {
			t.Errorf("AppendFloat(%v) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := AppendFloat(nil, bad); !errors.Is(err, ErrNotFinite) {
			t.Errorf("AppendFloat(%v) err = %v, want ErrNotFinite", bad, err)
		}
	}
}

// The JSON keys, in order, must be the contract's (CONTRACTS.md tables).
func TestKeyOrder(t *testing.T) {
	tcp := "schema ts_ms pop host kernel arm rollout_id cc cc_version sock_id peer_prefix local_port state " +
		"rtt_us rttvar_us min_rtt_us rto_ms mss cwnd ssthresh unacked sacked lost retrans_out total_retrans " +
		"reordering bytes_sent bytes_acked bytes_retrans bytes_received segs_out segs_in data_segs_out " +
		"data_segs_in delivery_rate_bps pacing_rate_bps delivered app_limited busy_ms rwnd_limited_ms " +
		"sndbuf_limited_ms notsent_bytes send_q_bytes recv_q_bytes snd_wnd rcv_space lastsnd_ms lastrcv_ms " +
		"lastack_ms bbr_bw_bps bbr_min_rtt_us bbr_pacing_gain bbr_cwnd_gain " +
		"total_rto total_rto_recoveries total_rto_time_ms sample_rate"
	conn := "schema ts_ms pop host kernel arm rollout_id cc cc_version cc_source sock_id peer_prefix local_port " +
		"duration_ms seen_duration_ms rtt_us rttvar_us min_rtt_us rto_ms mss cwnd ssthresh unacked sacked lost " +
		"retrans_out total_retrans reordering bytes_sent bytes_acked bytes_retrans bytes_received segs_out " +
		"segs_in data_segs_out data_segs_in delivery_rate_bps pacing_rate_bps delivered delivered_ce app_limited " +
		"busy_ms rwnd_limited_ms sndbuf_limited_ms notsent_bytes snd_wnd rcv_space dsack_dups reord_seen " +
		"rcv_ooopack total_rto total_rto_recoveries total_rto_time_ms sample_rate"
	http := "schema ts_ms pop host kernel arm rollout_id cc peer_prefix conn_serial conn_requests method " +
		"status bytes_sent body_bytes_sent request_time_ms tcpinfo_rtt_us tcpinfo_rttvar_us " +
		"tcpinfo_snd_cwnd tcpinfo_rcv_space sample_rate"
	for _, tc := range []struct {
		rec  any
		want string
	}{{&TCPSample{}, tcp}, {&HTTPRequest{}, http}, {&TCPConn{}, conn}} {
		var buf bytes.Buffer
		if err := NewEncoder(&buf).Encode(tc.rec); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(keys(t, buf.Bytes()), " "); got != tc.want {
			t.Errorf("%T keys:\n got %s\nwant %s", tc.rec, got, tc.want)
		}
	}
}

func keys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	var out []string
	if _, err := dec.Token(); err != nil { // {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestEncodeNullsAndFloats(t *testing.T) {
	r := HTTPRequest{RequestTimeMs: F(912), TcpinfoRTTUs: nil, Method: "<GET>"}
	Meta{Pop: "nrt", SampleRate: 1}.StampHTTP(&r)
	var buf bytes.Buffer
	if err := NewEncoder(&buf).Encode(&r); err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	for _, want := range []string{`"request_time_ms":912.0`, `"tcpinfo_rtt_us":null`, `"sample_rate":1.0`,
		`"method":"<GET>"`, `"schema":"http_request/1"`, `"pop":"nrt"`} {
		if !strings.Contains(s, want) {
			t.Errorf("encoded %s lacks %s", s, want)
		}
	}
	if !strings.HasSuffix(s, "}\n") {
		t.Errorf("encoded record does not end in a newline: %q", s)
	}
	if err := NewEncoder(&buf).Encode(42); err == nil {
		t.Error("Encode(42) succeeded")
	}
	if err := NewEncoder(&buf).Encode(&TCPSample{SampleRate: Float(math.NaN())}); err == nil {
		t.Error("Encode of NaN sample_rate succeeded")
	}
}
