package testenv

import (
	"io"
	"net"
	"testing"
	"time"
)

// replyServer answers each connection, once its input has ended, with "got " and
// that input, then closes it.
func replyServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				_, _ = c.Write(append([]byte("got "), b...))
			}()
		}
	}()
	return l.Addr().String()
}

func TestCountingProxy(t *testing.T) {
	addr, count := CountingProxy(t, replyServer(t))
	if count() != 0 {
		t.Fatalf("count before any connection: %d", count())
	}
	for i, msg := range []string{"a", "bb", "ccc"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte(msg))
		_ = c.(*net.TCPConn).CloseWrite() // the reply comes only after a half-close
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(b) != "got "+msg {
			t.Fatalf("reply %d: %q, %v", i, b, err)
		}
		if count() != i+1 {
			t.Fatalf("count after %d connections: %d", i+1, count())
		}
	}
}

func TestCountingProxyClosesAtTestEnd(t *testing.T) {
	target := replyServer(t)
	var c net.Conn
	t.Run("proxy", func(t *testing.T) {
		addr, count := CountingProxy(t, target)
		var err error
		if c, err = net.Dial("tcp", addr); err != nil {
			t.Fatal(err)
		}
		WaitFor(t, 10*time.Second, "the connection to be counted", func() bool { return count() == 1 })
	})
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a connection open at the test's end: read %v, want EOF", err)
	}
}

func TestCountingProxyTargetDown(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	down := l.Addr().String()
	l.Close()
	addr, count := CountingProxy(t, down)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("target down: read %v, want EOF", err)
	}
	if count() != 1 {
		t.Fatalf("count: %d", count())
	}
}
