package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// BenchmarkEgressInSandbox runs the egress proxy where it really runs, on a listener
// the agent holds in the container, against a bare relay on another such listener, in
// the same run: a 200 MB download with busybox wget, and 50 small requests (each a new
// connection, a new wget). It reports both throughputs, their ratio and the time the
// proxy adds per request.
func BenchmarkEgressInSandbox(b *testing.B) {
	sb, _ := benchSandbox(b)
	ctx := context.Background()
	up := testenv.ZerosServer(b)
	pu, _ := url.Parse(up.URL)
	pol, err := egress.Compile(egress.Rules{Allow: []string{"big.test:" + pu.Port()}, Hosts: map[string]string{"big.test": "127.0.0.1"}})
	if err != nil {
		b.Fatal(err)
	}
	px := &egress.Proxy{Policy: func() *egress.Policy { return pol }}
	defer px.Close()
	stopProxy, _, err := sb.ListenPort(ctx, 3128, px.ServeConn)
	if err != nil {
		b.Fatal(err)
	}
	defer stopProxy()
	stopRelay, _, err := sb.ListenPort(ctx, 3129, func(c net.Conn) {
		defer c.Close()
		u, err := net.Dial("tcp", pu.Host)
		if err != nil {
			return
		}
		defer u.Close()
		go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
		io.Copy(c, u)
	})
	if err != nil {
		b.Fatal(err)
	}
	defer stopRelay()
	timed := func(cmd string) time.Duration {
		begin := time.Now()
		res, err := sb.Exec(ctx, cmd, boxapi.ExecOptions{Timeout: 5 * time.Minute})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%s: %+v %v", cmd, res, err)
		}
		return time.Since(begin)
	}
	const size, small = 200 << 20, 50
	viaRelay := "wget -q -O /dev/null 'http://127.0.0.1:3129/?n=%d'"
	viaProxy := "http_proxy=http://127.0.0.1:3128 wget -q -O /dev/null 'http://big.test:" + pu.Port() + "/?n=%d'"
	loop := "for i in $(seq " + strconv.Itoa(small) + "); do %s || exit 1; done"
	var relayBig, proxyBig, relaySmall, proxySmall time.Duration
	b.ResetTimer()
	for b.Loop() {
		relayBig += timed(fmt.Sprintf(viaRelay, size))
		proxyBig += timed(fmt.Sprintf(viaProxy, size))
		relaySmall += timed(fmt.Sprintf(loop, fmt.Sprintf(viaRelay, 100)))
		proxySmall += timed(fmt.Sprintf(loop, fmt.Sprintf(viaProxy, 100)))
	}
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(relayBig), "relay-MB/s")
	b.ReportMetric(mbps(proxyBig), "proxy-MB/s")
	b.ReportMetric(relayBig.Seconds()/proxyBig.Seconds(), "throughput-ratio")
	b.ReportMetric((proxySmall-relaySmall).Seconds()*1000/float64(small*b.N), "added-ms/req")
}
