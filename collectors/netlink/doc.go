// Package netlink reads TCP sockets from the kernel over NETLINK_SOCK_DIAG, the interface
// ss(8) uses, without running ss.
//
// It follows the kernel's boundaries:
//   - inet_diag.go: include/uapi/linux/inet_diag.h and sock_diag.h — the dump request
//     (inet_diag_req_v2, state mask, extension bits, port bytecode), inet_diag_msg and its
//     attributes;
//   - tcp_info.go: include/uapi/linux/tcp.h — struct tcp_info of any kernel, read by offset;
//   - bbr.go: struct tcp_bbr_info (INET_DIAG_BBRINFO), 20 bytes (v1) or 52 bytes (v2/v3);
//   - sample.go: a Socket as a tcp_sample/1 record, with the same units and the same
//     null-versus-0 rules as the ss text parser (package ss);
//   - conn.go: the only I/O — a netlink socket, optionally created inside another network
//     namespace, and a streamed dump.
//
// Decoding is pure: Decode takes the bytes of one netlink message, and the tests feed it
// dumps recorded on a real kernel (testdata/) and messages synthesized from them.
package netlink
