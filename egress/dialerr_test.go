package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// dnsServer is a DNS server on loopback UDP that answers every query with rcode
// (3: no such name), or never answers when rcode is negative.
func dnsServer(t *testing.T, rcode int) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := buf[:n]
			if rcode < 0 || n < 12 {
				continue
			}
			// The question: its name's labels up to the root, then type and class.
			end := 12
			for end < n && q[end] != 0 {
				end += int(q[end]) + 1
			}
			end += 5
			if end > n {
				continue
			}
			resp := append([]byte{q[0], q[1], 0x81, 0x80 | byte(rcode), 0, 1, 0, 0, 0, 0, 0, 0}, q[12:end]...)
			_, _ = pc.WriteTo(resp, from)
		}
	}()
	return pc.LocalAddr().String()
}

// loopbackResolver is Go's own resolver with every query sent to server on loopback,
// whatever /etc/resolv.conf names: its errors name the configured server, as in
// production, but no packet leaves the machine.
func loopbackResolver(server string, timeout time.Duration) func(context.Context, string) ([]netip.Addr, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", server)
	}}
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return r.LookupNetIP(ctx, "ip", host)
	}
}

// addrLike is anything that looks like an address of the host's network: an IPv4
// address, an IPv6 one, or a port after a colon.
var addrLike = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+|\[?[0-9a-fA-F]*:[0-9a-fA-F]*:[0-9a-fA-F:]*\]?|:\d+\b`)

// A request that cannot reach its host gets a 502 that says what failed (the name
// could not be resolved, the connection was refused, it timed out) and names no
// address of the host's network: not the resolver's, not the dialer's. The full error
// goes to the operator.
func TestUnreachablePageNamesNoAddress(t *testing.T) {
	closed := func() string {
		l, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := l.LocalAddr().String()
		l.Close()
		return a
	}()
	tcpClosed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, p, _ := net.SplitHostPort(l.Addr().String())
		l.Close()
		return p
	}()
	cases := []struct {
		name, server string
		timeout      time.Duration
		host, port   string
		want         string
	}{
		{"no such name", dnsServer(t, 3), 5 * time.Second, "nope.test", "80", "could not be resolved"},
		{"resolver fails", dnsServer(t, 2), 5 * time.Second, "nope.test", "80", "could not be resolved"},
		{"resolver refuses", closed, 5 * time.Second, "nope.test", "80", "could not be resolved"},
		{"resolver silent", dnsServer(t, -1), 300 * time.Millisecond, "nope.test", "80", "timed out"},
		{"connection refused", dnsServer(t, 3), 5 * time.Second, "down.test", tcpClosed, "connection refused"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var logged []string
			f := newProxyFixtureWith(t, Rules{
				Allow: []string{"nope.test", "down.test:" + tcpClosed},
				Hosts: map[string]string{"down.test": "127.0.0.1"},
			}, func(p *Proxy) {
				p.Resolve = loopbackResolver(c.server, c.timeout)
				p.Failed = func(user, host string, port int, err error) {
					mu.Lock()
					logged = append(logged, fmt.Sprintf("%s %s:%d %v", user, host, port, err))
					mu.Unlock()
				}
			})
			for _, req := range []string{
				fmt.Sprintf("GET http://%s:%s/x HTTP/1.1\r\nHost: %[1]s\r\nProxy-Authorization: Basic ajAxMjM0NTY3ODlhYjp4\r\n\r\n", c.host, c.port),
				fmt.Sprintf("CONNECT %s:%s HTTP/1.1\r\nHost: %[1]s\r\nProxy-Authorization: Basic ajAxMjM0NTY3ODlhYjp4\r\n\r\n", c.host, c.port),
			} {
				status, body := rawProxy(t, f, req)
				page := strings.TrimPrefix(body, "cannot reach "+c.host+":"+c.port)
				if status != "502 Bad Gateway" || !strings.Contains(body, c.want) {
					t.Errorf("%.40q: %s %q, want 502 saying %q", req, status, body, c.want)
				}
				if addrLike.MatchString(page) || strings.Contains(page, "lookup "+c.host) || strings.Contains(page, "dial") || strings.Contains(page, "udp") {
					t.Errorf("%.40q: the page shows the host's network: %q", req, body)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(logged) != 2 || !strings.HasPrefix(logged[0], "j0123456789ab "+c.host+":"+c.port+" ") {
				t.Fatalf("the operator was told %q", logged)
			}
			if c.host == "nope.test" && !strings.Contains(logged[0], "lookup nope.test") {
				t.Errorf("the operator's error is not the whole one: %q", logged[0])
			}
		})
	}
}

// The gateway logs what the proxy could not reach, with the full error, the person and
// the container, for the operator.
func TestGatewayLogsUnreachable(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	g := NewGateway(Options{Sandbox: newBox(), Container: "mcp-sandbox-alice", Logger: zap.New(core)})
	if err := g.Configure(Settings{Person: "alice", CA: gatewayCA(t)}); err != nil {
		t.Fatal(err)
	}
	_, err := loopbackResolver(dnsServer(t, 3), 5*time.Second)(context.Background(), "nope.test")
	if err == nil {
		t.Fatal("nope.test resolved")
	}
	g.proxy.Failed("j0123456789ab", "nope.test", 443, fmt.Errorf("resolving nope.test: %w", err))
	entries := logs.FilterMessage("egress could not reach a host").All()
	if len(entries) != 1 {
		t.Fatalf("log %+v", logs.All())
	}
	m := entries[0].ContextMap()
	if m["person"] != "alice" || m["host"] != "nope.test" || m["port"] != int64(443) || m["container"] != "mcp-sandbox-alice" ||
		m["job"] != "j0123456789ab" || !strings.Contains(fmt.Sprint(m["error"]), "lookup nope.test on ") {
		t.Fatalf("log fields %+v", m)
	}
}
