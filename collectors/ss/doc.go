// Package ss parses the text of `ss -tin` and `ss -tinHOe` (iproute2 3.x–6.x) into
// tcp_sample/1 records. It does no I/O of its own: Scanner groups lines of any io.Reader into
// socket entries, and ParseEntry turns one entry into a Socket.
//
// Accepted forms (see docs/reference/ss_tcp_info_bbr.md for the formats by version):
//
//   - the socket line with or without the Netid and State columns, with or without the header
//     line (with or without its Process column), with -e/-o/-m/-p tokens (uid:, ino:, sk:,
//     cgroup:, timer:(…), skmem:(…), users:((…))) anywhere after the addresses;
//
//   - the info block on the same line (-O) or on following lines that start with white space;
//
//   - rates as raw "4762104bps" (-n on ≥ 5.2), "%.1f" with K/M ("10.8Mbps", "12871.1Mbps",
//     ≤ 5.6) or "%.3g" with k/M/G/T ("1.33Gbps", "466Mbps", ≥ 5.7), and "pacing_rate X/Y";
//
//   - the stock bbr:(bw,mrtt,pacing_gain,cwnd_gain) block and Google's extended one with
//     version:N, which gives cc_version.
//
//   - ports as numbers or, without -n, as service names (services.go).
//
// A token whose value cannot be read nulls its own fields only (Socket.Unread); a socket
// followed by a stray unindented line (a continuation that lost its indent) is kept
// without defaults (Socket.Incomplete). What a token that ss hides means is decided in
// defaults.go, in one place.
package ss
