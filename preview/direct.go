package preview

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// directTransport sends requests without a body over pooled relays, on the calling
// goroutine: it writes the request and reads the response itself. Go's http.Transport
// hands each request to a writer goroutine and each response over from a reader
// goroutine; on a relay whose round trip is well under a millisecond those hand-offs are
// a good part of what the proxy adds. Requests with a body, upgrades and anything else
// go through http.Transport, which can write and read at once.
type directTransport struct {
	dial     func(ctx context.Context, addr string) (net.Conn, error)
	max      int           // relays per address, idle and busy
	idleTime time.Duration // idle relays older than this are closed

	mu    sync.Mutex
	idle  map[string][]*directConn // most recently used last
	count map[string]int
}

// directConn is one relay of a directTransport.
type directConn struct {
	t    *directTransport
	addr string
	c    net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	used time.Time
}

func newDirectTransport(dial func(ctx context.Context, addr string) (net.Conn, error), max int, idleTime time.Duration) *directTransport {
	return &directTransport{dial: dial, max: max, idleTime: idleTime, idle: map[string][]*directConn{}, count: map[string]int{}}
}

// eligible reports whether r can go through the direct transport.
func (t *directTransport) eligible(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		(r.Body == nil || r.Body == http.NoBody) &&
		r.Header.Get("Upgrade") == "" && !strings.EqualFold(r.Header.Get("Connection"), "upgrade")
}

// directReadBuffer is the read buffer of a relay, for response heads and small
// bodies. It is smaller than the reverse proxy's 32 KiB copy buffer, so that once a
// head is read, a large body goes from the relay's own buffer into the copy buffer
// without a copy in between.
const directReadBuffer = 16 << 10

// errDirectFull means the address has its maximum of relays, all busy.
var errDirectFull = errors.New("all relays busy")

// get returns an idle relay to addr, or a new one; reused says which.
func (t *directTransport) get(ctx context.Context, addr string) (dc *directConn, reused bool, err error) {
	t.mu.Lock()
	for list := t.idle[addr]; len(list) > 0; list = t.idle[addr] {
		dc = list[len(list)-1]
		t.idle[addr] = list[:len(list)-1]
		if time.Since(dc.used) < t.idleTime {
			t.mu.Unlock()
			return dc, true, nil
		}
		t.count[addr]--
		go dc.c.Close()
	}
	if t.count[addr] >= t.max {
		t.mu.Unlock()
		return nil, false, errDirectFull
	}
	t.count[addr]++
	t.mu.Unlock()
	c, err := t.dial(ctx, addr)
	if err != nil {
		t.release(addr)
		return nil, false, err
	}
	return &directConn{t: t, addr: addr, c: c, br: bufio.NewReaderSize(c, directReadBuffer), bw: bufio.NewWriterSize(c, 16<<10)}, false, nil
}

// release forgets a relay that was closed.
func (t *directTransport) release(addr string) {
	t.mu.Lock()
	t.count[addr]--
	t.mu.Unlock()
}

// put keeps a relay for the next request.
func (t *directTransport) put(dc *directConn) {
	dc.used = time.Now()
	t.mu.Lock()
	t.idle[dc.addr] = append(t.idle[dc.addr], dc)
	t.mu.Unlock()
}

// CloseIdleConnections closes the relays that are not in use.
func (t *directTransport) CloseIdleConnections() {
	t.mu.Lock()
	var all []*directConn
	for addr, list := range t.idle {
		all = append(all, list...)
		t.count[addr] -= len(list)
		delete(t.idle, addr)
	}
	t.mu.Unlock()
	for _, dc := range all {
		dc.c.Close()
	}
}

// RoundTrip sends r (an eligible request) and reads the response head. A relay that
// was idle may have been closed by the app meanwhile: then the request is sent again
// once over a fresh relay (GET and HEAD are idempotent). errDirectFull means the caller
// should use another transport.
func (t *directTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	addr := r.URL.Host
	for attempt := 0; ; attempt++ {
		dc, reused, err := t.get(r.Context(), addr)
		if err != nil {
			return nil, err
		}
		resp, err := dc.roundTrip(r)
		if err == nil {
			return resp, nil
		}
		dc.close()
		if !reused || attempt > 0 || r.Context().Err() != nil {
			return nil, err
		}
	}
}

func (dc *directConn) close() {
	dc.c.Close()
	dc.t.release(dc.addr)
}

func (dc *directConn) roundTrip(r *http.Request) (*http.Response, error) {
	// The relay is closed when the request is given up, which ends a blocked write or
	// read; stop is called once the body is done with.
	stop := context.AfterFunc(r.Context(), func() { dc.c.Close() })
	if err := r.Write(dc.bw); err != nil {
		stop()
		return nil, fmt.Errorf("sending the request over the relay: %w", err)
	}
	if err := dc.bw.Flush(); err != nil {
		stop()
		return nil, fmt.Errorf("sending the request over the relay: %w", err)
	}
	for {
		resp, err := http.ReadResponse(dc.br, r)
		if err != nil {
			stop()
			return nil, fmt.Errorf("reading the response over the relay: %w", err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				stop()
				return nil, errors.New("the app switched protocols without being asked to")
			}
			continue // 100 Continue, 103 Early Hints: the final answer follows
		}
		b := &directBody{dc: dc, body: resp.Body, stop: stop, keep: !resp.Close && !r.Close}
		if resp.Body == http.NoBody {
			b.finish(true) // nothing to read: the relay is free again at once
		} else {
			resp.Body = b
		}
		return resp, nil
	}
}

// directBody hands the relay back once the body was read to its end, and closes it
// when the body is closed early.
type directBody struct {
	dc   *directConn
	body io.ReadCloser
	stop func() bool
	keep bool
	done bool
}

func (b *directBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	if err != nil {
		b.finish(err == io.EOF)
	}
	return n, err
}

func (b *directBody) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

// finish ends the body: the relay goes back to the pool when the whole body was read,
// the app keeps the connection open and the request was not given up meanwhile.
func (b *directBody) finish(complete bool) {
	b.done = true
	if complete && b.keep && b.stop() {
		b.dc.t.put(b.dc)
		return
	}
	b.stop()
	b.dc.close()
}
