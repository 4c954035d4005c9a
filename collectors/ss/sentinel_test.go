package ss

import "testing"

// tcpi_min_rtt and BBR's min_rtt_us are ~0U µs until the first RTT sample. ss prints them in
// ms with %g: 4.29497e+06 (4294967.295 at full precision). Both are null, not 71 minutes.
func TestNoRTTSample(t *testing.T) {
	const line = "ESTAB 0 0 10.0.0.1:443 10.0.0.9:448 bbr rtt:1.5/0.5 mss:1448 cwnd:10 bytes_sent:1 "
	for _, tc := range []struct {
		name, tokens string
		want         want
	}{
		{"bbr mrtt as ss prints ~0U (%g)", "bbr:(bw:0bps,mrtt:4.29497e+06,pacing_gain:2.88672,cwnd_gain:2.88672) minrtt:1.2",
			want{"bbr_min_rtt_us": `null`, "bbr_bw_bps": `0`, "bbr_pacing_gain": `2.88672`, "min_rtt_us": `1200`}},
		{"bbr mrtt ~0U at full precision", "bbr:(bw:1Mbps,mrtt:4294967.295,pacing_gain:1,cwnd_gain:2)",
			want{"bbr_min_rtt_us": `null`, "bbr_bw_bps": `1000000`, "min_rtt_us": `null`}},
		{"minrtt as ss prints ~0U (%g)", "bbr:(bw:1Mbps,mrtt:4.5,pacing_gain:1,cwnd_gain:2) minrtt:4.29497e+06",
			want{"bbr_min_rtt_us": `4500`, "min_rtt_us": `null`}},
		{"minrtt ~0U at full precision", "minrtt:4294967.295", want{"min_rtt_us": `null`, "bbr_min_rtt_us": `null`}},
		{"both ~0U, version 3 block", "bbr:(bw:0bps,mrtt:4.29497e+06,pacing_gain:2.77344,cwnd_gain:2,version:3,bw_hi:0bps,bw_lo:0bps,inflight_hi:0,inflight_lo:0,extra_acked:0,mode:0,phase:STARTUP) minrtt:4.29497e+06",
			want{"bbr_min_rtt_us": `null`, "min_rtt_us": `null`, "cc_version": `3`}},
		{"just below the sentinel's window: a value", "bbr:(bw:1Mbps,mrtt:4294964.999,pacing_gain:1,cwnd_gain:2) minrtt:4294964.999",
			want{"bbr_min_rtt_us": `4294964999`, "min_rtt_us": `4294964999`}},
		{"mrtt 0 (ss prints it): 0", "bbr:(bw:1Mbps,mrtt:0,pacing_gain:1,cwnd_gain:2)",
			want{"bbr_min_rtt_us": `0`, "min_rtt_us": `null`}},
		{"a real mrtt", "bbr:(bw:1Mbps,mrtt:52.197,pacing_gain:1,cwnd_gain:2) minrtt:50.1",
			want{"bbr_min_rtt_us": `52197`, "min_rtt_us": `50100`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := parseAll(t, line+tc.tokens+"\n", Options{})
			if len(errs) > 0 || len(got) != 1 {
				t.Fatalf("got %d records, skipped %v", len(got), errs)
			}
			checkFields(t, got[0], tc.want)
		})
	}
}
