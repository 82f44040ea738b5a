package egress

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// watchedConn is a connection from the sandbox, or to an upstream, under the proxy's
// timeouts: a write that makes no progress for the write limit closes it (its peer
// does not read), and so does no byte moving either way for the idle limit in force.
// It keeps the time itself rather than trusting deadlines: a sandbox's stream may
// ignore write deadlines. Closing it closes what was tied to it too (a tunnel's other
// side), and tells the proxy that the connection's slot is free.
type watchedConn struct {
	net.Conn
	write time.Duration // 0: writes are not timed
	idle  atomic.Int64  // the idle limit in force, in nanoseconds; 0: none
	last  atomic.Int64  // when a byte last moved, Unix nanoseconds

	mu        sync.Mutex
	writes    int   // writes under way
	writeFrom int64 // when the writes under way last made progress
	timer     *time.Timer
	closed    bool
	tied      []io.Closer
	release   func()
}

// watch puts c under the limits; release, if set, is called once when it closes.
func watch(c net.Conn, write, idle time.Duration, release func()) *watchedConn {
	w := &watchedConn{Conn: c, write: write, release: release}
	w.idle.Store(int64(idle))
	w.last.Store(time.Now().UnixNano())
	w.mu.Lock()
	w.timer = time.AfterFunc(w.nextCheck(time.Now().UnixNano()), w.check)
	w.mu.Unlock()
	return w
}

// setIdle changes the idle limit (a request under way, a tunnel, a keep-alive wait),
// counting from now.
func (w *watchedConn) setIdle(d time.Duration) {
	w.last.Store(time.Now().UnixNano())
	w.idle.Store(int64(d))
	w.mu.Lock()
	if !w.closed {
		w.timer.Reset(w.nextCheck(time.Now().UnixNano()))
	}
	w.mu.Unlock()
}

// tie closes c with w.
func (w *watchedConn) tie(c io.Closer) {
	w.mu.Lock()
	closed := w.closed
	if !closed {
		w.tied = append(w.tied, c)
	}
	w.mu.Unlock()
	if closed {
		c.Close()
	}
}

func (w *watchedConn) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if n > 0 {
		w.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (w *watchedConn) Write(p []byte) (int, error) {
	now := time.Now().UnixNano()
	w.mu.Lock()
	if w.writes == 0 {
		w.writeFrom = now
	}
	w.writes++
	w.mu.Unlock()
	n, err := w.Conn.Write(p)
	now = time.Now().UnixNano()
	w.mu.Lock()
	w.writes--
	w.writeFrom = now
	w.mu.Unlock()
	if n > 0 {
		w.last.Store(now)
	}
	return n, err
}

// CloseWrite half-closes where the connection can, else closes it.
func (w *watchedConn) CloseWrite() error {
	if cw, ok := w.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return w.Close()
}

func (w *watchedConn) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.timer.Stop()
	tied := w.tied
	w.tied = nil
	w.mu.Unlock()
	err := w.Conn.Close()
	for _, c := range tied {
		c.Close()
	}
	if w.release != nil {
		w.release()
	}
	return err
}

// check closes the connection when a limit has passed, else looks again later.
func (w *watchedConn) check() {
	now := time.Now().UnixNano()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	stalled := w.writes > 0 && w.write > 0 && time.Duration(now-w.writeFrom) >= w.write
	idle := time.Duration(w.idle.Load())
	quiet := w.writes == 0 && idle > 0 && time.Duration(now-w.last.Load()) >= idle
	if !stalled && !quiet {
		w.timer.Reset(w.nextCheck(now))
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.Close()
}

// nextCheck is how long until a limit may pass: at the latest half a write limit
// on, since a write may begin at any time. Called with mu held.
func (w *watchedConn) nextCheck(now int64) time.Duration {
	next := time.Hour
	if w.write > 0 {
		next = w.write / 2
		if w.writes > 0 {
			next = min(next, w.write-time.Duration(now-w.writeFrom))
		}
	}
	if idle := time.Duration(w.idle.Load()); idle > 0 {
		next = min(next, idle-time.Duration(now-w.last.Load()))
	}
	return max(next, 10*time.Millisecond)
}
