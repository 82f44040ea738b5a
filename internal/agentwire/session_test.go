package agentwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pair connects a client session to an agent session over two pipes; handler serves
// the agent's streams.
func pair(t *testing.T, handler func(*Stream)) (*Session, func()) {
	t.Helper()
	cr, aw := io.Pipe() // agent → client
	ar, cw := io.Pipe() // client → agent
	served := make(chan error, 1)
	go func() {
		served <- Serve(ar, aw, HelloMsg{PID: 7, Build: "test"}, handler)
		aw.Close()
	}()
	s, err := Client(cr, cw, closers{cr, cw}, HelloMsg{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Peer().PID != 7 || s.Peer().Build != "test" {
		t.Fatalf("peer greeting %+v", s.Peer())
	}
	return s, func() {
		cw.Close()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("agent side ended with %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("agent side did not end when its input closed")
		}
	}
}

type closers []io.Closer

func (c closers) Close() error {
	for _, x := range c {
		x.Close()
	}
	return nil
}

// echo answers each stream with its request on stdout, then what arrives on stdin,
// then Exit 3.
func echo(st *Stream) { echoReq(st, st.Request()) }

func echoReq(st *Stream, req []byte) {
	st.Write(Stdout, req)
	for {
		c, err := st.ReadChunk()
		if err != nil || c.EOF {
			break
		}
		st.Write(Stdout, c.Data)
	}
	st.Exit(3)
}

func readAll(t *testing.T, st *Stream) []byte {
	t.Helper()
	var b bytes.Buffer
	for {
		c, err := st.ReadChunk()
		if err == io.EOF {
			return b.Bytes()
		}
		if err != nil {
			t.Fatal(err)
		}
		b.Write(c.Data)
	}
}

func TestStreamRoundTrip(t *testing.T) {
	s, stop := pair(t, echo)
	defer stop()
	st, err := s.Open([]byte("hello "))
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 3*InitialWindow+5)
	go func() {
		st.Write(Stdin, big)
		st.CloseChannel(Stdin)
	}()
	got := readAll(t, st)
	if want := append([]byte("hello "), big...); !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d", len(got), len(want))
	}
	if code, ok := st.Status(); !ok || code != 3 {
		t.Fatalf("status %d %v, want 3", code, ok)
	}
	if n := s.Streams(); n != 0 {
		t.Fatalf("%d streams left open", n)
	}
}

