package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// noWriteDeadline is a connection that ignores write deadlines, as a sandbox's
// stream may: the proxy must bound its writes on its own.
type noWriteDeadline struct{ net.Conn }

func (c noWriteDeadline) SetDeadline(t time.Time) error  { return c.SetReadDeadline(t) }
func (noWriteDeadline) SetWriteDeadline(time.Time) error { return nil }

// serveProxy serves px on a loopback listener, each connection without write
// deadlines; it returns the listener's address.
func serveProxy(t testing.TB, px *Proxy) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); px.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			px.ServeConn(noWriteDeadline{c})
		}
	}()
	return ln.Addr().String()
}

// endless answers every request with an endless body, and every raw TCP connection
// with endless bytes; each stops when its peer goes.
func endless(t testing.TB) (httpPort, tcpPort string, active *atomic.Int32) {
	active = new(atomic.Int32)
	chunk := []byte(strings.Repeat("x", 32<<10))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		active.Add(1)
		defer active.Add(-1)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				active.Add(1)
				defer active.Add(-1)
				defer c.Close()
				for {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	_, tcpPort, _ = net.SplitHostPort(ln.Addr().String())
	return portOf(t, srv.URL), tcpPort, active
}

// heldMemory is the live heap plus goroutine stacks after a collection, and the
// goroutines.
func heldMemory() (bytes uint64, goroutines int) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse, runtime.NumGoroutine()
}

// 200 connections from the sandbox that ask for endless answers and never read them
// (plain requests and CONNECT tunnels, over connections without write deadlines) are
// all served, then closed by the write limit: what they held (heap, goroutines and
// upstream connections) is given back.
func TestNeverReadingConnectionsAreBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 400 loopback connections and waits for the limits")
	}
	httpPort, tcpPort, upstreams := endless(t)
	pol := mustCompile(t, Rules{
		Allow: []string{"endless.test:" + httpPort, "endless.test:" + tcpPort},
		Hosts: map[string]string{"endless.test": "127.0.0.1"},
	})
	px := &Proxy{
		Policy:   func() *Policy { return pol },
		Resolve:  func(context.Context, string) ([]netip.Addr, error) { return nil, errors.New("tests resolve no names") },
		MaxConns: 1000, WriteTimeout: 15 * time.Second, IdleTimeout: 15 * time.Second, TunnelIdleTimeout: 15 * time.Second,
	}
	addr := serveProxy(t, px)
	baseMem, baseG := heldMemory()

	const n = 200
	var clients []net.Conn
	t.Cleanup(func() {
		for _, c := range clients {
			c.Close()
		}
	})
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).SetReadBuffer(16 << 10) // a reader that takes nothing
		clients = append(clients, c)
		req := "GET http://endless.test:" + httpPort + "/big HTTP/1.1\r\nHost: endless.test\r\n\r\n"
		if i%2 == 1 {
			req = "CONNECT endless.test:" + tcpPort + " HTTP/1.1\r\nHost: endless.test\r\n\r\n"
		}
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	// All are served, their upstreams sending.
	deadline := time.Now().Add(15 * time.Second)
	for px.Conns() < n || upstreams.Load() < n*9/10 {
		if time.Now().After(deadline) {
			t.Fatalf("served %d connections, %d upstreams sending; want %d", px.Conns(), upstreams.Load(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	peakMem, peakG := heldMemory()
	t.Logf("while stalled: %d connections, %d upstreams sending, +%.1f MB, +%d goroutines (the upstreams' included)",
		px.Conns(), upstreams.Load(), float64(peakMem-baseMem)/1e6, peakG-baseG)

	// The write limit closes every one of them.
	deadline = time.Now().Add(30 * time.Second)
	for px.Conns() > 0 || upstreams.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the limits: %d connections served, %d upstreams sending", px.Conns(), upstreams.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	mem, g := heldMemory()
	grew := int64(mem) - int64(baseMem)
	t.Logf("after the limits: 0 connections, %+.1f MB, %+d goroutines", float64(grew)/1e6, g-baseG)
	if grew > 20<<20 || g-baseG > 20 {
		t.Fatalf("200 stalled connections still hold %+d bytes and %+d goroutines", grew, g-baseG)
	}
}

// A connection that opens and says nothing, and a tunnel in which nothing moves, are
// closed by the idle limits.
func TestIdleConnectionsClose(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(silent.Addr().String())
	pol := mustCompile(t, Rules{Allow: []string{"silent.test:" + port}, Hosts: map[string]string{"silent.test": "127.0.0.1"}})
	px := &Proxy{Policy: func() *Policy { return pol }, IdleTimeout: 300 * time.Millisecond, TunnelIdleTimeout: 600 * time.Millisecond}
	addr := serveProxy(t, px)

	quiet, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	tunnel, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tunnel.Close()
	fmt.Fprintf(tunnel, "CONNECT silent.test:%s HTTP/1.1\r\nHost: silent.test\r\n\r\n", port)
	br := bufio.NewReader(tunnel)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", res, err)
	}
	begin := time.Now()
	for _, c := range []struct {
		name string
		r    io.Reader
		conn net.Conn
		min  time.Duration
	}{{"silent connection", quiet, quiet, 300 * time.Millisecond}, {"idle tunnel", br, tunnel, 600 * time.Millisecond}} {
		c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c.r); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if took := time.Since(begin); took < c.min-50*time.Millisecond {
			t.Fatalf("%s closed after %v, before its limit %v", c.name, took, c.min)
		}
	}
	// The proxy uncounts a connection once its handler returns, just after the close
	// the client saw.
	for end := time.Now().Add(5 * time.Second); px.Conns() != 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if px.Conns() != 0 {
		t.Fatalf("%d connections still counted", px.Conns())
	}
}

// Beyond MaxConns a connection is answered 503 with what to do, and a slot freed
// serves the next one.
func TestConnectionCap(t *testing.T) {
	up, _, _ := upstream(t)
	port := portOf(t, up.URL)
	pol := mustCompile(t, Rules{Allow: []string{"allowed.test:" + port}, Hosts: map[string]string{"allowed.test": "127.0.0.1"}})
	var turned atomic.Int32
	px := &Proxy{Policy: func() *Policy { return pol }, MaxConns: 3, TurnedAway: func() { turned.Add(1) }}
	addr := serveProxy(t, px)
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	for px.Conns() < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	get := func() (*http.Response, string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET http://allowed.test:%s/x HTTP/1.1\r\nHost: allowed.test\r\n\r\n", port)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	res, body := get()
	if res.StatusCode != 503 || !strings.Contains(body, "3 connections open") || !strings.Contains(body, "try again") {
		t.Fatalf("beyond the cap: %d %q", res.StatusCode, body)
	}
	if turned.Load() != 1 {
		t.Fatalf("TurnedAway was told %d times, want 1", turned.Load())
	}
	held[0].Close()
	for px.Conns() > 2 {
		time.Sleep(10 * time.Millisecond)
	}
	if res, body := get(); res.StatusCode != 200 {
		t.Fatalf("with a slot free: %d %q", res.StatusCode, body)
	}
}
