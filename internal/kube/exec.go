// Commands in a pod: Docker's exec calls over the pods/exec subresource, as client-go's
// remotecommand speaks it (WebSocket, SPDY when the API server refuses the upgrade).

package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
)

// execContainer is the name of the container, in each pod, that commands run in.
const execContainer = "sandbox"

// maxExecs bounds the exec table: sessions that ended and were never inspected are
// dropped, oldest first, to make room; past it with none ended, ContainerExecCreate
// fails.
const maxExecs = 16384

// staleCreated is how long a session that was created but never attached is kept.
const staleCreated = 10 * time.Minute

// keepInspected is how long a session that ended is kept after its first inspect: as
// on Docker, an exec may be inspected again (the sandbox package does, after waiting
// for its end), and it is forgotten after that.
const keepInspected = time.Minute

// execTable holds the exec sessions ContainerExecCreate made, until they end and are
// inspected.
type execTable struct {
	mu    sync.Mutex
	m     map[string]*execSession
	swept time.Time // the last sweepLocked that looked at every session
}

// execSession is one exec: its pod and command until attached, then its stream's end.
type execSession struct {
	pod     string
	argv    []string
	opts    container.ExecOptions
	created time.Time

	// Set under the table's lock.
	attached  bool
	ended     time.Time // zero while the stream runs
	inspected time.Time // when it was first inspected after it ended; zero before

	done   chan struct{} // closed when the stream ended; code and err are set then
	code   int
	err    error
	closed bool // the caller closed the stream before it ended (under the table's lock)
}

func (t *execTable) add(id string, s *execSession) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[string]*execSession)
	}
	t.sweepLocked(time.Now())
	if len(t.m) >= maxExecs {
		t.evictLocked()
	}
	if len(t.m) >= maxExecs {
		return fmt.Errorf("%d exec sessions are running on this engine; wait for some to end (or close them) and try again", len(t.m))
	}
	t.m[id] = s
	return nil
}

// sweepLocked forgets the sessions inspected more than keepInspected ago; it looks
// at them all at most every few seconds.
func (t *execTable) sweepLocked(now time.Time) {
	if now.Sub(t.swept) < keepInspected/16 {
		return
	}
	t.swept = now
	for id, s := range t.m {
		if !s.inspected.IsZero() && now.Sub(s.inspected) > keepInspected {
			delete(t.m, id)
		}
	}
}

// evictLocked drops the sessions that were created long ago and never attached, and
// the ended ones, oldest first, down to three quarters of the bound.
func (t *execTable) evictLocked() {
	now := time.Now()
	var ended []string
	for id, s := range t.m {
		switch {
		case !s.attached && now.Sub(s.created) > staleCreated:
			delete(t.m, id)
		case !s.ended.IsZero():
			ended = append(ended, id)
		}
	}
	for len(t.m) > maxExecs*3/4 && len(ended) > 0 {
		oldest := 0
		for i, id := range ended {
			if t.m[id].ended.Before(t.m[ended[oldest]].ended) {
				oldest = i
			}
		}
		delete(t.m, ended[oldest])
		ended = append(ended[:oldest], ended[oldest+1:]...)
	}
}

// attach marks the session attached; it fails for an unknown or attached one.
func (t *execTable) attach(id string) (*execSession, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[id]
	if s == nil {
		return nil, noSuchExec(id)
	}
	if s.attached {
		return nil, fmt.Errorf("exec %s was already started: %w", id, cerrdefs.ErrConflict)
	}
	s.attached = true
	return s, nil
}

func noSuchExec(id string) error {
	return fmt.Errorf("no such exec %s (it ended and was inspected, or was never made here): %w", id, cerrdefs.ErrNotFound)
}

