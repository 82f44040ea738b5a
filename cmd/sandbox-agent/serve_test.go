package main

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// agent runs serve in this process over pipes and returns Caddy's side.
func agent(t *testing.T) *agentwire.Session {
	t.Helper()
	cr, aw := io.Pipe()
	ar, cw := io.Pipe()
	go func() { serve(ar, aw); aw.Close() }()
	s, err := agentwire.Client(cr, cw, cw, agentwire.HelloMsg{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cw.Close() })
	return s
}

type result struct {
	stdout, stderr string
	code           int
	ok             bool
}

func run(t *testing.T, s *agentwire.Session, req agentwire.Request, input string) result {
	t.Helper()
	b, _ := agentwire.Encode(req)
	st, err := s.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	// Execs read channel 0 when they ask for it; writes always do.
	exec, isExec := req.(agentwire.ExecRequest)
	if _, isWrite := req.(agentwire.WriteRequest); isWrite || (isExec && exec.Stdin) {
		go func() {
			st.Write(agentwire.Stdin, []byte(input))
			st.CloseChannel(agentwire.Stdin)
		}()
	}
	var out [3]bytes.Buffer
	done := make(chan error, 1)
	go func() {
		for {
			c, err := st.ReadChunk()
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				done <- err
				return
			}
			out[c.Ch].Write(c.Data)
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not end")
	}
	code, ok := st.Status()
	return result{out[1].String(), out[2].String(), code, ok}
}

func TestExec(t *testing.T) {
	s := agent(t)
	r := run(t, s, agentwire.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; pwd; echo $FOO; exit 7"},
		Env: []string{"FOO=bar"}, Dir: "/tmp"}, "")
	if r.stdout != "out\n/tmp\nbar\n" || r.stderr != "err\n" || r.code != 7 || !r.ok {
		t.Fatalf("%+v", r)
	}
	r = run(t, s, agentwire.ExecRequest{Argv: []string{"cat"}, Stdin: true}, "fed through stdin")
	if r.stdout != "fed through stdin" || r.code != 0 {
		t.Fatalf("%+v", r)
	}
	r = run(t, s, agentwire.ExecRequest{Argv: []string{"no-such-program-here"}}, "")
	if r.code != agentwire.ExitNotFound || !strings.Contains(r.stderr, "no-such-program-here") {
		t.Fatalf("%+v", r)
	}
	r = run(t, s, agentwire.ExecRequest{Argv: []string{"sleep", "30"}, TimeoutMS: 200}, "")
	if r.code != 128+9 {
		t.Fatalf("timeout: %+v", r)
	}
	r = run(t, s, agentwire.ExecRequest{Argv: []string{"sh", "-c", "tty; [ -t 0 ] && echo interactive; echo $TERM"}, TTY: true}, "")
	if !strings.Contains(r.stdout, "/dev/pts/") || !strings.Contains(r.stdout, "interactive") || !strings.Contains(r.stdout, "dumb") {
		t.Fatalf("tty: %+v", r)
	}
}

func TestSignalAndLargeOutput(t *testing.T) {
	s := agent(t)
	b, _ := agentwire.Encode(agentwire.ExecRequest{Argv: []string{"sleep", "30"}})
	st, _ := s.Open(b)
	time.Sleep(100 * time.Millisecond)
	st.Signal(15)
	select {
	case <-st.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the signal did not end the program")
	}
	if code, _ := st.Status(); code != 128+15 {
		t.Fatalf("code %d", code)
	}
	r := run(t, s, agentwire.ExecRequest{Argv: []string{"head", "-c", "5000000", "/dev/zero"}}, "")
	if len(r.stdout) != 5000000 || r.code != 0 {
		t.Fatalf("got %d bytes, code %d", len(r.stdout), r.code)
	}
}

func TestBadRequests(t *testing.T) {
	s := agent(t)
	for _, req := range []string{`{`, `{"op":"format-disk"}`, `{"op":"exec"}`} {
		st, _ := s.Open([]byte(req))
		if _, err := st.ReadChunk(); err == nil || err == io.EOF {
			t.Fatalf("%s: got %v, want a reset", req, err)
		}
	}
}

