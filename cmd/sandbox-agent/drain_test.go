package main

import (
	"bytes"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chunks records what relayOutput sends.
type chunks struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *chunks) Write(_ byte, p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

// TestOutputBeforeExitKept: what a program wrote before it exited reaches Caddy even
// when the read deadline set at its exit fires before the runtime's poller has seen the
// bytes (a busy agent: the deadline's timer and the poller are not ordered). The test
// makes that order: bytes in the pipe, then a deadline already past.
func TestOutputBeforeExitKept(t *testing.T) {
	for i := range 20 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		var got chunks
		var exited atomic.Bool
		done := make(chan struct{})
		go func() {
			relayOutput(&got, 1, r, &exited)
			close(done)
		}()
		time.Sleep(20 * time.Millisecond) // the relay waits in its read
		if _, err := w.Write([]byte("name.txt\x00")); err != nil {
			t.Fatal(err)
		}
		exited.Store(true)
		_ = r.SetReadDeadline(time.Now().Add(-time.Second))
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the relay did not end")
		}
		w.Close()
		r.Close()
		if s := got.buf.String(); s != "name.txt\x00" {
			t.Fatalf("round %d: relayed %q, want the program's last words", i, s)
		}
	}
}
