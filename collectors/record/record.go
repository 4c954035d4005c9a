// Package record holds the wire records of contracts/CONTRACTS.md that the edge
// collector writes: tcp_sample/1 and http_request/1.
//
// Field order in the structs is the contract's order, and encoding/json keeps declaration
// order, so the JSON is stable. Every field a source may fail to report is a pointer: nil
// encodes as null, which keeps "not reported" apart from 0.
package record

import (
	"errors"
	"math"
	"strconv"
)

// Schema names, as carried in every record's "schema" field.
const (
	SchemaTCPSample   = "tcp_sample/1"
	SchemaHTTPRequest = "http_request/1"
	SchemaTCPConn     = "tcp_conn/1"
)

// TCPSample is one sampled socket at one sampling tick (tcp_sample/1).
type TCPSample struct {
	Schema    string `json:"schema"`
	TsMs      int64  `json:"ts_ms"`
	Pop       string `json:"pop"`
	Host      string `json:"host"`
	Kernel    string `json:"kernel"`
	Arm       string `json:"arm"`
	RolloutID string `json:"rollout_id"`

	CC        string `json:"cc"`
	CCVersion *int64 `json:"cc_version"`
	// CCImpl is which implementation of cc runs: CCImplKernel or CCImplBPF (optional, added
	// after tcp_sample/1 was first published: absent when the collector cannot tell).
	CCImpl     string `json:"cc_impl,omitempty"`
	SockID     string `json:"sock_id"`
	PeerPrefix string `json:"peer_prefix"`
	LocalPort  int64  `json:"local_port"`
	State      string `json:"state"`

	RTTUs    *int64 `json:"rtt_us"`
	RTTVarUs *int64 `json:"rttvar_us"`
	MinRTTUs *int64 `json:"min_rtt_us"`
	RTOMs    *int64 `json:"rto_ms"`
	MSS      *int64 `json:"mss"`
	Cwnd     *int64 `json:"cwnd"`
	Ssthresh *int64 `json:"ssthresh"`

	Unacked      *int64 `json:"unacked"`
	Sacked       *int64 `json:"sacked"`
	Lost         *int64 `json:"lost"`
	RetransOut   *int64 `json:"retrans_out"`
	TotalRetrans *int64 `json:"total_retrans"`
	Reordering   *int64 `json:"reordering"`

	BytesSent     *int64 `json:"bytes_sent"`
	BytesAcked    *int64 `json:"bytes_acked"`
	BytesRetrans  *int64 `json:"bytes_retrans"`
	BytesReceived *int64 `json:"bytes_received"`
	SegsOut       *int64 `json:"segs_out"`
	SegsIn        *int64 `json:"segs_in"`
	DataSegsOut   *int64 `json:"data_segs_out"`
	DataSegsIn    *int64 `json:"data_segs_in"`

	DeliveryRateBps *int64 `json:"delivery_rate_bps"`
	PacingRateBps   *int64 `json:"pacing_rate_bps"`
	Delivered       *int64 `json:"delivered"`
	AppLimited      *bool  `json:"app_limited"`

	BusyMs          *int64 `json:"busy_ms"`
	RwndLimitedMs   *int64 `json:"rwnd_limited_ms"`
	SndbufLimitedMs *int64 `json:"sndbuf_limited_ms"`

	NotsentBytes *int64 `json:"notsent_bytes"`
	SendQBytes   int64  `json:"send_q_bytes"`
	RecvQBytes   int64  `json:"recv_q_bytes"`
	SndWnd       *int64 `json:"snd_wnd"`
	RcvSpace     *int64 `json:"rcv_space"`

	LastsndMs *int64 `json:"lastsnd_ms"`
	LastrcvMs *int64 `json:"lastrcv_ms"`
	LastackMs *int64 `json:"lastack_ms"`

	BBRBwBps      *int64 `json:"bbr_bw_bps"`
	BBRMinRTTUs   *int64 `json:"bbr_min_rtt_us"`
	BBRPacingGain *Float `json:"bbr_pacing_gain"`
	BBRCwndGain   *Float `json:"bbr_cwnd_gain"`

	// Optional fields added after tcp_sample/1 was first published (CONTRACTS.md allows new
	// optional fields): null when the kernel's struct tcp_info is too short (< 6.7) or the
	// source cannot tell (ss never prints them).
	TotalRTO           *int64 `json:"total_rto"`
	TotalRTORecoveries *int64 `json:"total_rto_recoveries"`
	TotalRTOTimeMs     *int64 `json:"total_rto_time_ms"`

	SampleRate Float `json:"sample_rate"`

	// PolicyGeneration is the generation of the assignment/2 socket policy that set this
	// connection's congestion control (optional, as in tcp_conn/1: absent unless a policy did).
	PolicyGeneration *int64 `json:"policy_generation,omitempty"`
}

