package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	utilexec "k8s.io/client-go/util/exec"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// readAll reads a process's output to its end, by stream.
func readAll(t testing.TB, p boxapi.Process) (stdout, stderr string, err error) {
	t.Helper()
	var out [3]bytes.Buffer
	buf := make([]byte, 7) // small: pieces are read in several reads
	for {
		n, from, rerr := p.ReadOutput(buf)
		out[from].Write(buf[:n])
		if rerr != nil {
			if rerr == io.EOF {
				rerr = nil
			}
			return out[boxapi.Stdout].String(), out[boxapi.Stderr].String(), rerr
		}
	}
}

// TestProcessQueue: output comes out in order with its stream, the exit code after
// it; a reader that lags holds the writers at maxQueued; a deadline ends a read that
// waits; Close ends reads and frees waiting writers.
func TestProcessQueue(t *testing.T) {
	p := newProcess()
	p.writer(boxapi.Stdout).Write([]byte("hello "))
	p.writer(boxapi.Stderr).Write([]byte("oops"))
	p.writer(boxapi.Stdout).Write([]byte("world"))
	p.finish(utilexec.CodeExitError{Err: errors.New("exit 3"), Code: 3})
	out, errs, err := readAll(t, p)
	if out != "hello world" || errs != "oops" || err != nil {
		t.Fatalf("read %q %q %v", out, errs, err)
	}
	if code, ok := p.Wait(t.Context()); code != 3 || !ok {
		t.Fatalf("exit %d %v, want 3", code, ok)
	}

	// A lagging reader: the writer waits once maxQueued is held.
	p = newProcess()
	wrote := make(chan int, 1)
	go func() {
		n := 0
		for range 3 {
			p.writer(boxapi.Stdout).Write(make([]byte, maxQueued/2))
			n++
			wrote <- n
		}
	}()
	<-wrote
	<-wrote
	select {
	case <-wrote:
		t.Fatal("a third piece went in past maxQueued")
	case <-time.After(200 * time.Millisecond):
	}
	buf := make([]byte, maxQueued/2)
	if n, _, err := p.ReadOutput(buf); n != maxQueued/2 || err != nil {
		t.Fatalf("read %d %v", n, err)
	}
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer was not let on after a read")
	}

	// A deadline ends a waiting read; a later one is waited for.
	p = newProcess()
	p.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, _, err := p.ReadOutput(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	p.SetReadDeadline(time.Time{})
	go func() {
		time.Sleep(50 * time.Millisecond)
		p.writer(boxapi.Stderr).Write([]byte("late"))
	}()
	if n, from, err := p.ReadOutput(buf); string(buf[:n]) != "late" || from != boxapi.Stderr || err != nil {
		t.Fatalf("read %q %v %v", buf[:n], from, err)
	}

	// Close: a waiting read ends, a waiting writer is freed, the exit code is unknown.
	p = newProcess()
	p.writer(boxapi.Stdout).Write(make([]byte, maxQueued))
	freed := make(chan struct{})
	go func() {
		p.writer(boxapi.Stdout).Write([]byte("more"))
		close(freed)
	}()
	p.Close()
	select {
	case <-freed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close left a writer waiting")
	}
	if _, _, err := p.ReadOutput(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v", err)
	}
	p.finish(context.Canceled)
	if _, ok := p.Wait(t.Context()); ok {
		t.Fatal("a closed process's exit code is known")
	}

	// A broken stream is the reader's error, after the output that came.
	p = newProcess()
	p.writer(boxapi.Stdout).Write([]byte("part"))
	p.finish(errors.New("the stream broke"))
	if out, _, err := readAll(t, p); out != "part" || err == nil || !strings.Contains(err.Error(), "broke") {
		t.Fatalf("read %q %v", out, err)
	}
}

// TestStartProcess runs programs in a pod through StartProcess: output by stream, exit
// codes, stdin, a directory and environment, a terminal, and a program that cannot
// start (126, the runtime's words).
func TestStartProcess(t *testing.T) {
	c, pod := podForTests(t)
	ctx := t.Context()
	run := func(spec boxapi.ProcessSpec, stdin string) (string, string, int) {
		t.Helper()
		p, err := c.StartProcess(ctx, pod, spec)
		if err != nil {
			t.Fatalf("StartProcess %v: %v", spec.Argv, err)
		}
		defer p.Close()
		if spec.Stdin {
			go func() {
				_, _ = p.Write([]byte(stdin))
				_ = p.CloseWrite()
			}()
		}
		out, errs, err := readAll(t, p)
		if err != nil {
			t.Fatalf("%v: %v", spec.Argv, err)
		}
		code, ok := p.Wait(ctx)
		if !ok {
			t.Fatalf("%v: no exit code", spec.Argv)
		}
		return out, errs, code
	}
	all := func(argv ...string) boxapi.ProcessSpec {
		return boxapi.ProcessSpec{Argv: argv, Stdout: true, Stderr: true}
	}
	if out, errs, code := run(all("sh", "-c", "echo out; echo err >&2; exit 7"), ""); out != "out\n" || errs != "err\n" || code != 7 {
		t.Errorf("got %q %q %d", out, errs, code)
	}
	in := all("sh", "-c", "tr a-z A-Z")
	in.Stdin = true
	if out, _, code := run(in, "hello\n"); out != "HELLO\n" || code != 0 {
		t.Errorf("stdin: %q %d", out, code)
	}
	env := all("sh", "-c", `pwd; echo "$FOO"`)
	env.Dir, env.Env = "/tmp", []string{"FOO=bar"}
	if out, _, _ := run(env, ""); out != "/tmp\nbar\n" {
		t.Errorf("dir and env: %q", out)
	}
	tty := all("sh", "-c", "tty >/dev/null && echo term")
	tty.TTY = true
	if out, _, code := run(tty, ""); !strings.Contains(out, "term") || code != 0 {
		t.Errorf("tty: %q %d", out, code)
	}
	if out, _, code := run(all("/no/such/program"), ""); code != 126 && code != 127 {
		t.Errorf("a missing program: %q exit %d", out, code)
	}
	if _, err := c.StartProcess(ctx, pod, boxapi.ProcessSpec{Argv: []string{"true"}, User: "nobody"}); err == nil {
		t.Error("another user was accepted")
	}
	if _, err := c.StartProcess(ctx, "no-such-pod", all("true")); err == nil {
		t.Error("a missing pod was accepted")
	}
}

// newID is a random name's tail for the tests' pods.
func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