// ContainerExecCreate checks that the pod runs and records the command under a new
// ID; nothing runs until ContainerExecAttach. Env and WorkingDir are applied by a
// /bin/sh wrapper (the exec API has neither); User must be root's.
func (c *Client) ContainerExecCreate(ctx context.Context, name string, options container.ExecOptions) (container.ExecCreateResponse, error) {
	argv, err := execArgv(options)
	if err != nil {
		return container.ExecCreateResponse{}, fmt.Errorf("kubernetes engine %s: exec in %s: %w", c.cfg.Name, name, err)
	}
	if err := c.podRunning(ctx, name); err != nil {
		return container.ExecCreateResponse{}, err
	}
	id := newID()
	s := &execSession{pod: name, argv: argv, opts: options, created: time.Now(), done: make(chan struct{})}
	if err := c.execs.add(id, s); err != nil {
		return container.ExecCreateResponse{}, fmt.Errorf("kubernetes engine %s: %w", c.cfg.Name, err)
	}
	return container.ExecCreateResponse{ID: id}, nil
}

// ContainerExecAttach starts the exec and returns its stream as Docker would: reads give
// stdout and stderr multiplexed with stdcopy's headers (raw with Tty), writes go to the
// command's stdin, CloseWrite closes it and Close ends the stream. The stream outlives
// ctx.
func (c *Client) ContainerExecAttach(ctx context.Context, execID string, _ container.ExecAttachOptions) (types.HijackedResponse, error) {
	s, err := c.execs.attach(execID)
	if err != nil {
		return types.HijackedResponse{}, fmt.Errorf("kubernetes engine %s: %w", c.cfg.Name, err)
	}
	o := s.opts
	pe := &v1.PodExecOptions{Container: execContainer, Command: s.argv, Stdin: o.AttachStdin, Stdout: o.AttachStdout || o.Tty, Stderr: o.AttachStderr && !o.Tty, TTY: o.Tty}
	if !pe.Stdin && !pe.Stdout && !pe.Stderr {
		pe.Stdout, pe.Stderr = true, true // the API server wants one stream at least; output is discarded below
	}
	ex, err := c.executor(s.pod, pe)
	if err != nil {
		c.execs.finish(s, err)
		return types.HijackedResponse{}, err
	}
	outR, outW := net.Pipe()
	conn := &execConn{out: outR, table: &c.execs, s: s}
	so := remotecommand.StreamOptions{Tty: o.Tty}
	var inR net.Conn
	if pe.Stdin {
		inR, conn.in = net.Pipe()
		so.Stdin = inR
	}
	switch {
	case o.Tty:
		so.Stdout = outW
	default:
		if pe.Stdout {
			so.Stdout = stdcopy.NewStdWriter(outW, stdcopy.Stdout)
		}
		if pe.Stderr {
			so.Stderr = stdcopy.NewStdWriter(outW, stdcopy.Stderr)
		}
		if !o.AttachStdout && pe.Stdout {
			so.Stdout = io.Discard
		}
		if !o.AttachStderr && pe.Stderr {
			so.Stderr = io.Discard
		}
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	conn.cancel = cancel
	go func() {
		err := ex.StreamWithContext(sctx, so)
		cancel()
		if msg, ok := startFailure(err); ok {
			// As Docker does: the runtime's message on stdout, exit code 126.
			var w io.Writer = outW
			if !o.Tty {
				w = stdcopy.NewStdWriter(outW, stdcopy.Stdout)
			}
			_ = outW.SetWriteDeadline(time.Now().Add(5 * time.Second))
			_, _ = w.Write([]byte(msg + "\r\n"))
			err = utilexec.CodeExitError{Err: err, Code: 126}
		} else if !c.execs.wasClosed(s) {
			err = c.streamErr(s.pod, err)
			err = c.killedWithPod(s.pod, err)
		}
		c.execs.finish(s, err)
		outW.Close()
		if inR != nil {
			inR.Close()
		}
	}()
	return types.NewHijackedResponse(conn, ""), nil
}

// wasClosed reports whether the caller closed the session's stream.
func (t *execTable) wasClosed(s *execSession) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return s.closed
}

// finish records the stream's end.
func (t *execTable) finish(s *execSession, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !s.ended.IsZero() {
		return
	}
	s.ended = time.Now()
	var ee utilexec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		s.code = ee.ExitStatus()
	case s.closed:
		s.err = errors.New("the exec's stream was closed before the command ended: its exit code is unknown")
	default:
		s.err = err
	}
	close(s.done)
}