// A stream whose reader stalls holds at most its window and never delays another.
func TestStalledStreamDoesNotBlockOthers(t *testing.T) {
	flood := func(st *Stream) {
		req := st.Request()
		if string(req) == "flood" {
			for {
				if _, err := st.Write(Stdout, make([]byte, 32<<10)); err != nil {
					return
				}
			}
		}
		echoReq(st, req)
	}
	s, stop := pair(t, flood)
	defer stop()
	stalled, err := s.Open([]byte("flood"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	for i := 0; i < 20; i++ {
		st, err := s.Open([]byte("quick"))
		if err != nil {
			t.Fatal(err)
		}
		st.CloseChannel(Stdin)
		done := make(chan []byte)
		go func() { done <- readAll(t, st) }()
		select {
		case got := <-done:
			if string(got) != "quick" {
				t.Fatalf("got %q", got)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a stream waited behind a stalled one")
		}
	}
	stalled.mu.Lock()
	held := stalled.qBytes
	stalled.mu.Unlock()
	if held > InitialWindow {
		t.Fatalf("stalled stream holds %d bytes, more than its window", held)
	}
	stalled.Close()
}

// rawAgent is a hostile agent: it greets correctly, then writes raw bytes.
func rawAgent(t *testing.T, after []byte) (*Session, error) {
	cr, aw := io.Pipe()
	ar, cw := io.Pipe()
	go io.Copy(io.Discard, ar)
	go func() {
		var hello bytes.Buffer
		hello.Write(appendFrame(nil, Hello, 0, []byte(`{"version":2}`)))
		hello.Write(after)
		aw.Write(hello.Bytes())
	}()
	t.Cleanup(func() { cw.Close(); aw.Close() })
	return Client(cr, cw, closers{cr, cw}, HelloMsg{}, nil)
}

func TestHostileFramesEndTheSession(t *testing.T) {
	huge := binary.BigEndian.AppendUint32(nil, 1<<30)
	huge = append(huge, Data, 0, 0, 0, 1)
	overWindow := []byte{}
	for i := 0; i < InitialWindow/(32<<10)+1; i++ {
		overWindow = appendFrame(overWindow, Data, 1, []byte{Stdout}, make([]byte, 32<<10))
	}
	cases := map[string][]byte{
		"a frame declaring 1 GB":  huge,
		"unknown type":            appendFrame(nil, 99, 1, nil),
		"data on unopened stream": appendFrame(nil, Data, 41, []byte{Stdout, 'x'}),
		"data beyond the window":  overWindow,
		"signal sent to Caddy":    appendFrame(nil, Signal, 1, []byte{9}),
		"channel 7":               appendFrame(nil, Data, 1, []byte{7, 'x'}),
		"second greeting":         appendFrame(nil, Hello, 0, []byte(`{"version":2}`)),
		"window overflow":         appendFrame(nil, Window, 1, binary.BigEndian.AppendUint32(nil, 1<<31)),
		"exit of the wrong size":  appendFrame(nil, Exit, 1, []byte{1}),
		"stream opened by parity": appendFrame(nil, Open, 3, []byte("x")),
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := rawAgent(t, raw)
			if err != nil {
				t.Fatal(err)
			}
			st, _ := s.Open([]byte("x")) // may fail: the session can end first
			select {
			case <-s.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the session survived a bad frame")
			}
			if !errors.Is(s.Err(), ErrProtocol) {
				t.Fatalf("session error %v, want a protocol error", s.Err())
			}
			if st != nil {
				if _, err := st.ReadChunk(); err != nil && !errors.Is(err, ErrProtocol) {
					t.Fatalf("stream error %v", err)
				}
			}
		})
	}
}

func TestVersionMismatch(t *testing.T) {
	cr, aw := io.Pipe()
	ar, cw := io.Pipe()
	go io.Copy(io.Discard, ar)
	go aw.Write(appendFrame(nil, Hello, 0, []byte(`{"version":1}`)))
	defer cw.Close()
	if _, err := Client(cr, cw, closers{cr, cw}, HelloMsg{}, nil); !errors.Is(err, ErrVersion) {
		t.Fatalf("got %v, want ErrVersion", err)
	}
}

func TestSessionEndFailsStreams(t *testing.T) {
	var mu sync.Mutex
	block := make(chan struct{})
	s, stop := pair(t, func(st *Stream) { mu.Lock(); mu.Unlock(); <-block }) //nolint:staticcheck // SA2001: waits until the test releases the lock
	st, _ := s.Open([]byte("x"))
	s.Close()
	if _, err := st.ReadChunk(); !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v", err)
	}
	close(block)
	stop()
}

func FuzzClientFrames(f *testing.F) {
	f.Add(appendFrame(nil, Data, 1, []byte{Stdout, 'a'}))
	f.Add(appendFrame(appendFrame(nil, Exit, 1, []byte{0, 0, 0, 1}), Ping, 0, make([]byte, 8)))
	f.Add(appendFrame(nil, Reset, 1, []byte("\x1b[31mboom\n")))
	f.Add(appendFrame(appendFrame(appendFrame(nil, Data, 1, []byte{Stdout, 'a'}), Data, 1, []byte{Stderr, 'b'}), Data, 1, []byte{Stdout, 'c'}))
	f.Add(appendFrame(appendFrame(nil, Data, 1, []byte{Stdout, 'a'}), EOF, 1, []byte{Stdout}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		s := newSession(false, bytes.NewReader(raw), io.Discard, nil, nil)
		st := s.newStream(1, nil)
		s.streams[1] = st
		s.next = 3
		s.readLoop()
		if s.Err() == nil {
			t.Fatal("read loop ended without an error")
		}
		for {
			c, err := st.ReadChunk()
			if err != nil {
				break
			}
			if len(c.Data) > InitialWindow {
				t.Fatalf("chunk of %d bytes, more than the window", len(c.Data))
			}
		}
		st.Close()
		if h := s.held.Load(); h != 0 {
			t.Fatalf("%d bytes still counted held once the stream is read and closed", h)
		}
	})
}

// Streams opened at once from many goroutines reach the peer in order.
func TestConcurrentOpens(t *testing.T) {
	s, stop := pair(t, echo)
	defer stop()
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := s.Open([]byte("x"))
			if err != nil {
				t.Error(err)
				return
			}
			st.CloseChannel(Stdin)
			readAll(t, st)
		}()
	}
	wg.Wait()
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
}

