package nginxlog

import (
	"fmt"
	"math/rand"
	"os"
	"testing"

	"github.com/ccab-dev/ccab/collectors/record"
)

// benchLines returns n lines of the `edge` format (combined plus appended fields) and the
// same requests in the ccab JSON format, as bench/collector/nginx_bench.sh writes them.
func benchLines(n int) (combined, jsonl [][]byte) {
	rng := rand.New(rand.NewSource(1))
	paths := []string{"/", "/big.bin", "/v.mp4", "/img/a.png", "/api/v1/items?id=%d"}
	agents := []string{"curl/8.5.0", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"}
	for i := 0; i < n; i++ {
		ip := fmt.Sprintf("198.51.%d.%d", rng.Intn(256), rng.Intn(256))
		msec := fmt.Sprintf("%d.%03d", 1763769600+i/1000, i%1000)
		path := paths[rng.Intn(len(paths))]
		if path[len(path)-1] == 'd' {
			path = fmt.Sprintf(path, i)
		}
		status, body := 200, 100+rng.Intn(5_000_000)
		switch rng.Intn(3) {
		case 1:
			status, body = 206, 1048576
		case 2:
			status, body = 404, 0
		}
		rt := fmt.Sprintf("%.3f", rng.Float64()*2)
		rtt, cwnd := 200+rng.Intn(90000), 10+rng.Intn(390)
		combined = append(combined, fmt.Appendf(nil, `%s - - [22/Nov/2025:00:%02d:%02d +0000] "GET %s HTTP/1.1" %d %d "-" "%s" %s %s %d 1 %d %d %d %d 14600`,
			ip, (i/60000)%60, (i/1000)%60, path, status, body, agents[rng.Intn(2)], msec, rt, i, body+320, rtt, rtt/4, cwnd))
		jsonl = append(jsonl, fmt.Appendf(nil, `{"msec":%s,"remote_addr":"%s","connection":%d,"connection_requests":1,"request_method":"GET",`+
			`"status":%d,"bytes_sent":%d,"body_bytes_sent":%d,"request_time":%s,"tcpinfo_rtt":"%d",`+
			`"tcpinfo_rttvar":"%d","tcpinfo_snd_cwnd":"%d","tcpinfo_rcv_space":"14600"}`,
			msec, ip, i, status, body+320, body, rt, rtt, rtt/4, cwnd))
	}
	return combined, jsonl
}

func benchParse(b *testing.B, spec string, pick func(c, j [][]byte) [][]byte) {
	conf, err := os.ReadFile("testdata/combined_tcpinfo.conf")
	if err != nil {
		b.Fatal(err)
	}
	name := ""
	if spec == "edge" {
		spec, name = string(conf), "edge"
	}
	p, err := NewParser(spec, name)
	if err != nil {
		b.Fatal(err)
	}
	lines := pick(benchLines(1000))
	var bytes int64
	for _, l := range lines {
		bytes += int64(len(l))
	}
	b.SetBytes(bytes / int64(len(lines)))
	b.ReportAllocs()
	b.ResetTimer()
	var r record.HTTPRequest
	var sc Scratch
	for i := 0; i < b.N; i++ {
		if err := p.ParseInto(lines[i%len(lines)], &r, &sc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseCombined(b *testing.B) {
	benchParse(b, "edge", func(c, _ [][]byte) [][]byte { return c })
}

func BenchmarkParseJSON(b *testing.B) {
	benchParse(b, FormatJSON, func(_, j [][]byte) [][]byte { return j })
}

func BenchmarkParseCCABFormat(b *testing.B) {
	benchParse(b, "ccab", func(_, j [][]byte) [][]byte { return j })
}
