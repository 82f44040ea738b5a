package kube

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

// logged collects what a LogFunc is given.
type logged struct {
	mu   sync.Mutex
	msgs []logEntry
}

type logEntry struct {
	msg  string
	err  error
	warn bool
}

func (l *logged) log(msg string, err error, warn bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, logEntry{msg, err, warn})
}

// find is the first entry whose message contains s.
func (l *logged) find(s string) (logEntry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.msgs {
		if strings.Contains(e.msg, s) {
			return e, true
		}
	}
	return logEntry{}, false
}

// waitFor waits up to 10 s for an entry containing s.
func (l *logged) waitFor(t *testing.T, s string) logEntry {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if e, ok := l.find(s); ok {
			return e
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Fatalf("no log message containing %q within 10 s; got %+v", s, l.msgs)
	return logEntry{}
}

// captureStderr points os.Stderr at a pipe until the returned function, which gives
// what was written (at most 64 KiB).
func captureStderr(t *testing.T) func() string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
		_, _ = io.Copy(io.Discard, r)
		got <- string(b)
	}()
	var once sync.Once
	var out string
	stop := func() string {
		once.Do(func() {
			os.Stderr = old
			w.Close()
			out = <-got
			r.Close()
		})
		return out
	}
	t.Cleanup(func() { stop() })
	return stop
}

// useLog makes a client whose Log is l's (as Caddy's wiring does) and forgets it when
// the test ends.
func useLog(t *testing.T, cfg Config, l *logged) *Client {
	t.Helper()
	cfg.Log = l.log
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logTo.Store(nil) })
	return c
}

// TestLogNotOnStderr: once an engine is made, what client-go logs (klog, its runtime's
// error handler, a panic it recovers) reaches Log, at the right level, and none of it
// reaches stderr; a recovered panic goes no further.
func TestLogNotOnStderr(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var l logged
	useLog(t, Config{Name: "log", Kubeconfig: kc}, &l)
	stderr := captureStderr(t)

	ctx := context.Background()
	utilruntime.HandleErrorWithContext(ctx, io.ErrClosedPipe, "Copying stdin failed")
	klog.FromContext(ctx).WithValues("id", 3).Error(errors.New("websocket: close sent"), "Websocket Ping failed")
	utilruntime.HandleErrorWithContext(ctx, errors.New("tls: bad certificate"), "Copying stdout failed")
	klog.Errorf("an old-style klog error %d", 7)
	klog.V(4).Info("chatter that is dropped")
	klog.FromContext(ctx).V(6).Info("more chatter")
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer utilruntime.HandleCrash()
		panic("client-go went wrong")
	}()
	<-done
	warningLog{}.HandleWarningHeaderWithContext(ctx, 299, "", "spec.foo is deprecated")

	if out := stderr(); out != "" {
		t.Errorf("stderr got %q, want nothing", out)
	}
	for _, want := range []struct {
		text string
		err  error
		warn bool
	}{
		{"Copying stdin failed", io.ErrClosedPipe, false},
		{"Websocket Ping failed id=3", nil, false},
		{"Copying stdout failed", nil, true},
		{"an old-style klog error 7", nil, true},
		{"Observed a panic", nil, true},
		{"the API server warns: spec.foo is deprecated", nil, true},
	} {
		e, ok := l.find(want.text)
		switch {
		case !ok:
			t.Errorf("Log did not get %q; got %+v", want.text, l.msgs)
		case e.warn != want.warn:
			t.Errorf("%q: warn %v, want %v", e.msg, e.warn, want.warn)
		case want.err != nil && !errors.Is(e.err, want.err):
			t.Errorf("%q: err %v, want %v", e.msg, e.err, want.err)
		}
	}
	if e, _ := l.find("Observed a panic"); !strings.Contains(e.msg, "client-go went wrong") {
		t.Errorf("the panic's message %q does not carry its value", e.msg)
	}
	if _, ok := l.find("chatter"); ok {
		t.Errorf("verbose messages reached Log: %+v", l.msgs)
	}
}

// TestLogLongBounded: a message (a panic's stack, a hostile value) is cut to
// maxLogText.
func TestLogLongBounded(t *testing.T) {
	var l logged
	f := LogFunc(l.log)
	logTo.Store(&f)
	t.Cleanup(func() { logTo.Store(nil) })
	klogSink{}.Error(nil, strings.Repeat("x", 1<<20))
	if len(l.msgs) != 1 || len(l.msgs[0].msg) > maxLogText+3 {
		t.Fatalf("got %d messages, the first %d bytes long; want one of at most %d", len(l.msgs), len(l.msgs[0].msg), maxLogText+3)
	}
}

// TestExecStreamEndLogged: an exec whose stdin is still open when the command ends
// makes client-go report "Copying stdin failed" (its copy of stdin is cut); that
// reaches Log as an expected end, not a warning, and nothing reaches stderr.
func TestExecStreamEndLogged(t *testing.T) {
	base := testClient(t)
	var l logged
	c := useLog(t, Config{Name: "log", Kubeconfig: os.Getenv("MCP_SANDBOX_KUBECONFIG"), Namespace: base.ns}, &l)
	pod := "kpolish-log-" + newID()[:8]
	testPod(t, c, pod)
	stderr := captureStderr(t)

	ctx := context.Background()
	proc, err := c.StartProcess(ctx, pod, boxapi.ProcessSpec{Stdin: true, Stdout: true, Stderr: true, Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	// The command ends with its stdin open; the stream is closed only afterwards, as
	// the sandbox package does.
	if _, _, err := readAll(t, proc); err != nil {
		t.Fatalf("reading the program's output: %v", err)
	}
	e := l.waitFor(t, "Copying stdin failed")
	if code, ok := proc.Wait(ctx); !ok || code != 0 {
		t.Fatalf("exit %d %v, want exit code 0", code, ok)
	}
	proc.Close()
	if e.warn || !errors.Is(e.err, io.ErrClosedPipe) {
		t.Errorf("%q: warn %v err %v; want an expected end (io.ErrClosedPipe, not a warning)", e.msg, e.warn, e.err)
	}
	if out := stderr(); out != "" {
		t.Errorf("stderr got %q, want nothing", out)
	}
}