// A stream Caddy closes still reports when its program ends.
func TestClosedStreamReportsTheEnd(t *testing.T) {
	s := agent(t)
	b, _ := agentwire.Encode(agentwire.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.3; exit 4"}})
	st, _ := s.Open(b)
	st.Close()
	if _, err := st.ReadChunk(); err != agentwire.ErrClosed {
		t.Fatalf("read after close: %v", err)
	}
	select {
	case <-st.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the program's end was not reported")
	}
	if code, ok := st.Status(); !ok || code != 4 {
		t.Fatalf("status %d %v", code, ok)
	}
	if n := s.Streams(); n != 0 {
		t.Fatalf("%d streams left", n)
	}
}

// A spare is started ahead of need and serves the next request of the same shape, its
// request arriving as the prefix of its stdin.
func TestSpare(t *testing.T) {
	s := agent(t)
	req := agentwire.ExecRequest{Argv: []string{"sh", "-c", `read -r x; echo "got $x pid $$"`}, Spare: true}
	pids := map[string]bool{}
	for i, word := range []string{"one", "two", "three"} {
		req.Prefix = []byte(word + "\n")
		r := run(t, s, req, "")
		if !strings.HasPrefix(r.stdout, "got "+word+" pid ") || r.code != 0 {
			t.Fatalf("%+v", r)
		}
		pids[strings.Fields(r.stdout)[3]] = true
		if i == 0 {
			deadline := time.Now().Add(5 * time.Second)
			for spares.take(req) == nil && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			spares.fill(req) // the one taken above is dropped; a new one is made
		}
	}
	if len(pids) != 3 {
		t.Fatalf("pids %v", pids)
	}
	ready := 0
	for deadline := time.Now().Add(5 * time.Second); ready == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		spares.mu.Lock()
		ready = len(spares.ready)
		spares.mu.Unlock()
	}
	if ready != 1 {
		t.Fatalf("%d spares ready, want 1", ready)
	}
}

// A dial reaches a loopback port; a refused one is reset with the reason.
func TestDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b, _ := io.ReadAll(c) // until the half-close
		c.Write(append([]byte("echo: "), b...))
		c.Close()
	}()
	s := agent(t)
	port := ln.Addr().(*net.TCPAddr).Port
	b, _ := agentwire.Encode(agentwire.DialRequest{Port: port})
	st, _ := s.Open(b)
	if c, err := st.ReadChunk(); err != nil || !c.EOF || c.Ch != agentwire.Connected {
		t.Fatalf("%+v %v", c, err)
	}
	st.Write(agentwire.Stdin, []byte("ping"))
	st.CloseChannel(agentwire.Stdin)
	var got bytes.Buffer
	for {
		c, err := st.ReadChunk()
		if err != nil {
			break
		}
		got.Write(c.Data)
	}
	if got.String() != "echo: ping" {
		t.Fatalf("got %q", got.String())
	}
	ln.Close()
	b, _ = agentwire.Encode(agentwire.DialRequest{Port: port})
	st, _ = s.Open(b)
	if _, err := st.ReadChunk(); err == nil || !strings.Contains(err.Error(), "nothing listens") {
		t.Fatalf("refused dial: %v", err)
	}
}

// Output still in the pipe when the program exits all arrives, however slowly Caddy
// reads it.
func TestSlowReaderGetsAllOutput(t *testing.T) {
	s := agent(t)
	b, _ := agentwire.Encode(agentwire.ExecRequest{Argv: []string{"head", "-c", "1000000", "/dev/zero"}})
	st, _ := s.Open(b)
	n := 0
	for {
		c, err := st.ReadChunk()
		if err != nil {
			break
		}
		n += len(c.Data)
		time.Sleep(20 * time.Millisecond) // a reader slower than the drain time per chunk
	}
	if n != 1000000 {
		t.Fatalf("got %d bytes, want 1000000", n)
	}
}
