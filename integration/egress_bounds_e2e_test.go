package integration

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

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
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
	s := testsite.Start(t, testsite.Options{Directive: []string{fmt.Sprintf(`egress {
			allow endless.test:%s
			host endless.test 127.0.0.1
		}`, port)}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": `for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && break; sleep 0.1; done`})
	// Each connection the proxy serves sends its request upstream at once, so the
	// upstream's live requests count the connections the proxy serves.
	baseMem, baseG := heldHeap()

	// The 80th connection is beyond the proxy's cap but within what the agent carries
	// (agentwire.MaxAgentStreams): the proxy itself answers it.
	// The late one opens only once the test has seen the proxy serve its cap: opened
	// among the first, it could be served before earlier ones were counted.
	req := fmt.Sprintf(`printf 'GET http://endless.test:%s/ HTTP/1.1\r\nHost: endless.test\r\n\r\n'`, port)
	script := `trap "" PIPE; for i in $(seq 79); do exec {fd}<>/dev/tcp/127.0.0.1/3128 || exit 1; ` + req + ` >&$fd 2>/dev/null; done; while [ ! -e /tmp/go ]; do sleep 0.1; done; exec {late}<>/dev/tcp/127.0.0.1/3128; ` + req + ` >&$late 2>/dev/null; timeout 5 head -c 400 <&$late >/tmp/last.txt; sleep 170`
	out := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "setsid nohup bash -c '" + strings.ReplaceAll(script, "'", `'\''`) + "' >/dev/null 2>&1 & echo started"}))
	if out["stdout"] != "started\n" {
		t.Fatalf("%v", out)
	}
	began := time.Now()
	for active.Load() < 64 {
		if time.Since(began) > 30*time.Second {
			t.Fatalf("%d upstreams sending; want 64", active.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	peakMem, peakG := heldHeap()
	t.Logf("stalled: %d connections served (cap 64), %+.1f MB, %+d goroutines", active.Load(), float64(peakMem-baseMem)/1e6, peakG-baseG)
	if n := active.Load(); n > 64 {
		t.Fatalf("%d connections served beyond the cap", n)
	}
	// A connection beyond the cap is told so.
	last := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "touch /tmp/go; for i in $(seq 100); do [ -s /tmp/last.txt ] && sleep 0.5 && break; sleep 0.1; done; cat /tmp/last.txt"}))["stdout"].(string)
	if !strings.HasPrefix(last, "HTTP/1.1 503 ") || !strings.Contains(last, "64 connections open through the egress proxy") {
		t.Fatalf("beyond the cap: %q", last)
	}

	time.Sleep(time.Until(began.Add(2 * time.Minute)))
	mem, g := heldHeap()
	grew := int64(mem) - int64(baseMem)
	t.Logf("after 2 minutes: %d connections served, %+.1f MB, %+d goroutines", active.Load(), float64(grew)/1e6, g-baseG)
	if active.Load() != 0 || grew > 20<<20 || g-baseG > 50 {
		t.Fatalf("after 2 minutes the never-reading connections hold: %d served, %+d bytes, %+d goroutines", active.Load(), grew, g-baseG)
	}
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