// ContainerExecInspect reports Running until the stream ends, then the exit code; a
// stream that broke is an error (the engine being down, or the pod gone). A session
// that ended is forgotten keepInspected after its first inspect (or sooner when the
// table is full). Pid is always 0: the process is in the pod.
func (c *Client) ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error) {
	t := &c.execs
	t.mu.Lock()
	s := t.m[execID]
	if s == nil {
		t.mu.Unlock()
		return container.ExecInspect{}, fmt.Errorf("kubernetes engine %s: %w", c.cfg.Name, noSuchExec(execID))
	}
	ins := container.ExecInspect{ExecID: execID, ContainerID: s.pod, Running: s.attached && s.ended.IsZero()}
	if !s.ended.IsZero() && s.inspected.IsZero() {
		s.inspected = time.Now()
	}
	code, err := s.code, s.err
	t.mu.Unlock()
	if ins.Running || !s.attached {
		return ins, nil
	}
	if err != nil {
		return container.ExecInspect{}, fmt.Errorf("kubernetes engine %s: exec %s in %s: %w", c.cfg.Name, execID, s.pod, err)
	}
	ins.ExitCode = code
	return ins, nil
}

// executor makes the stream of one exec in the pod: WebSocket, or SPDY when the API
// server (or a proxy on the way) refuses the WebSocket upgrade, as kubectl does.
func (c *Client) executor(pod string, pe *v1.PodExecOptions) (remotecommand.Executor, error) {
	u := c.core.RESTClient().Post().Resource("pods").Namespace(c.ns).Name(pod).SubResource("exec").
		VersionedParams(pe, scheme.ParameterCodec).URL()
	return c.executorFor(u)
}

func (c *Client) executorFor(u *url.URL) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(c.rest, "GET", u.String())
	if err != nil {
		return nil, fmt.Errorf("kubernetes engine %s: preparing an exec (WebSocket): %w", c.cfg.Name, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.rest, "POST", u)
	if err != nil {
		return nil, fmt.Errorf("kubernetes engine %s: preparing an exec (SPDY): %w", c.cfg.Name, err)
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// startFailure reports whether err says the container runtime could not start the
// command (a missing program, one that may not be executed), and the runtime's words.
func startFailure(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	msg := err.Error()
	if !strings.Contains(msg, "unable to start container process") && !strings.Contains(msg, "failed to exec in container") {
		return "", false
	}
	if containerNotRunning(err) {
		return "", false // the container's end, not the program's: see streamErr
	}
	if i := strings.Index(msg, "OCI runtime exec failed"); i >= 0 {
		msg = msg[i:]
	}
	return clip(msg, 4096), true
}

// streamErr explains a stream's error: an exit status stays as it is; otherwise the
// pod is looked up, and a pod that is gone or not running makes the error a not-found
// or conflict one (the container is gone); else the API server is taken to be down,
// and the error wraps ECONNRESET so that the sandbox package sees it so.
func (c *Client) streamErr(pod string, err error) error {
	var ee utilexec.ExitError
	if err == nil || errors.As(err, &ee) || errors.Is(err, context.Canceled) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	perr := c.podRunning(ctx, pod)
	if perr == nil && containerNotRunning(err) {
		// The runtime has the container ended (killed, evicted) before the kubelet has
		// told the API server: wait for it, which says why.
		perr = c.waitNotRunning(ctx, pod, endedWait)
		if perr == nil {
			perr = fmt.Errorf("kubernetes engine %s: container %s is not running (its runtime says so; the API server does not yet): %w", c.cfg.Name, pod, cerrdefs.ErrConflict)
		}
	}
	if perr != nil && (cerrdefs.IsNotFound(perr) || cerrdefs.IsConflict(perr)) {
		return fmt.Errorf("%w (the exec's stream ended: %s)", perr, clip(err.Error(), 512))
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("the API server refused the exec: %w; the engine's account needs the verbs create and get on pods/exec in namespace %s", err, c.ns)
	}
	return fmt.Errorf("the exec's stream to the API server broke (%w): %w", syscall.ECONNRESET, err)
}

// endedWait bounds how long an exec that the runtime refused because its container
// ended waits for the API server to show the pod's end (the kubelet reports it a
// moment after it stopped the container).
const endedWait = 5 * time.Second

// containerNotRunning reports whether an exec's error is the runtime's refusal of a
// container that is not running (containerd: "container is in CONTAINER_EXITED
// state", "container is not running", "no running task found"): the pod's end
// (killed, evicted), not the program's failure to start.
func containerNotRunning(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"container is in CONTAINER_", "container is not running", "no running task found"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// waitNotRunning waits, at most d, until podRunning fails for pod, and returns its
// error; nil when the pod still runs after d.
func (c *Client) waitNotRunning(ctx context.Context, pod string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pollEvery):
		}
		if err := c.podRunning(ctx, pod); err != nil {
			if ctx.Err() != nil {
				return nil // the bound ended the read
			}
			return err
		}
	}
}

