package mcpsandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// relayClient is the baseline of the preview benchmarks: HTTP over the same exec relay
// (sandbox.DialPort), with keep-alive, and no Caddy in front.
func relayClient(b *testing.B, p *previewSite, port int) *http.Client {
	cfg := sandbox.DefaultConfig()
	cfg.Image, cfg.Container, cfg.Volume = testImage(), p.container, p.volume
	cfg.Memory, cfg.CPUs, cfg.NetworkMode = 1<<30, 1, "none"
	sb, err := sandbox.New(p.docker, cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return sb.DialPort(ctx, port)
		},
		MaxConnsPerHost:     16, // as the preview's transport, see preview.maxRelays
		MaxIdleConnsPerHost: 16,
		DisableCompression:  true,
		ReadBufferSize:      64 << 10,
		WriteBufferSize:     64 << 10,
	}}
}

// fetchBuf is fetch's read buffer, reused so the benchmark measures the proxy, not
// the garbage collector. Benchmarks fetch from one goroutine.
var fetchBuf [256 << 10]byte // racy in the churn debug, harmless

// fetch GETs u and returns the number of body bytes.
func fetch(b *testing.B, c *http.Client, u string) int64 {
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	buf := fetchBuf[:]
	for {
		k, rerr := resp.Body.Read(buf)
		n += int64(k)
		if rerr != nil {
			if rerr != io.EOF {
				err = rerr
			}
			break
		}
	}
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("GET %s: %d, %v", u, resp.StatusCode, err)
	}
	return n
}

func benchPreviewSite(b *testing.B) (*previewSite, string, *http.Client) {
	p := startPreviewSite(b)
	p.startServer(b, 8000)
	u := p.expose(b, 8000)["url"].(string)
	p.waitFor(b, u, http.StatusOK)
	direct := relayClient(b, p, 8000)
	return p, u, direct
}

// BenchmarkPreviewDownload: a 200 MB download through the preview (Caddy's reverse
// proxy over a pooled exec relay) next to the same bytes straight through an exec
// relay, alternating the two. Reports both throughputs and their ratio (target >= 0.8).
func BenchmarkPreviewDownload(b *testing.B) {
	const size = 200 << 20
	p, u, direct := benchPreviewSite(b)
	path := fmt.Sprintf("big?n=%d", size)
	fetch(b, direct, "http://localhost:8000/"+path) // warm both pools
	fetch(b, p.web, u+path)

	var raw, full time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		n := fetch(b, direct, "http://localhost:8000/"+path)
		t1 := time.Now()
		m := fetch(b, p.web, u+path)
		t2 := time.Now()
		if n != size || m != size {
			b.Fatalf("read %d and %d bytes, want %d", n, m, size)
		}
		raw += t1.Sub(t0)
		full += t2.Sub(t1)
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(raw), "relay-MB/s")
	b.ReportMetric(mbps(full), "preview-MB/s")
	b.ReportMetric(mbps(full)/mbps(raw), "ratio")
}

// BenchmarkPreviewRequests: small requests one after another over keep-alive, through
// the preview and straight through a relay, alternating. Reports requests per second
// and their ratio (target >= 0.8).
func BenchmarkPreviewRequests(b *testing.B) {
	p, u, direct := benchPreviewSite(b)
	fetch(b, direct, "http://localhost:8000/hello")
	fetch(b, p.web, u+"hello")

	var raw, full time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		fetch(b, direct, "http://localhost:8000/hello")
		t1 := time.Now()
		fetch(b, p.web, u+"hello")
		t2 := time.Now()
		raw += t1.Sub(t0)
		full += t2.Sub(t1)
	}
	b.StopTimer()
	rps := func(d time.Duration) float64 { return float64(b.N) / d.Seconds() }
	b.ReportMetric(rps(raw), "relay-req/s")
	b.ReportMetric(rps(full), "preview-req/s")
	b.ReportMetric(rps(full)/rps(raw), "ratio")
}

// BenchmarkPreviewRequestsParallel is BenchmarkPreviewRequests with six connections at
// once, as a browser loads a page's assets: each iteration makes 60 requests over six
// kept-alive connections, through the preview and straight through relays.
func BenchmarkPreviewRequestsParallel(b *testing.B) {
	const conns, perConn = 6, 10
	p, u, direct := benchPreviewSite(b)
	burst := func(c *http.Client, url string) time.Duration {
		t0 := time.Now()
		errs := make(chan error, conns)
		for i := 0; i < conns; i++ {
			go func() {
				buf := make([]byte, 4096)
				for j := 0; j < perConn; j++ {
					resp, err := c.Get(url)
					if err != nil {
						errs <- err
						return
					}
					for {
						if _, err := resp.Body.Read(buf); err != nil {
							break
						}
					}
					resp.Body.Close()
					if resp.StatusCode != 200 {
						errs <- fmt.Errorf("status %d", resp.StatusCode)
						return
					}
				}
				errs <- nil
			}()
		}
		for i := 0; i < conns; i++ {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0)
	}
	burst(direct, "http://localhost:8000/hello") // open the connections
	burst(p.web, u+"hello")

	var raw, full time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		raw += burst(direct, "http://localhost:8000/hello")
		full += burst(p.web, u+"hello")
	}
	b.StopTimer()
	b.ReportMetric(float64(p.relays(b)), "relays")
	rps := func(d time.Duration) float64 { return float64(b.N*conns*perConn) / d.Seconds() }
	b.ReportMetric(rps(raw), "relay-req/s")
	b.ReportMetric(rps(full), "preview-req/s")
	b.ReportMetric(rps(full)/rps(raw), "ratio")
}