// TCPConn is one TCP connection at its end (tcp_conn/1): the final counters the kernel
// broadcast when it destroyed the socket.
type TCPConn struct {
	Schema    string `json:"schema"`
	TsMs      int64  `json:"ts_ms"`
	Pop       string `json:"pop"`
	Host      string `json:"host"`
	Kernel    string `json:"kernel"`
	Arm       string `json:"arm"`
	RolloutID string `json:"rollout_id"`

	CC        string `json:"cc"`
	CCVersion *int64 `json:"cc_version"`
	CCSource  string `json:"cc_source"`
	// CCImpl is which implementation of cc ran: CCImplKernel or CCImplBPF (optional: absent
	// when not known).
	CCImpl     string `json:"cc_impl,omitempty"`
	SockID     string `json:"sock_id"`
	PeerPrefix string `json:"peer_prefix"`
	LocalPort  int64  `json:"local_port"`

	DurationMs     *int64 `json:"duration_ms"`
	SeenDurationMs *int64 `json:"seen_duration_ms"`

	RTTUs    *int64 `json:"rtt_us"`
	RTTVarUs *int64 `json:"rttvar_us"`
	MinRTTUs *int64 `json:"min_rtt_us"`
	RTOMs    *int64 `json:"rto_ms"`
	MSS      *int64 `json:"mss"`
	Cwnd     *int64 `json:"cwnd"`
	Ssthresh *int64 `json:"ssthresh"`

	Unacked      *int64 `json:"unacked"`
	Sacked       *int64 `json:"sacked"`
	Lost         *int64 `json:"lost"`
	RetransOut   *int64 `json:"retrans_out"`
	TotalRetrans *int64 `json:"total_retrans"`
	Reordering   *int64 `json:"reordering"`

	BytesSent     *int64 `json:"bytes_sent"`
	BytesAcked    *int64 `json:"bytes_acked"`
	BytesRetrans  *int64 `json:"bytes_retrans"`
	BytesReceived *int64 `json:"bytes_received"`
	SegsOut       *int64 `json:"segs_out"`
	SegsIn        *int64 `json:"segs_in"`
	DataSegsOut   *int64 `json:"data_segs_out"`
	DataSegsIn    *int64 `json:"data_segs_in"`

	DeliveryRateBps *int64 `json:"delivery_rate_bps"`
	PacingRateBps   *int64 `json:"pacing_rate_bps"`
	Delivered       *int64 `json:"delivered"`
	DeliveredCE     *int64 `json:"delivered_ce"`
	AppLimited      *bool  `json:"app_limited"`

	BusyMs          *int64 `json:"busy_ms"`
	RwndLimitedMs   *int64 `json:"rwnd_limited_ms"`
	SndbufLimitedMs *int64 `json:"sndbuf_limited_ms"`

	NotsentBytes *int64 `json:"notsent_bytes"`
	SndWnd       *int64 `json:"snd_wnd"`
	RcvSpace     *int64 `json:"rcv_space"`
	DsackDups    *int64 `json:"dsack_dups"`
	ReordSeen    *int64 `json:"reord_seen"`
	RcvOoopack   *int64 `json:"rcv_ooopack"`

	TotalRTO           *int64 `json:"total_rto"`
	TotalRTORecoveries *int64 `json:"total_rto_recoveries"`
	TotalRTOTimeMs     *int64 `json:"total_rto_time_ms"`

	// PolicyGeneration is the generation of the assignment/2 socket policy that set this
	// connection's congestion control (rollout/sockpolicy); absent when no policy did.
	PolicyGeneration *int64 `json:"policy_generation,omitempty"`

	SampleRate Float `json:"sample_rate"`
}

// CC sources of tcp_conn/1 (cc_source): how the connection's congestion control was learned.
const (
	CCSourceSocket       = "socket"        // INET_DIAG_CONG of this very socket, read by the poller while it lived
	CCSourceNetnsDefault = "netns_default" // net.ipv4.tcp_congestion_control of its namespace when it closed
	CCSourceUnknown      = "unknown"       // neither (cc is "")

	CCImplKernel = "kernel"   // the kernel's own algorithm (built in or a module)
	CCImplBPF    = "ccab-bpf" // ccab's BPF algorithm (rollout/bpfcc), loaded by the agent
)

