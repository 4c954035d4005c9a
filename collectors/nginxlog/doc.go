// Package nginxlog parses nginx access-log lines into http_request/1 records. It does no I/O.
//
// Two kinds of input:
//   - JSON lines whose keys are nginx variable names without the "$" (the `ccab` log_format
//     of docs/reference/nginx.md: {"msec":…,"remote_addr":"…",…}); keys may come in any order;
//   - any text log_format, given as nginx writes it in its configuration (`combined`, or
//     `log_format name [escape=default|json|none] '…' '…';`, or just the format text). The
//     format is compiled once into an anchored regular expression; each variable becomes a
//     group whose alphabet follows from nginx's escaping (default escaping writes `"`, `\`
//     and bytes outside 0x20–0x7E as \xHH, so no value holds a raw `"`).
//
// Client addresses are reduced to their /24 or /48 here; the raw IP never leaves the parser.
package nginxlog
