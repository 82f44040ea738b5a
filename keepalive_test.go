package mcpsandbox

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// idleProxy is a TCP proxy that, like nginx's proxy_read_timeout or a cloud load
// balancer, closes a connection when the upstream has sent nothing for idle.
type idleProxy struct {
	ln   net.Listener
	idle time.Duration
	mu   sync.Mutex
	cuts int
}

func startIdleProxy(t testing.TB, upstream string, idle time.Duration) *idleProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &idleProxy{ln: ln, idle: idle}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(down, upstream)
		}
	}()
	return p
}

func (p *idleProxy) serve(down net.Conn, upstream string) {
	defer down.Close()
	up, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, down); up.Close() }()
	buf := make([]byte, 32<<10)
	for {
		_ = up.SetReadDeadline(time.Now().Add(p.idle))
		n, err := up.Read(buf)
		if n > 0 {
			if _, werr := down.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				p.mu.Lock()
				p.cuts++
				p.mu.Unlock()
			}
			return
		}
	}
}

func (p *idleProxy) url() string { return "http://" + p.ln.Addr().String() }

// TestLongCommandThroughIdleProxy: a 60 s command that prints nothing, called by a
// client that sent no progress token, survives a proxy that cuts connections idle for
// 10 s, because the response stream carries keep-alives. The control (keep-alive
// interval longer than the proxy's idle timeout) shows the proxy does cut.
func TestLongCommandThroughIdleProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("takes a minute")
	}
	for _, tc := range []struct {
		name      string
		keepalive string
		command   string
		wantCut   bool
	}{
		{"control: silent stream is cut", "30s", "sleep 15; echo late", true},
		{"keep-alive survives", "5s", "sleep 60; echo survived", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// yield_after off: the call itself must outlive the proxy's idle timeout.
			s := startSite(t, siteOptions{directive: []string{"keepalive " + tc.keepalive, "yield_after off"}})
			proxy := startIdleProxy(t, strings.TrimPrefix(s.url, "http://"), 10*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			c := s.clientWith(ctx, proxy.url(), mcp.ProtocolVersion20251125)
			req := mcp.CallToolRequest{}
			req.Params.Name = "execute"
			req.Params.Arguments = map[string]any{"command": tc.command}
			res, err := c.CallTool(ctx, req)
			proxy.mu.Lock()
			cuts := proxy.cuts
			proxy.mu.Unlock()
			if tc.wantCut {
				if err == nil || cuts == 0 {
					t.Fatalf("control: the proxy did not cut the silent stream (err %v, cuts %d)", err, cuts)
				}
				return
			}
			if err != nil {
				t.Fatalf("call through the proxy failed: %v (proxy cuts: %d)", err, cuts)
			}
			if got := structured(t, res)["stdout"]; got != "survived\n" {
				t.Fatalf("stdout = %q", got)
			}
		})
	}
}