// killedWithPod turns the exit of a command killed by a signal into the pod's own
// error when the pod is gone or going (deleted under the command): the container went
// away, as with Docker's removal of a container, not the command.
func (c *Client) killedWithPod(pod string, err error) error {
	var ee utilexec.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() < 128 {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if perr := c.podRunning(ctx, pod); cerrdefs.IsNotFound(perr) || cerrdefs.IsConflict(perr) {
		return fmt.Errorf("the command was killed (exit code %d) with its pod: %w", ee.ExitStatus(), perr)
	}
	return err
}

// ContainerRunning fails as podRunning does: a not-found error when the container's pod
// is gone (deleted, even while its node still kills it), a conflict error when it is
// stopping or does not run. The sandbox asks before sending a command to an agent whose
// exec stream may not have noticed the pod's deletion yet.
func (c *Client) ContainerRunning(ctx context.Context, name string) error {
	return c.podRunning(ctx, name)
}

// podRunning fails with a not-found error when the pod (or the container it stands for)
// is missing and a conflict error when the pod does not run.
func (c *Client) podRunning(ctx context.Context, name string) error {
	p, err := c.core.Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("kubernetes engine %s: no pod %s in namespace %s (the container is stopped or gone; start it): %w", c.cfg.Name, name, c.ns, cerrdefs.ErrNotFound)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("kubernetes engine %s: reading pod %s: %w; the engine's account needs the verb get on pods in namespace %s", c.cfg.Name, name, err, c.ns)
	case errors.Is(err, context.Canceled) || apierrors.IsUnauthorized(err):
		// The caller gave up, or the credentials are refused: the API server answered.
		return c.apiErr(err, "get", "pods", "reading pod "+name)
	case err != nil:
		return fmt.Errorf("kubernetes engine %s: reading pod %s (%w): %w", c.cfg.Name, name, syscall.ECONNRESET, err)
	}
	if !ownPod(p, name) {
		return c.foreignPod(name) // nothing runs in a pod of another's
	}
	if p.DeletionTimestamp == nil && (p.Status.Phase == v1.PodFailed || p.Status.Phase == v1.PodSucceeded) {
		// Ended for good (evicted, say): why is what a command that ran in it needs.
		c.evictionReason(ctx, p)
		return fmt.Errorf("kubernetes engine %s: container %s is not running: %s: %w", c.cfg.Name, name, podFailure(p), cerrdefs.ErrConflict)
	}
	if p.DeletionTimestamp != nil || p.Status.Phase != v1.PodRunning {
		return fmt.Errorf("kubernetes engine %s: container %s is not running (pod phase %s): %w", c.cfg.Name, name, p.Status.Phase, cerrdefs.ErrConflict)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == execContainer && cs.State.Running == nil {
			return fmt.Errorf("kubernetes engine %s: container %s is not running (its container %q waits or ended): %w", c.cfg.Name, name, execContainer, cerrdefs.ErrConflict)
		}
	}
	return nil
}