// A receiver that raises a stream's window lets the peer send that much without
// credit, and holds no more: a byte beyond it still ends the session.
func TestSetReceiveWindow(t *testing.T) {
	const win = 1 << 20
	sent := make(chan error, 1)
	s, end := pair(t, func(st *Stream) {
		_, err := st.Write(Stdout, make([]byte, win))
		sent <- err
		st.Exit(0)
	})
	defer end()
	st, err := s.Open([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	st.SetReceiveWindow(win)
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the sender waited for credit within the raised window")
	}
	n := 0
	for {
		c, err := st.ReadChunk()
		if err != nil {
			break
		}
		n += len(c.Data)
	}
	if n != win {
		t.Fatalf("read %d bytes, want %d", n, win)
	}
}

// The agent waits for a Caddy that stops reading for longer than a write's deadline:
// Caddy is trusted and applies backpressure on purpose. Before, the agent's write timed
// out, its session failed with the transport left open, and Caddy never heard of it.
func TestAgentWaitsForSlowCaddy(t *testing.T) {
	defer func(d time.Duration) { writeTimeout = d }(writeTimeout)
	writeTimeout = 50 * time.Millisecond
	caddy, agent := net.Pipe() // synchronous, with deadlines: a write waits for the read
	defer caddy.Close()
	const size = 100 << 10
	go Serve(agent, agent, HelloMsg{}, func(st *Stream) {
		st.Request()
		if _, err := st.Write(Stdout, make([]byte, size)); err == nil {
			st.Exit(0)
		}
	})
	caddy.SetDeadline(time.Now().Add(10 * time.Second))
	var hdr [headerSize]byte
	if _, err := caddy.Write(appendFrame(nil, Hello, 0, []byte(`{"version":2}`))); err != nil {
		t.Fatal(err)
	}
	if _, err := readFrame(caddy, &hdr, maxHello, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := caddy.Write(appendFrame(nil, Open, 1, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * writeTimeout) // Caddy reads nothing for a while
	n := 0
	for {
		f, err := readFrame(caddy, &hdr, MaxFromAgent, nil)
		if err != nil {
			t.Fatalf("after %d bytes: %v; the agent gave up on a slow Caddy", n, err)
		}
		if f.typ == Data {
			n += len(f.payload) - 1
		}
		if f.typ == Exit {
			break
		}
	}
	if n != size {
		t.Fatalf("got %d bytes, want %d", n, size)
	}
}

// failWriter passes writes to w until broken is set, then fails them.
type failWriter struct {
	w      io.WriteCloser
	broken atomic.Bool
}

func (f *failWriter) Write(p []byte) (int, error) {
	if f.broken.Load() {
		return 0, errors.New("broken")
	}
	return f.w.Write(p)
}

func (f *failWriter) Close() error { return f.w.Close() }

// An agent whose session fails on a write closes its transport: Serve returns and Caddy
// sees the session end, instead of both waiting on a session nobody serves.
func TestFailedServeClosesTransport(t *testing.T) {
	cr, aw := io.Pipe() // agent → client
	ar, cw := io.Pipe() // client → agent
	fw := &failWriter{w: aw}
	served := make(chan error, 1)
	go func() {
		served <- Serve(ar, fw, HelloMsg{}, func(st *Stream) {
			st.Request()
			st.Write(Stdout, []byte("x"))
		})
	}()
	s, err := Client(cr, cw, closers{cr, cw}, HelloMsg{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fw.broken.Store(true)
	if _, err := s.Open([]byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err == nil {
			t.Fatal("Serve returned nil after a failed write")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve still runs after its session failed")
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Caddy's side never saw the agent's session end")
	}
}

// A stream the peer opens after the session failed is not served: it would never end.
func TestNoAcceptAfterFail(t *testing.T) {
	served := false
	s := newSession(true, nil, io.Discard, nil, func(*Stream) { served = true })
	s.fail(ErrClosed)
	s.accept(frame{typ: Open, stream: 1, payload: []byte("x")})
	if served || s.Streams() != 0 {
		t.Fatalf("a stream was accepted after the session failed (served %v, %d open)", served, s.Streams())
	}
}
