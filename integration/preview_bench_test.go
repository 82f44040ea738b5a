package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// The preview benchmarks compare the preview URL (a client, Caddy's reverse proxy,
// pooled exec relays) with two baselines over the same exec relay (sandbox.DialPort)
// and with no Caddy in front:
//
//   - forward: the relay as a port-forward, as `kubectl port-forward` is one: a
//     loopback listener whose every connection is copied both ways through its own
//     relay, and the client connects to it. It has the same network hop to the
//     client that Caddy has, so the ratio to it is what Caddy in front costs.
//   - dialer: an HTTP client inside the process that dials the relay itself, with no
//     network hop at all: the bytes are read straight through the relay.
//   - exec: the dialer over the fallback's relay, one Docker exec per connection (the
//     relay before the agent carried connections as streams of its channel).
//
// Both baselines use the same client settings as the preview's client.

// relaySandbox returns a Sandbox for p's container, to dial relays with: through the
// agent, or (noAgent) one Docker exec per connection.
func relaySandbox(b *testing.B, p *previewSite, noAgent bool) *sandbox.Sandbox {
	cfg := sandbox.DefaultConfig()
	cfg.Image, cfg.Container, cfg.Volume = testengine.Image(), p.Container, p.Volume
	cfg.Memory, cfg.CPUs, cfg.NetworkMode = 1<<30, 1, "none"
	cfg.NoAgent = noAgent
	cfg.AgentSocketDir = filepath.Join(caddy.AppDataDir(), "mcp-sandbox", "agent") // as the site's
	sb, err := sandbox.New(sandbox.Docker(p.Docker), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	return sb
}

// benchClient is an HTTP client with keep-alive whose connections come from dial.
func benchClient(dial func(ctx context.Context) (net.Conn, error)) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx)
		},
		MaxConnsPerHost:     16, // as the preview's transport, see preview.maxRelays
		MaxIdleConnsPerHost: 16,
		DisableCompression:  true,
		ReadBufferSize:      64 << 10,
		WriteBufferSize:     64 << 10,
	}}
}

// dialerClient is the dialer baseline: HTTP straight over relays from sb.DialPort.
func dialerClient(sb *sandbox.Sandbox, port int) *http.Client {
	return benchClient(func(ctx context.Context) (net.Conn, error) { return sb.DialPort(ctx, port) })
}

// forwardClient is the forward baseline: a port-forward on a loopback port, each of
// its connections copied both ways through a relay of its own, and a client of it.
func forwardClient(b *testing.B, sb *sandbox.Sandbox, port int) *http.Client {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var conns sync.WaitGroup
	b.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				rc, err := sb.DialPort(context.Background(), port)
				if err != nil {
					return
				}
				defer rc.Close()
				done := make(chan struct{})
				go func() {
					// The copies hide ReadFrom and WriteTo, so that both directions
					// move up to 256 KiB per write, as the preview's transport does.
					io.CopyBuffer(struct{ io.Writer }{rc}, struct{ io.Reader }{c}, make([]byte, 256<<10))
					rc.(interface{ CloseWrite() error }).CloseWrite()
					close(done)
				}()
				io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{rc}, make([]byte, 256<<10))
				c.Close()
				<-done
			}()
		}
	}()
	addr := ln.Addr().String()
	var d net.Dialer
	client := benchClient(func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) })
	b.Cleanup(client.CloseIdleConnections)
	return client
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

// benchPath is one way to the test server's port 8000: a client and its base URL.
type benchPath struct {
	c    *http.Client
	base string
}

// benchPaths are the ways to the test server that the preview benchmarks compare.
type benchPaths struct {
	p                              *previewSite
	preview, forward, dialer, exec benchPath
}

