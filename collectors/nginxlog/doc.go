// Package nginxlog parses nginx access-log lines into http_request/1 records. It does no I/O.
//
// Two kinds of input:
//   - JSON lines whose keys are nginx variable names without the "$" (the `ccab` log_format
//     of docs/reference/nginx.md: {"msec":…,"remote_addr":"…",…}); keys may come in any order;
//   - any text log_format, given as nginx writes it in its configuration (`combined`, or
//     `log_format name [escape=default|json|none] '…' '…';`, or just the format text). The
//     format is compiled once into an anchored regular expression; each variable becomes a
//     group in the alphabet of what nginx writes there: narrow for values nginx computes
//     (numbers, addresses, times), otherwise what the escaping leaves (default escaping
//     writes `"`, `\` and bytes outside 0x20–0x7E as \xHH, so no value holds a raw `"`).
//     A format in which a client-controlled value ($http_user_agent, $request, ...) could
//     hold the text around it and shift a field the record reads is refused (ErrAmbiguous,
//     ambiguity.go); on the others every match of a line gives the same record.
//
// Lines may carry a syslog header (nginx's access_log syslog:…), stripped per
// Options.Syslog. A format without a time variable gives records with the read time
// (TsSource "read"); a unix-socket client ($remote_addr "unix:") a null peer_prefix.
//
// Client addresses are reduced to their /24 or /48 here; the raw IP never leaves the parser.
package nginxlog
