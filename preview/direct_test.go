package preview

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// directFixture is a loopback HTTP server and a directTransport whose relays are plain
// connections to it, counting the dials.
type directFixture struct {
	srv   *httptest.Server
	tr    *directTransport
	dials atomic.Int32
	conns atomic.Int32 // connections the server saw
}

func newDirectFixture(t *testing.T, max int, h http.HandlerFunc) *directFixture {
	f := &directFixture{}
	f.srv = httptest.NewUnstartedServer(h)
	f.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	f.tr = newDirectTransport(func(ctx context.Context, addr string) (net.Conn, error) {
		f.dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", f.srv.Listener.Addr().String())
	}, max, time.Minute)
	t.Cleanup(f.tr.CloseIdleConnections)
	return f
}

func (f *directFixture) get(t *testing.T, method, path string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://127.0.0.1:8000"+path, nil)
	req.Body = nil
	if !f.tr.eligible(req) {
		t.Fatalf("%s %s not eligible", method, path)
	}
	resp, err := f.tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s body: %v", method, path, err)
	}
	return resp, string(b)
}

func TestDirectTransportReusesRelays(t *testing.T) {
	f := newDirectFixture(t, 4, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			w.Write([]byte("part one, "))
			w.(http.Flusher).Flush()
			w.Write([]byte("part two"))
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/hints":
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			fmt.Fprint(w, "after hints")
		default:
			fmt.Fprintf(w, "hello %s %s", r.Method, r.Host)
		}
	})
	for i := 0; i < 20; i++ {
		path := []string{"/a", "/chunked", "/empty", "/hints"}[i%4]
		resp, body := f.get(t, http.MethodGet, path)
		want := map[string]string{"/a": "hello GET 127.0.0.1:8000", "/chunked": "part one, part two", "/empty": "", "/hints": "after hints"}[path]
		if body != want || resp.StatusCode/100 != 2 {
			t.Fatalf("%s: %d %q, want %q", path, resp.StatusCode, body, want)
		}
	}
	if resp, body := f.get(t, http.MethodHead, "/a"); resp.StatusCode != 200 || body != "" {
		t.Errorf("HEAD: %d %q", resp.StatusCode, body)
	}
	if n := f.dials.Load(); n != 1 {
		t.Errorf("%d relays for 21 requests one after another, want 1", n)
	}
}

func TestDirectTransportRetriesAClosedIdleRelay(t *testing.T) {
	f := newDirectFixture(t, 4, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	f.get(t, http.MethodGet, "/")
	// The app restarts: every connection it had is gone, the pooled relay too.
	f.srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	if _, body := f.get(t, http.MethodGet, "/"); body != "ok" {
		t.Errorf("after the app closed the relay: %q", body)
	}
	if n := f.dials.Load(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}

func TestDirectTransportClosesUnfinishedRelays(t *testing.T) {
	f := newDirectFixture(t, 4, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		fmt.Fprint(w, strings.Repeat("x", 100000))
	})
	// A body closed before its end leaves the relay in the middle of a response: it
	// cannot carry another request.
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:8000/", nil)
	resp, err := f.tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 10))
	resp.Body.Close()
	f.get(t, http.MethodGet, "/close") // read to its end, but the app closes
	f.get(t, http.MethodGet, "/")
	if n := f.dials.Load(); n != 3 {
		t.Errorf("%d dials, want 3 (none of the first two relays reusable)", n)
	}
	f.tr.mu.Lock()
	idle, count := len(f.tr.idle["127.0.0.1:8000"]), f.tr.count["127.0.0.1:8000"]
	f.tr.mu.Unlock()
	if idle != 1 || count != 1 {
		t.Errorf("%d idle of %d counted relays, want 1 of 1", idle, count)
	}
}

func TestDirectTransportLimitAndCancel(t *testing.T) {
	release := make(chan struct{})
	f := newDirectFixture(t, 2, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	// Two slow responses hold both relays; a third request is turned away, so the
	// caller uses its other transport.
	var bodies []io.ReadCloser
	ctx, cancel := context.WithCancel(context.Background())
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:8000/", nil)
		resp, err := f.tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, resp.Body)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:8000/", nil)
	if _, err := f.tr.RoundTrip(req); !errors.Is(err, errDirectFull) {
		t.Fatalf("third request: %v, want errDirectFull", err)
	}
	// Giving up a request ends a body that is waiting for bytes.
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(bodies[0])
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the body of a cancelled request ended cleanly")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled request's body kept waiting")
	}
	bodies[1].Close()
	f.tr.mu.Lock()
	count := f.tr.count["127.0.0.1:8000"]
	f.tr.mu.Unlock()
	if count != 0 {
		t.Errorf("%d relays still counted after both ended early", count)
	}
}

func TestDirectTransportEligible(t *testing.T) {
	tr := newDirectTransport(nil, 1, time.Minute)
	for _, tc := range []struct {
		method string
		body   io.Reader
		header string
		want   bool
	}{
		{http.MethodGet, nil, "", true},
		{http.MethodHead, nil, "", true},
		{http.MethodPost, strings.NewReader("x"), "", false},
		{http.MethodGet, strings.NewReader("x"), "", false},
		{http.MethodGet, nil, "websocket", false},
		{http.MethodOptions, nil, "", false},
	} {
		req, _ := http.NewRequest(tc.method, "http://127.0.0.1:8000/", tc.body)
		if tc.header != "" {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", tc.header)
		}
		if got := tr.eligible(req); got != tc.want {
			t.Errorf("%s body=%v upgrade=%q: eligible %v, want %v", tc.method, tc.body != nil, tc.header, got, tc.want)
		}
	}
}