func benchPreviewSite(b *testing.B) *benchPaths {
	p := startPreviewSite(b)
	p.startServer(b, 8000)
	u := p.expose(b, 8000)["url"].(string)
	p.waitFor(b, u, http.StatusOK)
	sb := relaySandbox(b, p, false)
	return &benchPaths{
		p: p,
		// The same client as the other paths, dialing Caddy whatever the host name.
		preview: benchPath{benchClient(func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", p.Port))
		}), u},
		forward: benchPath{forwardClient(b, sb, 8000), "http://localhost:8000/"},
		dialer:  benchPath{dialerClient(sb, 8000), "http://localhost:8000/"},
		exec:    benchPath{dialerClient(relaySandbox(b, p, true), 8000), "http://localhost:8000/"},
	}
}

// compare measures the paths in blocks: each block runs round perBlock times over
// each path in turn (after one round each to open connections), until b.N rounds per
// path. It reports, as medians over the blocks, each path's rate in unit (work is the
// amount one round does) and the ratios preview/forward, preview/dialer, preview/exec
// and dialer/exec (the agent's relay against one exec per connection). Medians of
// ratios taken block by block keep a burst of load from a neighbour on a shared
// machine from deciding the result.
func (bp *benchPaths) compare(b *testing.B, unit string, work float64, perBlock int, round func(benchPath)) {
	paths := []benchPath{bp.preview, bp.forward, bp.dialer, bp.exec}
	for _, path := range paths {
		round(path)
	}
	rates := make([][]float64, len(paths))
	var ratio, ratioDialer, ratioExec, relayExec []float64
	b.ResetTimer()
	for done := 0; done < b.N; done += perBlock {
		n := min(perBlock, b.N-done)
		block := make([]float64, len(paths))
		for k, path := range paths {
			t0 := time.Now()
			for i := 0; i < n; i++ {
				round(path)
			}
			block[k] = work * float64(n) / time.Since(t0).Seconds()
			rates[k] = append(rates[k], block[k])
		}
		ratio = append(ratio, block[0]/block[1])
		ratioDialer = append(ratioDialer, block[0]/block[2])
		ratioExec = append(ratioExec, block[0]/block[3])
		relayExec = append(relayExec, block[2]/block[3])
	}
	b.StopTimer()
	for k, name := range []string{"preview", "forward", "dialer", "exec"} {
		b.ReportMetric(median(rates[k]), name+"-"+unit)
	}
	b.ReportMetric(median(ratio), "ratio-forward")
	b.ReportMetric(median(ratioDialer), "ratio-dialer")
	b.ReportMetric(median(ratioExec), "ratio-exec")
	b.ReportMetric(median(relayExec), "relay-vs-exec")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkPreviewDownload: a 200 MB download through the preview and through each
// baseline, in turn. Target: ratio-dialer >= 0.8 (the bytes read straight through a
// relay).
func BenchmarkPreviewDownload(b *testing.B) {
	const size = 200 << 20
	bp := benchPreviewSite(b)
	path := fmt.Sprintf("big?n=%d", size)
	bp.compare(b, "MB/s", size/1e6, 1, func(p benchPath) {
		if n := fetch(b, p.c, p.base+path); n != size {
			b.Fatalf("read %d bytes, want %d", n, size)
		}
	})
}

// BenchmarkPreviewRequests: small requests one after another over keep-alive, through
// the preview and through each baseline, in blocks of 100. Target: ratio-forward >=
// 0.8 (the same relay, without Caddy in front).
func BenchmarkPreviewRequests(b *testing.B) {
	bp := benchPreviewSite(b)
	bp.compare(b, "req/s", 1, 100, func(p benchPath) { fetch(b, p.c, p.base+"hello") })
}

// BenchmarkPreviewRequestsParallel is BenchmarkPreviewRequests with six connections at
// once, as a browser loads a page's assets: each round makes 60 requests over six
// kept-alive connections.
func BenchmarkPreviewRequestsParallel(b *testing.B) {
	const conns, perConn = 6, 10
	bp := benchPreviewSite(b)
	bp.compare(b, "req/s", conns*perConn, 5, func(p benchPath) {
		errs := make(chan error, conns)
		for i := 0; i < conns; i++ {
			go func() {
				buf := make([]byte, 4096)
				for j := 0; j < perConn; j++ {
					resp, err := p.c.Get(p.base + "hello")
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
	})
	b.ReportMetric(float64(bp.p.relays(b)), "relays")
}
