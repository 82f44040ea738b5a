package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilexec "k8s.io/client-go/util/exec"
)

// The cluster tests run in a namespace of their own, made on first use and deleted by
// TestMain, with pods of the image MCP_SANDBOX_KUBE_IMAGE.

var (
	clusterOnce sync.Once
	clusterCli  *Client
	clusterErr  error
	clusterNS   string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if clusterCli != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := clusterCli.core.Namespaces().Delete(ctx, clusterNS, metav1.DeleteOptions{})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			fmt.Fprintf(os.Stderr, "deleting test namespace %s: %v\n", clusterNS, err)
		}
	}
	os.Exit(code)
}

// testClient is a client for a namespace of the test's own on the development
// cluster; the test skips without one.
func testClient(t testing.TB) *Client {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Kubernetes cluster: not with -short")
	}
	kc := os.Getenv("MCP_SANDBOX_KUBECONFIG")
	if kc == "" {
		t.Skip("needs a Kubernetes cluster: MCP_SANDBOX_KUBECONFIG is not set (make test-kube sets it)")
	}
	clusterOnce.Do(func() {
		clusterNS = "exec-test-" + newID()[:8]
		c, err := New(Config{Name: "test", Kubeconfig: kc, Namespace: clusterNS})
		if err != nil {
			clusterErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, clusterErr = c.core.Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNS}}, metav1.CreateOptions{})
		if clusterErr == nil {
			clusterCli = c
		}
	})
	if clusterErr != nil {
		t.Fatalf("setting up the test namespace: %v", clusterErr)
	}
	return clusterCli
}

