package main

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// listenIn listens on a Unix socket in a new directory.
func listenIn(t *testing.T) (*net.UnixListener, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, p
}

// openChannel asks s for a channel to a new socket and returns the session served
// there, its hello checked for the token, and the socket's path.
func openChannel(t *testing.T, s *agentwire.Session) (*agentwire.Session, string) {
	t.Helper()
	ln, p := listenIn(t)
	if r := run(t, s, agentwire.ChannelRequest{Path: p, Token: "tok"}, ""); !r.ok || r.code != 0 {
		t.Fatalf("channel: %+v", r)
	}
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	d, err := agentwire.Client(conn, conn, conn, agentwire.HelloMsg{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if d.Peer().Token != "tok" {
		t.Fatalf("hello: %+v", d.Peer())
	}
	return d, p
}

// The socket the agent is given is dialed and a second session served there (by the
// agent's job runner), saying the token it was given.
func TestChannel(t *testing.T) {
	s := agent(t)
	d, p := openChannel(t, s)
	if r := run(t, d, agentwire.ExecRequest{Argv: []string{"sh", "-c", "echo second"}}, ""); r.stdout != "second\n" {
		t.Fatalf("on the second session: %+v", r)
	}
	b, _ := agentwire.Encode(agentwire.ChannelRequest{Path: p + "-missing"})
	st, _ := s.Open(b)
	if _, err := st.ReadChunk(); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("a channel to no socket: %v, want a reset saying why", err)
	}
}

// bulkWrite starts a write whose bytes come on a socket, and returns its stream and
// the agent's connection, the token read.
func bulkWrite(t *testing.T, s *agentwire.Session, path string, max int64) (*agentwire.Stream, *net.UnixConn) {
	t.Helper()
	ln, p := listenIn(t)
	b, _ := agentwire.Encode(agentwire.WriteRequest{Path: path, Excl: true, Max: max, Socket: p, Token: "tok"})
	st, err := s.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	ln.SetDeadline(time.Now().Add(5 * time.Second))
	conn, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	tok := make([]byte, 3)
	if _, err := io.ReadFull(conn, tok); err != nil || string(tok) != "tok" {
		t.Fatalf("token %q: %v", tok, err)
	}
	return st, conn
}

func bulkReply(t *testing.T, st *agentwire.Stream) agentwire.FileReply {
	t.Helper()
	var raw []byte
	for {
		c, err := st.ReadChunk()
		if err != nil {
			break
		}
		if c.Ch == agentwire.Stderr {
			raw = append(raw, c.Data...)
		}
	}
	var rep agentwire.FileReply
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("reply %q: %v", raw, err)
	}
	return rep
}

// A write's bytes on a socket: committed by channel 0's end; abandoned when the stream
// ends first, or past its limit, with nothing left behind.
func TestBulkWrite(t *testing.T) {
	s := agent(t)
	dir := t.TempDir()
	data := strings.Repeat("0123456789", 500000)

	p := filepath.Join(dir, "committed")
	st, conn := bulkWrite(t, s, p, 0)
	io.WriteString(conn, data)
	conn.CloseWrite()
	st.CloseChannel(agentwire.Stdin)
	if rep := bulkReply(t, st); rep.Err != "" || rep.Size != int64(len(data)) || !rep.Created {
		t.Fatalf("reply: %+v", rep)
	}
	if got, _ := os.ReadFile(p); string(got) != data {
		t.Fatalf("file holds %d bytes of %d", len(got), len(data))
	}

	p = filepath.Join(dir, "abandoned")
	st, conn = bulkWrite(t, s, p, 0)
	io.WriteString(conn, data[:1000])
	st.Close()
	conn.Close()
	waitGone(t, p)

	p = filepath.Join(dir, "too large")
	st, conn = bulkWrite(t, s, p, 100)
	go func(conn *net.UnixConn) { io.WriteString(conn, data); conn.CloseWrite() }(conn)
	if rep := bulkReply(t, st); rep.Err != agentwire.FileTooLarge {
		t.Fatalf("reply: %+v", rep)
	}
	waitGone(t, p)

	// The connection ends early (Caddy lost its client) and no commit comes: the
	// stream's end removes the file.
	p = filepath.Join(dir, "cut")
	st, conn = bulkWrite(t, s, p, 0)
	io.WriteString(conn, data[:1000])
	conn.Close()
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the file went before the stream ended: %v", err)
	}
	st.Close()
	waitGone(t, p)
}

