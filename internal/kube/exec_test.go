package kube

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// execIn runs opts through StartProcess and reads its output as the sandbox
// package does.
func execIn(t testing.TB, c *Client, pod string, spec boxapi.ProcessSpec, stdin []byte) execResult {
	t.Helper()
	ctx := context.Background()
	p, err := c.StartProcess(ctx, pod, spec)
	if err != nil {
		t.Fatalf("StartProcess: %v", err)
	}
	defer p.Close()
	werr := make(chan error, 1)
	if spec.Stdin {
		go func() {
			_, err := p.Write(stdin)
			if err == nil {
				err = p.CloseWrite()
			}
			werr <- err
		}()
	} else {
		werr <- nil
	}
	out, errs, err := readAll(t, p)
	if err != nil {
		t.Fatalf("reading the program's output: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("writing stdin: %v", err)
	}
	code, ok := p.Wait(ctx)
	if !ok {
		t.Fatalf("no exit code after the output ended")
	}
	return execResult{out, errs, code}
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
	r := execIn(t, c, pod, boxapi.ProcessSpec{User: "root", Stdout: true, Stderr: true, Argv: []string{"id", "-u"}}, nil)
	if r.stdout != "0\n" || r.code != 0 {
		t.Fatalf("id -u: stdout %q code %d, want \"0\\n\" 0", r.stdout, r.code)
	}
	r = execIn(t, c, pod, boxapi.ProcessSpec{Stdout: true, Stderr: true, Argv: []string{"sh", "-c", "exit 7"}}, nil)
	if r.code != 7 {
		t.Fatalf("exit 7: code %d", r.code)
	}
	r = execIn(t, c, pod, boxapi.ProcessSpec{Stdout: true, Stderr: true, Argv: []string{"no-such-program-here"}}, nil)
	// Docker says 126, with the runtime's message on stdout.
	if r.code != 126 || !strings.Contains(r.stdout, "no-such-program-here") {
		t.Fatalf("missing program: code %d stdout %q, want 126 and the runtime's message", r.code, r.stdout)
	}
}

func TestExecStderrSeparate(t *testing.T) {
	c, pod := podForTests(t)
	r := execIn(t, c, pod, boxapi.ProcessSpec{Stdout: true, Stderr: true,
		Argv: []string{"sh", "-c", "echo out; echo err >&2; echo out2; echo err2 >&2"}}, nil)
	if r.stdout != "out\nout2\n" || r.stderr != "err\nerr2\n" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
}

func TestExecEnvAndWorkingDir(t *testing.T) {
	c, pod := podForTests(t)
	weird := "a 'b' \"c\" $(d) `e` \\ ; *\nline2"
	r := execIn(t, c, pod, boxapi.ProcessSpec{User: "root", Dir: "/tmp", Env: []string{"A=1", "W=" + weird, "EMPTY="},
		Stdout: true, Stderr: true, Argv: []string{"sh", "-c", `pwd; printf '%s|%s|%s|' "$A" "$W" "${EMPTY-unset}"`}}, nil)
	if want := "/tmp\n1|" + weird + "||"; r.stdout != want || r.code != 0 {
		t.Fatalf("stdout %q code %d, want %q", r.stdout, r.code, want)
	}
	r = execIn(t, c, pod, boxapi.ProcessSpec{Dir: "/no/such/dir", Stdout: true, Stderr: true, Argv: []string{"true"}}, nil)
	if r.code != 126 {
		t.Fatalf("missing working dir: code %d, want 126", r.code)
	}
	if _, err := c.StartProcess(context.Background(), pod, boxapi.ProcessSpec{User: "nobody", Argv: []string{"true"}}); !cerrdefs.IsNotImplemented(err) {
		t.Fatalf("User nobody: %v, want a not-implemented error", err)
	}
}

func TestExecStdinRoundTrip(t *testing.T) {
	c, pod := podForTests(t)
	in := make([]byte, 1<<20)
	for i := range in {
		in[i] = byte(i*7 + i>>11)
	}
	r := execIn(t, c, pod, boxapi.ProcessSpec{Stdin: true, Stdout: true, Stderr: true, Argv: []string{"cat"}}, in)
	if r.code != 0 || r.stdout != string(in) {
		t.Fatalf("cat of 1 MiB: code %d, %d bytes back, equal %v", r.code, len(r.stdout), r.stdout == string(in))
	}
}

func TestExecTTYRaw(t *testing.T) {
	c, pod := podForTests(t)
	r := execIn(t, c, pod, boxapi.ProcessSpec{TTY: true, Stdout: true, Stderr: true,
		Argv: []string{"sh", "-c", "echo out; echo err >&2; [ -t 1 ] && echo tty"}}, nil)
	// A terminal turns \n into \r\n and merges stderr into stdout; no 8-byte headers.
	if r.stdout != "out\r\nerr\r\ntty\r\n" || r.code != 0 {
		t.Fatalf("tty output %q code %d", r.stdout, r.code)
	}
}

func TestExecNoGoroutineLeak(t *testing.T) {
	c, pod := podForTests(t)
	execIn(t, c, pod, boxapi.ProcessSpec{Stdout: true, Argv: []string{"true"}}, nil) // warm the transports
	time.Sleep(200 * time.Millisecond)
	before := runtime.NumGoroutine()
	for i := range 100 {
		spec := boxapi.ProcessSpec{Stdout: true, Stderr: true, Argv: []string{"echo", "x"}}
		var in []byte
		if i%2 == 0 {
			spec.Stdin, spec.Argv, in = true, []string{"cat"}, []byte("x\n")
		}
		if r := execIn(t, c, pod, spec, in); r.stdout != "x\n" || r.code != 0 {
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
}

func TestExecPodDeleted(t *testing.T) {
	c := testClient(t)
	const pod = "exec-deleted"
	testPod(t, c, pod)
	ctx := context.Background()
	p, err := c.StartProcess(ctx, pod, boxapi.ProcessSpec{Stdout: true, Stderr: true, Argv: []string{"sh", "-c", "echo started; exec sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	head := make([]byte, len("started\n"))
	if n, _, err := p.ReadOutput(head); err != nil || string(head[:n]) != "started\n" {
		t.Fatalf("reading the first line: %q %v", head[:n], err)
	}
	if err := c.core.Pods(c.ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := readAll(t, p); done <- err }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the stream did not end within 60s of the pod's deletion")
	}
	t.Logf("the stream's end after the pod was deleted: %v", err)
	if !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		t.Fatalf("the end of a program whose pod was deleted: %v, want a not-found or conflict error", err)
	}
	if _, ok := p.Wait(ctx); ok {
		t.Fatal("a program killed with its pod has an exit code")
	}
	if _, err := c.StartProcess(ctx, pod, boxapi.ProcessSpec{Argv: []string{"true"}}); !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		t.Fatalf("a program in a deleted pod: %v, want not found or conflict", err)
	}
}

func TestExecArgv(t *testing.T) {
	a, err := processArgv("", "", nil, []string{"ls", "-l"})
	if err != nil || strings.Join(a, " ") != "ls -l" {
		t.Fatalf("plain: %q %v", a, err)
	}
	a, err = processArgv("root", "/w", []string{"A=1", "B=x y"}, []string{"ls"})
	if err != nil || len(a) != 9 || a[0] != "/bin/sh" || a[4] != "/w" || a[5] != "2" || a[6] != "A=1" || a[7] != "B=x y" || a[8] != "ls" {
		t.Fatalf("wrapped: %q %v", a, err)
	}
	for _, bad := range []boxapi.ProcessSpec{
		{User: "1000", Argv: []string{"ls"}},
		{Argv: nil},
		{Env: []string{"NOEQUALS"}, Argv: []string{"ls"}},
		{Env: []string{"1A=x"}, Argv: []string{"ls"}},
		{Env: []string{"A-B=x"}, Argv: []string{"ls"}},
	} {
		if _, err := processArgv(bad.User, bad.Dir, bad.Env, bad.Argv); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// BenchmarkExecTrue is a program (true) through the API server: the baseline of the
// sandbox's own execute on a Kubernetes engine.
func BenchmarkExecTrue(b *testing.B) {
	c := testClient(b)
	const pod = "exec-bench"
	testPod(b, c, pod)
	for b.Loop() {
		if r := execIn(b, c, pod, boxapi.ProcessSpec{Stdout: true, Stderr: true, Argv: []string{"true"}}, nil); r.code != 0 {
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
		if r := execIn(b, c, pod, boxapi.ProcessSpec{Stdin: true, Stdout: true, Stderr: true, Argv: []string{"cat"}}, []byte("x\n")); r.code != 0 {
			b.Fatalf("cat: %+v", r)
		}
	}
}
