package mcpsandbox

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
)

// Through a real Caddy and container: a program opens 200 connections to the egress
// proxy, each asking an upstream for an endless answer, and never reads. The proxy
// serves 64 (the cap; the rest are answered 503), the write limit closes those, and
// two minutes on Caddy holds neither their memory, goroutines nor upstream sockets.
func TestEgressNeverReadingThroughCaddy(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and two minutes")
	}
	var active atomic.Int32
	chunk := []byte(strings.Repeat("x", 32<<10))
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		active.Add(1)
		defer active.Add(-1)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer up.Close()
	pu, _ := url.Parse(up.URL)
	port := pu.Port()
	s := startSite(t, siteOptions{directive: []string{fmt.Sprintf(`egress {
			allow endless.test:%s
			host endless.test 127.0.0.1
		}`, port)}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := s.client(ctx)
	call(ctx, t, c, "execute", map[string]any{"command": `for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && break; sleep 0.1; done`})
	proxy := s.egressProxyConns(t)
	baseMem, baseG := heldHeap()

	// The 80th connection is beyond the proxy's cap but within what the agent carries
	// (agentwire.MaxAgentStreams): the proxy itself answers it.
	script := fmt.Sprintf(`trap "" PIPE; for i in $(seq 200); do exec {fd}<>/dev/tcp/127.0.0.1/3128 || exit 1; [ $i = 80 ] && late=$fd; printf 'GET http://endless.test:%s/ HTTP/1.1\r\nHost: endless.test\r\n\r\n' >&$fd 2>/dev/null; done; sleep 3; timeout 5 head -c 400 <&$late >/tmp/last.txt; sleep 170`, port)
	out := structured(t, call(ctx, t, c, "execute", map[string]any{"command": "setsid nohup bash -c '" + strings.ReplaceAll(script, "'", `'\''`) + "' >/dev/null 2>&1 & echo started"}))
	if out["stdout"] != "started\n" {
		t.Fatalf("%v", out)
	}
	began := time.Now()
	for proxy() < 64 || active.Load() < 64 {
		if time.Since(began) > 30*time.Second {
			t.Fatalf("served %d connections, %d upstreams sending; want 64", proxy(), active.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	peakMem, peakG := heldHeap()
	t.Logf("stalled: %d connections served (cap 64), %d upstreams sending, %+.1f MB, %+d goroutines", proxy(), active.Load(), float64(peakMem-baseMem)/1e6, peakG-baseG)
	if proxy() > 64 {
		t.Fatalf("%d connections served beyond the cap", proxy())
	}
	// A connection beyond the cap was told so.
	time.Sleep(3 * time.Second)
	last := structured(t, call(ctx, t, c, "execute", map[string]any{"command": "cat /tmp/last.txt"}))["stdout"].(string)
	if !strings.HasPrefix(last, "HTTP/1.1 503 ") || !strings.Contains(last, "64 connections open through the egress proxy") {
		t.Fatalf("beyond the cap: %q", last)
	}

	time.Sleep(time.Until(began.Add(2 * time.Minute)))
	mem, g := heldHeap()
	grew := int64(mem) - int64(baseMem)
	t.Logf("after 2 minutes: %d connections, %d upstreams sending, %+.1f MB, %+d goroutines", proxy(), active.Load(), float64(grew)/1e6, g-baseG)
	if proxy() != 0 || active.Load() != 0 || grew > 20<<20 || g-baseG > 50 {
		t.Fatalf("after 2 minutes the never-reading connections hold: %d served, %d upstreams, %+d bytes, %+d goroutines", proxy(), active.Load(), grew, g-baseG)
	}
}

// egressProxyConns returns how many connections the site's sandbox's egress proxy
// serves now.
func (s *site) egressProxyConns(t testing.TB) func() int {
	var gw *egress.Gateway
	sandboxes.Range(func(_, v any) bool {
		if x, ok := v.(*fleet.Entry); ok && egressOf(x) != nil && x.Sandbox().Config().Container == s.container {
			gw = egressOf(x)
			return false
		}
		return true
	})
	if gw == nil {
		t.Fatal("no egress proxy for the site's sandbox")
	}
	return gw.Conns
}

// heldHeap is the live heap plus goroutine stacks after a collection, and the
// goroutines.
func heldHeap() (uint64, int) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse, runtime.NumGoroutine()
}
