package mcphttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// These run without Docker or Caddy: the keep-alive writer over a plain net/http
// server.

// serveStream answers one request through a StreamWriter whose handler is slow.
func serveStream(t *testing.T, handler func(w http.ResponseWriter)) (http.Header, string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := NewStreamWriter(w, time.Second)
		sw.StartKeepalive()
		defer sw.Finish()
		handler(sw)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header, string(body)
}

// A slow plain-JSON answer is turned into an event stream with keep-alive comments,
// and the JSON arrives as one SSE message event. The handler sets its headers while
// the keep-alive goroutine writes the wire's (the race detector watches that).
func TestStreamWriterWrapsSlowJSON(t *testing.T) {
	hdr, body := serveStream(t, func(w http.ResponseWriter) {
		time.Sleep(1600 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Mcp-Session-Id", "abc")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"))
	})
	if ct := hdr.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q, want text/event-stream", ct)
	}
	if !strings.HasPrefix(body, ": keep-alive\n\n") {
		t.Errorf("body does not start with a keep-alive comment: %q", body)
	}
	if !strings.HasSuffix(body, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n") {
		t.Errorf("body does not end with the JSON as one message event: %q", body)
	}
}

// A fast answer passes through untouched, with the handler's headers.
func TestStreamWriterFastAnswer(t *testing.T) {
	hdr, body := serveStream(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Mcp-Session-Id", "abc")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	if hdr.Get("Content-Type") != "application/json" || hdr.Get("Mcp-Session-Id") != "abc" {
		t.Errorf("headers = %v", hdr)
	}
	if body != `{"ok":true}` {
		t.Errorf("body = %q", body)
	}
}

// An event stream that the handler starts itself keeps its own events, with keep-alive
// comments in the silences between them.
func TestStreamWriterHandlerEvents(t *testing.T) {
	hdr, body := serveStream(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("event: message\ndata: 1\n\n"))
		w.(http.Flusher).Flush()
		time.Sleep(1600 * time.Millisecond)
		_, _ = w.Write([]byte("event: message\ndata: 2\n\n"))
	})
	if hdr.Get("Content-Type") != "text/event-stream" {
		t.Errorf("Content-Type = %q", hdr.Get("Content-Type"))
	}
	want := "event: message\ndata: 1\n\n: keep-alive\n\nevent: message\ndata: 2\n\n"
	if body != want {
		t.Errorf("body = %q, want %q", body, want)
	}
}