// testPod starts a pod with a container "sandbox" that sleeps, waits until it runs
// and deletes it when the test ends.
func testPod(t testing.TB, c *Client, name string) {
	t.Helper()
	image := os.Getenv("MCP_SANDBOX_KUBE_IMAGE")
	if image == "" {
		image = "k8s.local/code-sandbox-test:latest"
	}
	f := false
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: OwnerLabels(name)},
		Spec: v1.PodSpec{
			AutomountServiceAccountToken:  &f,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []v1.Container{{
				Name: execContainer, Image: image, ImagePullPolicy: v1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", "exec sleep 2147483647"},
			}},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.core.Pods(c.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = c.core.Pods(c.ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	for {
		if err := c.podRunning(ctx, name); err == nil {
			return
		} else if ctx.Err() != nil {
			t.Fatalf("pod %s did not run within 2 minutes: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type execResult struct {
	stdout, stderr string
	code           int
}

// execIn runs opts through the Docker-shaped calls and reads the stream as the
// sandbox package does.
func execIn(t testing.TB, c *Client, pod string, opts container.ExecOptions, stdin []byte) execResult {
	t.Helper()
	ctx := context.Background()
	resp, err := c.ContainerExecCreate(ctx, pod, opts)
	if err != nil {
		t.Fatalf("ContainerExecCreate: %v", err)
	}
	hj, err := c.ContainerExecAttach(ctx, resp.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("ContainerExecAttach: %v", err)
	}
	defer hj.Close()
	werr := make(chan error, 1)
	if opts.AttachStdin {
		go func() {
			_, err := hj.Conn.Write(stdin)
			if err == nil {
				err = hj.CloseWrite()
			}
			werr <- err
		}()
	} else {
		werr <- nil
	}
	var out, errb bytes.Buffer
	if opts.Tty {
		_, err = io.Copy(&out, hj.Reader)
	} else {
		_, err = stdcopy.StdCopy(&out, &errb, hj.Reader)
	}
	if err != nil {
		t.Fatalf("reading the exec's output: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("writing stdin: %v", err)
	}
	ins, err := c.ContainerExecInspect(ctx, resp.ID)
	if err != nil {
		t.Fatalf("ContainerExecInspect: %v", err)
	}
	if ins.Running {
		t.Fatalf("inspect after the stream ended says Running")
	}
	return execResult{out.String(), errb.String(), ins.ExitCode}
}

var sharedPod sync.Once

// podForTests is a pod shared by the tests that only run commands.
func podForTests(t *testing.T) (*Client, string) {
	c := testClient(t)
	const name = "exec-shared"
	sharedPod.Do(func() { testPod(&noCleanupTB{t}, c, name) })
	if err := c.podRunning(context.Background(), name); err != nil {
		t.Fatalf("shared pod: %v", err)
	}
	return c, name
}

// noCleanupTB keeps the shared pod beyond the first test (TestMain's namespace
// deletion removes it).
type noCleanupTB struct{ *testing.T }

func (noCleanupTB) Cleanup(func()) {}

func TestExecIDAndExitCode(t *testing.T) {
	c, pod := podForTests(t)
	r := execIn(t, c, pod, container.ExecOptions{User: "root", AttachStdout: true, AttachStderr: true, Cmd: []string{"id", "-u"}}, nil)
	if r.stdout != "0\n" || r.code != 0 {
		t.Fatalf("id -u: stdout %q code %d, want \"0\\n\" 0", r.stdout, r.code)
	}
	r = execIn(t, c, pod, container.ExecOptions{AttachStdout: true, AttachStderr: true, Cmd: []string{"sh", "-c", "exit 7"}}, nil)
	if r.code != 7 {
		t.Fatalf("exit 7: code %d", r.code)
	}
	r = execIn(t, c, pod, container.ExecOptions{AttachStdout: true, AttachStderr: true, Cmd: []string{"no-such-program-here"}}, nil)
	// Docker says 126, with the runtime's message on stdout.
	if r.code != 126 || !strings.Contains(r.stdout, "no-such-program-here") {
		t.Fatalf("missing program: code %d stdout %q, want 126 and the runtime's message", r.code, r.stdout)
	}
}

func TestExecStderrSeparate(t *testing.T) {
	c, pod := podForTests(t)
	r := execIn(t, c, pod, container.ExecOptions{AttachStdout: true, AttachStderr: true,
		Cmd: []string{"sh", "-c", "echo out; echo err >&2; echo out2; echo err2 >&2"}}, nil)
	if r.stdout != "out\nout2\n" || r.stderr != "err\nerr2\n" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
}

func TestExecEnvAndWorkingDir(t *testing.T) {
	c, pod := podForTests(t)
	weird := "a 'b' \"c\" $(d) `e` \\ ; *\nline2"
	r := execIn(t, c, pod, container.ExecOptions{User: "root", WorkingDir: "/tmp", Env: []string{"A=1", "W=" + weird, "EMPTY="},
		AttachStdout: true, AttachStderr: true, Cmd: []string{"sh", "-c", `pwd; printf '%s|%s|%s|' "$A" "$W" "${EMPTY-unset}"`}}, nil)
	if want := "/tmp\n1|" + weird + "||"; r.stdout != want || r.code != 0 {
		t.Fatalf("stdout %q code %d, want %q", r.stdout, r.code, want)
	}
	r = execIn(t, c, pod, container.ExecOptions{WorkingDir: "/no/such/dir", AttachStdout: true, AttachStderr: true, Cmd: []string{"true"}}, nil)
	if r.code != 126 {
		t.Fatalf("missing working dir: code %d, want 126", r.code)
	}
	if _, err := c.ContainerExecCreate(context.Background(), pod, container.ExecOptions{User: "nobody", Cmd: []string{"true"}}); !cerrdefs.IsNotImplemented(err) {
		t.Fatalf("User nobody: %v, want a not-implemented error", err)
	}
}

func TestExecStdinRoundTrip(t *testing.T) {
	c, pod := podForTests(t)
	in := make([]byte, 1<<20)
	for i := range in {
		in[i] = byte(i*7 + i>>11)
	}
	r := execIn(t, c, pod, container.ExecOptions{AttachStdin: true, AttachStdout: true, AttachStderr: true, Cmd: []string{"cat"}}, in)
	if r.code != 0 || r.stdout != string(in) {
		t.Fatalf("cat of 1 MiB: code %d, %d bytes back, equal %v", r.code, len(r.stdout), r.stdout == string(in))
	}
}

func TestExecTTYRaw(t *testing.T) {
	c, pod := podForTests(t)
	r := execIn(t, c, pod, container.ExecOptions{Tty: true, AttachStdout: true, AttachStderr: true,
		Cmd: []string{"sh", "-c", "echo out; echo err >&2; [ -t 1 ] && echo tty"}}, nil)
	// A terminal turns \n into \r\n and merges stderr into stdout; no 8-byte headers.
	if r.stdout != "out\r\nerr\r\ntty\r\n" || r.code != 0 {
		t.Fatalf("tty output %q code %d", r.stdout, r.code)
	}
}

func TestExecNoGoroutineLeak(t *testing.T) {
	c, pod := podForTests(t)
	execIn(t, c, pod, container.ExecOptions{AttachStdout: true, Cmd: []string{"true"}}, nil) // warm the transports
	time.Sleep(200 * time.Millisecond)
	before := runtime.NumGoroutine()
	for i := range 100 {
		opts := container.ExecOptions{AttachStdout: true, AttachStderr: true, Cmd: []string{"echo", "x"}}
		var in []byte
		if i%2 == 0 {
			opts.AttachStdin, opts.Cmd, in = true, []string{"cat"}, []byte("x\n")
		}
		if r := execIn(t, c, pod, opts, in); r.stdout != "x\n" || r.code != 0 {
			t.Fatalf("exec %d: %+v", i, r)
		}
	}
	var after int
	for range 50 {
		after = runtime.NumGoroutine()
		if after <= before+5 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("goroutines before %d, after 100 execs %d", before, after)
	if after > before+5 {
		t.Fatalf("goroutines grew from %d to %d over 100 execs", before, after)
	}
	// Every session was inspected after its end: a minute later they are forgotten.
	c.execs.mu.Lock()
	for _, s := range c.execs.m {
		if s.inspected.IsZero() {
			c.execs.mu.Unlock()
			t.Fatalf("a session inspected after its end is not marked so: %+v", s)
		}
		s.inspected = s.inspected.Add(-keepInspected - time.Second)
	}
	c.execs.swept = time.Time{}
	c.execs.sweepLocked(time.Now())
	n := len(c.execs.m)
	c.execs.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d exec sessions remain in the table a minute after they were inspected", n)
	}
}

// TestExecInspectAgain: an exec that ended can be inspected again, as on Docker (the
// sandbox package waits for its end, then asks its exit code), until keepInspected
// after its first inspect.
func TestExecInspectAgain(t *testing.T) {
	c := &Client{}
	s := &execSession{pod: "box", created: time.Now(), done: make(chan struct{}), attached: true}
	if err := c.execs.add("e1", s); err != nil {
		t.Fatal(err)
	}
	c.execs.finish(s, utilexec.CodeExitError{Err: errors.New("exit 3"), Code: 3})
	for i := range 2 {
		ins, err := c.ContainerExecInspect(t.Context(), "e1")
		if err != nil || ins.Running || ins.ExitCode != 3 {
			t.Fatalf("inspect %d: %+v %v, want exit code 3", i+1, ins, err)
		}
	}
	c.execs.mu.Lock()
	s.inspected = s.inspected.Add(-keepInspected - time.Second)
	c.execs.swept = c.execs.swept.Add(-keepInspected)
	c.execs.mu.Unlock()
	if err := c.execs.add("e2", &execSession{created: time.Now(), done: make(chan struct{})}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ContainerExecInspect(t.Context(), "e1"); !cerrdefs.IsNotFound(err) {
		t.Fatalf("inspect past keepInspected: %v, want not found", err)
	}
}

func TestExecPodDeleted(t *testing.T) {
	c := testClient(t)
	const pod = "exec-deleted"
	testPod(t, c, pod)
	ctx := context.Background()
	resp, err := c.ContainerExecCreate(ctx, pod, container.ExecOptions{AttachStdout: true, AttachStderr: true, Cmd: []string{"sh", "-c", "echo started; exec sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	hj, err := c.ContainerExecAttach(ctx, resp.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer hj.Close()
	head := make([]byte, 8+len("started\n"))
	if _, err := io.ReadFull(hj.Reader, head); err != nil {
		t.Fatalf("reading the first line: %v", err)
	}
	if err := c.core.Pods(c.ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, hj.Reader); done <- err }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the stream did not end within 60s of the pod's deletion")
	}
	ins, err := c.ContainerExecInspect(ctx, resp.ID)
	t.Logf("inspect after the pod was deleted: %+v, %v", ins, err)
	if !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		t.Fatalf("inspect of an exec whose pod was deleted: %+v %v, want a not-found or conflict error", ins, err)
	}
	if _, err := c.ContainerExecCreate(ctx, pod, container.ExecOptions{Cmd: []string{"true"}}); !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		t.Fatalf("exec create in a deleted pod: %v, want not found or conflict", err)
	}
}

func TestExecInspectUnknown(t *testing.T) {
	c := &Client{cfg: Config{Name: "x"}}
	if _, err := c.ContainerExecInspect(context.Background(), "nope"); !cerrdefs.IsNotFound(err) {
		t.Fatalf("inspect of an unknown exec: %v", err)
	}
	if _, err := c.ContainerExecAttach(context.Background(), "nope", container.ExecAttachOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("attach of an unknown exec: %v", err)
	}
}

func TestExecArgv(t *testing.T) {
	a, err := execArgv(container.ExecOptions{Cmd: []string{"ls", "-l"}})
	if err != nil || strings.Join(a, " ") != "ls -l" {
		t.Fatalf("plain: %q %v", a, err)
	}
	a, err = execArgv(container.ExecOptions{User: "root", WorkingDir: "/w", Env: []string{"A=1", "B=x y"}, Cmd: []string{"ls"}})
	if err != nil || len(a) != 9 || a[0] != "/bin/sh" || a[4] != "/w" || a[5] != "2" || a[6] != "A=1" || a[7] != "B=x y" || a[8] != "ls" {
		t.Fatalf("wrapped: %q %v", a, err)
	}
	for _, bad := range []container.ExecOptions{
		{User: "1000", Cmd: []string{"ls"}},
		{Cmd: nil},
		{Env: []string{"NOEQUALS"}, Cmd: []string{"ls"}},
		{Env: []string{"1A=x"}, Cmd: []string{"ls"}},
		{Env: []string{"A-B=x"}, Cmd: []string{"ls"}},
	} {
		if _, err := execArgv(bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestExecTableBound(t *testing.T) {
	var tb execTable
	for i := range maxExecs {
		s := &execSession{created: time.Now(), done: make(chan struct{}), attached: true}
		if i%2 == 0 {
			s.ended = time.Now()
		}
		if err := tb.add(fmt.Sprint(i), s); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	if err := tb.add("one more", &execSession{created: time.Now()}); err != nil {
		t.Fatalf("add past the bound with ended sessions to drop: %v", err)
	}
	if n := len(tb.m); n > maxExecs*3/4+1 {
		t.Fatalf("%d sessions after eviction", n)
	}
	// Running ones only: the table refuses.
	var full execTable
	for i := range maxExecs {
		_ = full.add(fmt.Sprint(i), &execSession{created: time.Now(), attached: true})
	}
	if err := full.add("x", &execSession{}); err == nil {
		t.Fatal("a table full of running sessions took one more")
	}
}

func TestFinishExitCodes(t *testing.T) {
	var tb execTable
	s := &execSession{done: make(chan struct{}), attached: true}
	tb.finish(s, errors.New("boom"))
	if s.err == nil || s.code != 0 {
		t.Fatalf("broken stream: %+v", s)
	}
	s = &execSession{done: make(chan struct{}), attached: true, closed: true}
	tb.finish(s, context.Canceled)
	if s.err == nil || !strings.Contains(s.err.Error(), "closed") {
		t.Fatalf("closed stream: %v", s.err)
	}
}

// BenchmarkExecTrue is a raw exec of true through the API server: the baseline of the
// sandbox's own exec on a Kubernetes engine.
func BenchmarkExecTrue(b *testing.B) {
	c := testClient(b)
	const pod = "exec-bench"
	testPod(b, c, pod)
	for b.Loop() {
		if r := execIn(b, c, pod, container.ExecOptions{AttachStdout: true, AttachStderr: true, Cmd: []string{"true"}}, nil); r.code != 0 {
			b.Fatalf("true: %+v", r)
		}
	}
}

// BenchmarkExecStdin is BenchmarkExecTrue with stdin attached (cat of a line).
func BenchmarkExecStdin(b *testing.B) {
	c := testClient(b)
	const pod = "exec-bench-stdin"
	testPod(b, c, pod)
	for b.Loop() {
		if r := execIn(b, c, pod, container.ExecOptions{AttachStdin: true, AttachStdout: true, AttachStderr: true, Cmd: []string{"cat"}}, []byte("x\n")); r.code != 0 {
			b.Fatalf("cat: %+v", r)
		}
	}
}
