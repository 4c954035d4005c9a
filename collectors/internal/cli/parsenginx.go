package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ccab-dev/ccab/collectors/internal/lines"
	"github.com/ccab-dev/ccab/collectors/nginxlog"
	"github.com/ccab-dev/ccab/collectors/record"
)

// ParseNginx is `parse-nginx`: nginx access-log lines on stdin → http_request/1 JSON lines.
func ParseNginx() Command {
	return Command{Name: "parse-nginx", Summary: "nginx access-log lines on stdin → http_request/1 JSON lines", Run: runParseNginx}
}

func runParseNginx(ctx context.Context, env Env, args []string) int {
	const cmd = "parse-nginx"
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	format := fs.String("format", "", "`json` (keys are variable names, as the ccab format), a predefined name "+
		"(combined, ccab), or an nginx log_format: bare text, '…' '…', or whole log_format directives")
	formatName := fs.String("format-name", "", "which log_format directive of --format to use; alone, a predefined format")
	cc := fs.String("cc", "", "the host's default congestion control while the log was written")
	syslog := fs.String("syslog", "auto", "syslog header before each line (<190>Nov 23 19:53:35 host nginx: …, RFC 3164 or 5424): "+
		"auto (strip it from lines that start with <PRI>), on (every line has one, <PRI> optional), off")
	fieldMap := fs.String("field-map", "", "comma-separated `var=field_var`: read a log_format variable as another, "+
		"e.g. my_rtt=tcpinfo_rtt,upstream_tcpinfo_rtt=tcpinfo_rtt (for JSON lines: keys)")
	strict := fs.Bool("strict", false, "exit 1 if any line was skipped")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ccab-collector %s --format json|combined|'<log_format>' [flags] < access.log\n\n", cmd)
		fs.PrintDefaults()
	}
	if done, status := parseFlags(fs, env, args); done {
		return status
	}
	meta, err := h.meta()
	if err != nil {
		return usageError(env.Stderr, cmd, err)
	}
	meta.CC = *cc
	if *format == "" && *formatName == "" {
		return usageError(env.Stderr, cmd, errors.New("--format or --format-name is required"))
	}
	fm, err := nginxlog.ParseFieldMap(*fieldMap)
	if err != nil {
		return usageError(env.Stderr, cmd, err)
	}
	mode := *syslog
	if mode == "auto" {
		mode = nginxlog.SyslogAuto
	}
	p, err := nginxlog.NewParserOptions(*format, *formatName, nginxlog.Options{FieldMap: fm, Syslog: mode, Now: env.Now})
	if err != nil {
		return usageError(env.Stderr, cmd, err)
	}
	if m := p.Missing(); len(m) > 0 {
		fmt.Fprintf(env.Stderr, "%s: warning: the format does not log %s; they will be null\n", cmd, strings.Join(m, ", "))
	}
	if p.ReadTime() {
		fmt.Fprintf(env.Stderr, "%s: warning: the format logs no time ($msec, $time_iso8601, $time_local): ts_ms is the time each line is read (ts_source \"read\")\n", cmd)
	}

	out := bufio.NewWriterSize(env.Stdout, 256<<10)
	sk := newSkips(cmd, env.Stderr)
	records := 0
	lr := lines.NewReader(env.Stdin, lines.DefaultMaxLen)
	var readErr error
	var r record.HTTPRequest
	var scratch nginxlog.Scratch
	var enc record.HTTPEncoder
	var buf []byte
	for ctx.Err() == nil {
		l, err := lr.NextBytes()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
		if l.TooLong {
			sk.add("line "+strconv.Itoa(l.Num), "line_too_long", 1, fmt.Errorf("line longer than %d bytes", lines.DefaultMaxLen))
			continue
		}
		if len(bytes.TrimSpace(l.Text)) == 0 {
			continue
		}
		if err := p.ParseInto(l.Text, &r, &scratch); err != nil {
			reason := "error"
			var pe *nginxlog.ParseError
			if errors.As(err, &pe) {
				reason = string(pe.Reason)
			}
			sk.add("line "+strconv.Itoa(l.Num), reason, 1, err)
			continue
		}
		meta.StampHTTP(&r)
		if buf, err = enc.AppendTexts(buf[:0], &r, scratch.IntTexts()); err != nil {
			fmt.Fprintf(env.Stderr, "%s: line %d: %v\n", cmd, l.Num, err)
			return ExitFailure
		}
		buf = append(buf, '\n')
		if _, err := out.Write(buf); err != nil {
			fmt.Fprintf(env.Stderr, "%s: line %d: record: encode: %v\n", cmd, l.Num, err)
			return ExitFailure
		}
		records++
	}
	return finish(env, cmd, out, readErr, sk, records, *strict)
}
