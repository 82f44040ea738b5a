package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap/zaptest"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/kube"
)

// These tests drive the sandbox package on the Kubernetes engine of the development
// cluster (MCP_SANDBOX_KUBECONFIG), in pods they make themselves in namespace default,
// named exec-*.

// kubePod starts a pod whose container "sandbox" sleeps, in namespace default, and
// returns its name and a client for its namespace; both go when the test ends.
func kubePod(t *testing.T) (string, corev1.PodInterface) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Kubernetes cluster: not with -short")
	}
	kc := os.Getenv("MCP_SANDBOX_KUBECONFIG")
	if kc == "" {
		t.Skip("needs a Kubernetes cluster: MCP_SANDBOX_KUBECONFIG is not set (make test-kube sets it)")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	core, err := corev1.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	pods := core.Pods("default")
	image := os.Getenv("MCP_SANDBOX_KUBE_IMAGE")
	if image == "" {
		image = "k8s.local/code-sandbox-test:latest"
	}
	name := "exec-agent-" + newExecID()[:8]
	f := false
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = pods.Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			AutomountServiceAccountToken: &f, TerminationGracePeriodSeconds: new(int64),
			Containers: []v1.Container{{Name: "sandbox", Image: image, ImagePullPolicy: v1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", "exec sleep 2147483647"}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == v1.PodRunning {
			return name, pods
		}
		if ctx.Err() != nil {
			t.Fatalf("pod %s did not run within 2 minutes: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// podInspect is the Kubernetes engine with ContainerInspect answered from the pod, for
// the tests of the exec paths that need no more of a container than that it runs.
type podInspect struct {
	*kube.Client
	pods corev1.PodInterface
}

func (e podInspect) ContainerInspect(ctx context.Context, name string) (container.InspectResponse, error) {
	p, err := e.pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return container.InspectResponse{}, err
	}
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: string(p.UID), Name: "/" + name, Image: p.Spec.Containers[0].Image,
			State: &container.State{Running: p.Status.Phase == v1.PodRunning, Status: "running"}},
		Config: &container.Config{Image: p.Spec.Containers[0].Image},
	}, nil
}

func kubeSandbox(t *testing.T, name string, pods corev1.PodInterface) *Sandbox {
	t.Helper()
	kc, err := kube.New(kube.Config{Name: "test", Kubeconfig: os.Getenv("MCP_SANDBOX_KUBECONFIG"), Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Container, cfg.Volume, cfg.NoAgent = name, name, false
	s, err := New(podInspect{kc, pods}, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if !s.onKubernetes() {
		t.Fatalf("onKubernetes is false for DaemonHost %q", kc.DaemonHost())
	}
	return s
}

// TestKubeAgentThroughExec installs the real agent in a pod (its architecture from
// uname, its binary copied with tar through an exec), starts it through an exec and
// runs a command on it.
func TestKubeAgentThroughExec(t *testing.T) {
	name, pods := kubePod(t)
	s := kubeSandbox(t, name, pods)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess := s.agentSession(ctx)
	if sess == nil {
		s.agentMu.Lock()
		why := s.agent.off
		s.agentMu.Unlock()
		t.Fatalf("the agent did not start in pod %s: %s", name, why)
	}
	if bin := s.agentBinary(); !strings.HasPrefix(bin, agentDir+"/sandbox-agent-") {
		t.Fatalf("agent binary at %q, want under %s", bin, agentDir)
	}
	p, err := s.agentExec(sess, container.ExecOptions{User: "root", WorkingDir: "/tmp", Env: []string{"X=from env"}, AttachStdout: true, AttachStderr: true,
		Cmd: []string{"sh", "-c", `echo "$X in $(pwd)"; echo oops >&2; exit 3`}})
	if err != nil {
		t.Fatalf("exec on the agent: %v", err)
	}
	var out, errb bytes.Buffer
	if err := drain(p, func(b []byte) { out.Write(b) }, func(b []byte) { errb.Write(b) }); err != nil {
		t.Fatalf("reading the agent's output: %v", err)
	}
	code, ok := p.exitCode(ctx, false)
	p.Close()
	if out.String() != "from env in /tmp\n" || errb.String() != "oops\n" || !ok || code != 3 {
		t.Fatalf("on the agent: stdout %q stderr %q exit %d (%v)", out.String(), errb.String(), code, ok)
	}
}

// TestKubeNoCheckpoints: checkpoints are refused plainly, and listing finds none.
func TestKubeNoCheckpoints(t *testing.T) {
	name, pods := kubePod(t)
	s := kubeSandbox(t, name, pods)
	ctx := context.Background()
	_, err := s.Checkpoint(ctx, "x", 0)
	if !errors.Is(err, errNoCheckpoints) || !cerrdefs.IsNotImplemented(err) || !strings.HasPrefix(err.Error(), "checkpoints are not supported on a Kubernetes engine") {
		t.Fatalf("Checkpoint: %v", err)
	}
	if _, err := s.Restore(ctx, "0123456789ab"); !errors.Is(err, errNoCheckpoints) {
		t.Fatalf("Restore: %v", err)
	}
	if list, err := s.Checkpoints(ctx); err != nil || len(list) != 0 {
		t.Fatalf("Checkpoints: %v %v", list, err)
	}
	if err := DeleteCheckpoint(ctx, s.cli, "0123456789ab"); !errors.Is(err, boxapi.ErrCheckpointNotFound) {
		t.Fatalf("DeleteCheckpoint: %v", err)
	}
	if id, _ := s.transferTarget(ctx); id != "" {
		t.Fatalf("a transfer container %q on a Kubernetes engine", id)
	}
}

// TestKubeSandboxExec is the whole sandbox on the engine: it needs the engine's
// containers (ContainerCreate and the rest), and skips until they are there.
func TestKubeSandboxExec(t *testing.T) {
	if testing.Short() || os.Getenv("MCP_SANDBOX_KUBECONFIG") == "" {
		t.Skip("needs a Kubernetes cluster (MCP_SANDBOX_KUBECONFIG)")
	}
	kc, err := kube.New(kube.Config{Name: "test", Kubeconfig: os.Getenv("MCP_SANDBOX_KUBECONFIG"), Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Image = os.Getenv("MCP_SANDBOX_KUBE_IMAGE")
	if cfg.Image == "" {
		cfg.Image = "k8s.local/code-sandbox-test:latest"
	}
	cfg.Container = "exec-whole-" + newExecID()[:8]
	cfg.Volume = cfg.Container
	cfg.NetworkMode = ""
	s, err := New(kc, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := kc.ContainerInspect(ctx, cfg.Container); cerrdefs.IsNotImplemented(err) {
		t.Skip("the Kubernetes engine has no containers yet (ContainerInspect: not implemented)")
	}
	defer func() {
		bg := context.Background()
		_ = kc.ContainerRemove(bg, cfg.Container, container.RemoveOptions{Force: true})
		_ = kc.VolumeRemove(bg, cfg.Volume, true)
	}()
	res, err := s.Exec(ctx, "echo hi; id -u; exit 4", boxapi.ExecOptions{})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if res.Stdout != "hi\n0\n" || res.ExitCode != 4 {
		t.Fatalf("Exec: %+v", res)
	}
	st, err := s.Status(ctx)
	if err != nil || st.State != "running" || !st.NoUsage {
		t.Fatalf("Status: %+v %v", st, err)
	}
}