// HTTPRequest is one nginx access-log line (http_request/1).
type HTTPRequest struct {
	Schema    string `json:"schema"`
	TsMs      int64  `json:"ts_ms"`
	Pop       string `json:"pop"`
	Host      string `json:"host"`
	Kernel    string `json:"kernel"`
	Arm       string `json:"arm"`
	RolloutID string `json:"rollout_id"`
	CC        string `json:"cc"`

	PeerPrefix   string `json:"peer_prefix"`
	ConnSerial   *int64 `json:"conn_serial"`
	ConnRequests *int64 `json:"conn_requests"`
	Method       string `json:"method"`
	Status       *int64 `json:"status"`

	BytesSent     *int64 `json:"bytes_sent"`
	BodyBytesSent *int64 `json:"body_bytes_sent"`
	RequestTimeMs *Float `json:"request_time_ms"`

	TcpinfoRTTUs    *int64 `json:"tcpinfo_rtt_us"`
	TcpinfoRTTVarUs *int64 `json:"tcpinfo_rttvar_us"`
	TcpinfoSndCwnd  *int64 `json:"tcpinfo_snd_cwnd"`
	TcpinfoRcvSpace *int64 `json:"tcpinfo_rcv_space"`

	SampleRate Float `json:"sample_rate"`

	// TsSource is "read" when the log line carried no time and ts_ms is when the line was
	// read; empty (not written) when ts_ms is the log's own time. Optional in the contract.
	TsSource string `json:"ts_source,omitempty"`
	// PeerPrefixNull writes peer_prefix as null: the client had no IP address (a unix-socket
	// client, $remote_addr "unix:"). PeerPrefix is then "".
	PeerPrefixNull bool `json:"-"`
}

// Meta is what the collecting host adds to every record: where and when it was sampled.
type Meta struct {
	TsMs       int64 // sampling time; used by tcp_sample only (http_request carries $msec)
	Pop        string
	Host       string
	Kernel     string
	Arm        string
	RolloutID  string
	CC         string // host default congestion control; used by http_request only
	SampleRate float64
}

// StampTCP sets the schema and the host fields of s.
func (m Meta) StampTCP(s *TCPSample) {
	s.Schema = SchemaTCPSample
	s.TsMs = m.TsMs
	s.Pop, s.Host, s.Kernel, s.Arm, s.RolloutID = m.Pop, m.Host, m.Kernel, m.Arm, m.RolloutID
	s.SampleRate = Float(m.SampleRate)
}

// StampConn sets the schema and the host fields of c (ts_ms is the close time, the
// caller's).
func (m Meta) StampConn(c *TCPConn) {
	c.Schema = SchemaTCPConn
	c.Pop, c.Host, c.Kernel, c.Arm, c.RolloutID = m.Pop, m.Host, m.Kernel, m.Arm, m.RolloutID
	c.SampleRate = Float(m.SampleRate)
}

// StampHTTP sets the schema and the host fields of r; r.TsMs is the log line's own.
func (m Meta) StampHTTP(r *HTTPRequest) {
	r.Schema = SchemaHTTPRequest
	r.Pop, r.Host, r.Kernel, r.Arm, r.RolloutID = m.Pop, m.Host, m.Kernel, m.Arm, m.RolloutID
	r.CC = m.CC
	r.SampleRate = Float(m.SampleRate)
}

// Int returns a pointer to v, for the nullable integer fields.
func Int(v int64) *int64 { return &v }

// Bool returns a pointer to v.
func Bool(v bool) *bool { return &v }

// F returns a pointer to Float(v).
func F(v float64) *Float { f := Float(v); return &f }

// Float is a float64 that always encodes as a JSON float (912.0, not 912), so that consumers
// which check types see the contract's "float".
type Float float64

// ErrNotFinite is returned when encoding a NaN or infinite Float, which JSON cannot carry.
var ErrNotFinite = errors.New("record: float is not finite")

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	return AppendFloat(nil, float64(f))
}

// AppendFloat appends x as a JSON number that always reads back as a float.
func AppendFloat(b []byte, x float64) ([]byte, error) {
	// An integral value below 2^53 prints as its integer and ".0" (strconv's shortest 'f'
	// form of it is the integer's digits); -0 is left to strconv. The conversion to int64 and
	// back is exact for such values (and the test needs no call: math.Trunc is one without
	// SSE4.1, GOAMD64=v1); NaN fails the range test.
	if x > -(1<<53) && x < 1<<53 {
		if i := int64(x); float64(i) == x && (i != 0 || !math.Signbit(x)) {
			return append(appendInt(b, i), '.', '0'), nil
		}
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil, ErrNotFinite
	}
	// Same choice of notation as encoding/json, then make sure a float stays a float.
	format := byte('f')
	if abs := math.Abs(x); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	start := len(b)
	b = strconv.AppendFloat(b, x, format, -1, 64)
	for _, c := range b[start:] {
		if c == '.' || c == 'e' {
			return b, nil
		}
	}
	return append(b, '.', '0'), nil
}