func waitGone(t *testing.T, p string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(p); os.IsNotExist(err) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s is still there", p)
}

// The job runner serves the channel the agent is asked for: its hello is the runner's,
// the requests start from the agent's environment, a job there ignores SIGHUP as under
// jobs.sh while a program an exec starts has SIGHUP's default action, as under the
// agent; and the channel ends when the agent is gone (the runner's stdin ends).
func TestChannelServedByTheRunner(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	s := agent(t)
	dir := t.TempDir()
	jobs := filepath.Join(dir, "jobs")
	// A runner runs before the environment changes.
	if r := run(t, s, agentwire.JobRequest{JobsDir: jobs, ID: "j000000000001", TimeoutMS: 10000, WaitMS: -1,
		Cwd: dir, Head: 1000, Tail: 1000, Command: "true"}, ""); r.code != 0 {
		t.Fatalf("job: %+v", r)
	}
	t.Setenv("SANDBOX_AGENT_TEST_ENV", "the agent's")
	d, _ := openChannel(t, s)
	runner := d.Peer().PID
	if want, _, _ := strings.Cut(jobRunner.current(), ":"); strconv.Itoa(runner) != want {
		t.Fatalf("hello %+v, want the runner's pid %s", d.Peer(), want)
	}
	r := run(t, d, agentwire.JobRequest{JobsDir: jobs, ID: "j000000000002", TimeoutMS: 10000, WaitMS: -1,
		Cwd: dir, Head: 1000, Tail: 1000, Command: `echo "$SANDBOX_AGENT_TEST_ENV $PPID"; kill -HUP $$; echo ignored`}, "")
	if want := "the agent's " + strconv.Itoa(runner) + "\nignored\n"; !strings.HasSuffix(r.stdout, want) {
		t.Fatalf("job on the runner's channel: %+v, want its output to end %q", r, want)
	}
	r = run(t, d, agentwire.ExecRequest{Argv: []string{"sh", "-c", `echo "$SANDBOX_AGENT_TEST_ENV"; kill -HUP $$; echo ignored`}}, "")
	if r.stdout != "the agent's\n" || r.code != 128+int(syscall.SIGHUP) {
		t.Fatalf("exec on the runner's channel: %+v, want the agent's environment and SIGHUP's end", r)
	}
	// The agent is gone: the runner's stdin ends.
	jobRunner.mu.Lock()
	jobRunner.stdin.Close()
	jobRunner.mu.Unlock()
	select {
	case <-d.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the runner's channel outlived its agent")
	}
}

// A runner killed just before a channel is asked for (its end not yet seen by the
// agent) is replaced: the channel is served by a new runner, not by the agent.
func TestChannelAfterTheRunnerDied(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	s := agent(t)
	for i := range 5 {
		d, _ := openChannel(t, s)
		old := d.Peer().PID
		if old == os.Getpid() {
			t.Fatalf("round %d: the agent serves the channel itself", i)
		}
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		d2, _ := openChannel(t, s)
		if p := d2.Peer().PID; p == old || p == os.Getpid() {
			t.Fatalf("round %d: after runner %d was killed the channel is served by %d (the agent is %d)", i, old, p, os.Getpid())
		}
		if r := run(t, d2, agentwire.ExecRequest{Argv: []string{"sh", "-c", "echo served"}}, ""); r.stdout != "served\n" {
			t.Fatalf("round %d: %+v", i, r)
		}
	}
}
