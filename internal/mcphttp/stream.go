package mcphttp

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"time"
)

// StreamWriter adapts Caddy's response writer to mcp-go's transport writer and keeps
// long responses alive.
//
// Caddy's response writers do not implement http.Flusher, so mcp-go, left to itself,
// would answer every call as one buffered JSON body and drop progress notifications;
// Flush here goes through http.ResponseController, which reaches the connection
// through Unwrap, also behind `encode`.
//
// A tool call's response sends no bytes until its first notification, so a proxy or
// client with an idle timeout would cut a long command. When the response has been
// silent for the keep-alive interval, the writer turns it into an event stream itself
// and writes an SSE comment, and repeats that while the handler runs. If mcp-go then
// answers with plain JSON, the body is sent as one SSE message event instead.
type StreamWriter struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	keepalive time.Duration
	// header is the handler's header map, copied to the wire's when the handler writes
	// the header: the keep-alive goroutine may send the wire's header meanwhile, and
	// the two must never touch one map at once.
	header http.Header

	mu          sync.Mutex
	wroteHeader bool
	code        int  // the status sent
	sse         bool // the wire carries an event stream
	ourUpgrade  bool // this writer, not mcp-go, started the event stream
	wrapBody    bool // mcp-go wrote a non-SSE body after our upgrade
	pending     bytes.Buffer
	lastWrite   time.Time
	done        chan struct{}
	stopped     chan struct{}
}

// NewStreamWriter wraps w; keepalive is the longest the response may stay silent once
// [StreamWriter.StartKeepalive] runs.
func NewStreamWriter(w http.ResponseWriter, keepalive time.Duration) *StreamWriter {
	return &StreamWriter{w: w, rc: http.NewResponseController(w), keepalive: keepalive, lastWrite: time.Now(), header: http.Header{}}
}

// Header is the handler's own header map; only the handler's goroutine uses it.
func (s *StreamWriter) Header() http.Header { return s.header }

// CanStream reports true: every write can be flushed to the client at once.
func (s *StreamWriter) CanStream() bool { return true }

// WriteHeader sends the handler's header and status, unless the keep-alive has sent
// the wire's already.
func (s *StreamWriter) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeHeaderLocked(code)
}

func (s *StreamWriter) writeHeaderLocked(code int) {
	ct := s.header.Get("Content-Type")
	if s.wroteHeader {
		if s.ourUpgrade && !strings.HasPrefix(ct, "text/event-stream") {
			s.wrapBody = true
		}
		return
	}
	s.wroteHeader, s.code = true, code
	s.sse = strings.HasPrefix(ct, "text/event-stream")
	wire := s.w.Header()
	for k, v := range s.header {
		wire[k] = v
	}
	s.w.WriteHeader(code)
}

// Write sends p at once, or holds it back to send as one SSE event when the keep-alive
// turned a plain JSON answer into an event stream.
func (s *StreamWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.wroteHeader {
		s.writeHeaderLocked(http.StatusOK)
	}
	if s.wrapBody {
		return s.pending.Write(p)
	}
	s.lastWrite = time.Now()
	return s.w.Write(p)
}

// Status is the status code sent, 0 while none is.
func (s *StreamWriter) Status() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code
}

// Flush sends what has been written to the client.
func (s *StreamWriter) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.rc.Flush()
}

// StartKeepalive writes keep-alive comments until [StreamWriter.Finish] is called.
func (s *StreamWriter) StartKeepalive() {
	s.done = make(chan struct{})
	s.stopped = make(chan struct{})
	go func() {
		defer close(s.stopped)
		t := time.NewTicker(s.keepalive / 4)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				if !s.ping() {
					return
				}
			}
		}
	}()
}

// ping writes a comment if the stream has been silent for the keep-alive interval. It
// returns false once no more pings can be useful (a plain JSON answer is under way).
func (s *StreamWriter) ping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.lastWrite) < s.keepalive {
		return true
	}
	if !s.wroteHeader {
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
		s.wroteHeader, s.code, s.sse, s.ourUpgrade = true, http.StatusOK, true, true
	}
	if !s.sse || s.wrapBody {
		return false
	}
	s.lastWrite = time.Now()
	if _, err := s.w.Write([]byte(": keep-alive\n\n")); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

// Finish stops the keep-alive and sends a body held back after our upgrade as one SSE
// message event (a JSON-RPC message is one line: the encoder escapes newlines).
func (s *StreamWriter) Finish() {
	if s.done != nil {
		close(s.done)
		<-s.stopped
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wrapBody && s.pending.Len() > 0 {
		msg := bytes.TrimSpace(s.pending.Bytes())
		_, _ = s.w.Write([]byte("event: message\ndata: "))
		_, _ = s.w.Write(bytes.ReplaceAll(msg, []byte("\n"), []byte("\ndata: ")))
		_, _ = s.w.Write([]byte("\n\n"))
		_ = s.rc.Flush()
	}
}
