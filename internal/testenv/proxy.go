package testenv

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// CountingProxy listens on 127.0.0.1 and forwards every connection to target
// (host:port), keeping half-closes (a Docker exec's input ends that way). count says
// how many connections it has accepted so far. The proxy and every connection through
// it are closed when the test ends.
func CountingProxy(tb testing.TB, target string) (addr string, count func() int) {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("counting proxy: %v", err)
	}
	var (
		n     atomic.Int64
		mu    sync.Mutex
		open  = map[net.Conn]bool{}
		wg    sync.WaitGroup
		ended bool
	)
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			c.Close()
			return false
		}
		open[c] = true
		return true
	}
	untrack := func(c net.Conn) { mu.Lock(); delete(open, c); mu.Unlock(); c.Close() }
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			if !track(in) {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer untrack(in)
				out, err := net.Dial("tcp", target)
				if err != nil || !track(out) {
					return
				}
				defer untrack(out)
				done := make(chan struct{})
				go func() { pipe(out, in); close(done) }()
				pipe(in, out)
				<-done
			}()
		}
	}()
	tb.Cleanup(func() {
		l.Close()
		mu.Lock()
		ended = true
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String(), func() int { return int(n.Load()) }
}

// pipe copies from src to dst until src ends, then half-closes dst.
func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if tc, ok := dst.(*net.TCPConn); ok && (err == nil || errors.Is(err, io.EOF)) {
		_ = tc.CloseWrite()
		return
	}
	// src failed: end both directions.
	dst.Close()
	src.Close()
}