// execWrapper applies WorkingDir and Env, passed as arguments: $1 the directory, $2
// the count of NAME=VALUE entries that follow, then the command.
const execWrapper = `cd -- "$1" || exit 126; shift; n=$1; shift; while [ "$n" -gt 0 ]; do export "$1" || exit 126; shift; n=$((n-1)); done; exec "$@"`

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// execArgv is the command the pod runs for options: Cmd itself, or Cmd under
// execWrapper when WorkingDir or Env is set.
func execArgv(o container.ExecOptions) ([]string, error) {
	return processArgv(o.User, o.WorkingDir, o.Env, o.Cmd)
}

// processArgv is the command the pod runs for cmd as user in dir with env: cmd
// itself, or cmd under execWrapper when dir or env is set.
func processArgv(user, dir string, env, cmd []string) ([]string, error) {
	switch user {
	case "", "root", "0", "0:0", "root:root":
	default:
		return nil, fmt.Errorf("running as user %q is not supported on a Kubernetes engine (commands run as the container's user, root): run as root or switch users inside the command (su, setpriv): %w", user, cerrdefs.ErrNotImplemented)
	}
	if len(cmd) == 0 {
		return nil, fmt.Errorf("no command given: %w", cerrdefs.ErrInvalidArgument)
	}
	if dir == "" && len(env) == 0 {
		return cmd, nil
	}
	for _, e := range env {
		if !envName.MatchString(e) {
			return nil, fmt.Errorf("environment entry %q is not NAME=VALUE with a shell variable's name: %w", clip(e, 64), cerrdefs.ErrInvalidArgument)
		}
	}
	if dir == "" {
		dir = "."
	}
	argv := make([]string, 0, 6+len(env)+len(cmd))
	argv = append(argv, "/bin/sh", "-c", execWrapper, "exec", dir, strconv.Itoa(len(env)))
	argv = append(argv, env...)
	return append(argv, cmd...), nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// newID is a random exec ID, 64 hex digits like Docker's.
func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// execConn is the stream of one exec as a net.Conn.
type execConn struct {
	out    net.Conn // the output, as Docker frames it
	in     net.Conn // the command's stdin; nil when not attached
	cancel context.CancelFunc
	table  *execTable
	s      *execSession
	once   sync.Once
}

func (e *execConn) Read(p []byte) (int, error) { return e.out.Read(p) }

func (e *execConn) Write(p []byte) (int, error) {
	if e.in == nil {
		return 0, errors.New("the exec's stdin is not attached (AttachStdin is false)")
	}
	return e.in.Write(p)
}

// CloseWrite closes the command's stdin.
func (e *execConn) CloseWrite() error {
	if e.in == nil {
		return nil
	}
	return e.in.Close()
}

// Close ends the stream; the command's exit code is then unknown unless it had ended.
func (e *execConn) Close() error {
	e.once.Do(func() {
		e.table.mu.Lock()
		if e.s.ended.IsZero() {
			e.s.closed = true
		}
		e.table.mu.Unlock()
		e.cancel()
		e.out.Close()
		if e.in != nil {
			e.in.Close()
		}
	})
	return nil
}

func (e *execConn) LocalAddr() net.Addr  { return execAddr{} }
func (e *execConn) RemoteAddr() net.Addr { return execAddr{} }

func (e *execConn) SetDeadline(t time.Time) error {
	_ = e.SetWriteDeadline(t)
	return e.out.SetReadDeadline(t)
}

func (e *execConn) SetReadDeadline(t time.Time) error { return e.out.SetReadDeadline(t) }

func (e *execConn) SetWriteDeadline(t time.Time) error {
	if e.in == nil {
		return nil
	}
	return e.in.SetWriteDeadline(t)
}

// execAddr is the address of an exec stream: there is none.
type execAddr struct{}

func (execAddr) Network() string { return "kubernetes-exec" }
func (execAddr) String() string  { return "kubernetes-exec" }
