package sandbox

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/kube"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/kube/kubetest"
)

// These tests drive the sandbox package on the Kubernetes engine of the development
// cluster (MCP_SANDBOX_KUBECONFIG), in pods they make themselves in namespace default,
// named exec-*.

// kubeSandbox starts a pod whose container "sandbox" sleeps, in namespace default
// (gone when the test ends), and a sandbox on it whose engine knows the pod as its
// container.
func kubeSandbox(t *testing.T) (*Sandbox, string) {
	t.Helper()
	pods := kubetest.Pods(t, "default")
	name := kubetest.Pod(t, pods, "exec-agent")
	kc, err := kube.New(kube.Config{Name: "test", Kubeconfig: kubetest.Kubeconfig(t), Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Container, cfg.Volume, cfg.NoAgent = name, name, false
	s, err := New(kubetest.PodInspect{Client: kc, Pods: pods}, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if s.life.caps() != (boxapi.Capabilities{}) {
		t.Fatalf("a Kubernetes engine's capabilities are %+v, want none", s.life.caps())
	}
	return s, name
}

// TestKubeAgentThroughExec installs the real agent in a pod (its architecture from
// uname, its binary copied with tar through an exec), starts it through an exec and
// runs a command on it.
func TestKubeAgentThroughExec(t *testing.T) {
	s, name := kubeSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess := s.link.agentSession(ctx)
	if sess == nil {
		s.link.agentMu.Lock()
		why := s.link.agent.off
		s.link.agentMu.Unlock()
		t.Fatalf("the agent did not start in pod %s: %s", name, why)
	}
	if bin := s.link.agentBinary(); !strings.HasPrefix(bin, agentDir+"/sandbox-agent-") {
		t.Fatalf("agent binary at %q, want under %s", bin, agentDir)
	}
	p, err := s.link.agentExec(sess, container.ExecOptions{User: "root", WorkingDir: "/tmp", Env: []string{"X=from env"}, AttachStdout: true, AttachStderr: true,
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
	s, _ := kubeSandbox(t)
	ctx := context.Background()
	_, err := s.Checkpoint(ctx, "x", 0)
	if !errors.Is(err, errNoCheckpoints) || !kubetest.NotImplemented(err) || !strings.HasPrefix(err.Error(), "checkpoints are not supported on a Kubernetes engine") {
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
	if id, _ := s.files.transferTarget(ctx); id != "" {
		t.Fatalf("a transfer container %q on a Kubernetes engine", id)
	}
}

// TestKubeSandboxExec is the whole sandbox on the engine: it needs the engine's
// containers (ContainerCreate and the rest), and skips until they are there.
func TestKubeSandboxExec(t *testing.T) {
	kc, err := kube.New(kube.Config{Name: "test", Kubeconfig: kubetest.Kubeconfig(t), Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Image = kubetest.Image()
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
	if _, err := kc.InspectBox(ctx, cfg.Container); kubetest.NotImplemented(err) {
		t.Skip("the Kubernetes engine has no containers yet (ContainerInspect: not implemented)")
	}
	defer func() {
		bg := context.Background()
		_ = kc.RemoveBox(bg, cfg.Container)
		_ = kc.RemoveVolume(bg, cfg.Volume, true)
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
