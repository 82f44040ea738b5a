package sandbox

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

func inspect(t *testing.T, sb *Sandbox) container.InspectResponse {
	t.Helper()
	info, err := dockerClient(t).ContainerInspect(context.Background(), sb.cfg.Container)
	if err != nil {
		t.Fatalf("inspecting container: %v", err)
	}
	return info
}

func TestEnsureCreatesIsolatedContainer(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	sb := newTestSandbox(t, cli, cfg)
	if err := sb.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	info := inspect(t, sb)
	hc := info.HostConfig
	if !info.State.Running {
		t.Errorf("not running: %+v", info.State)
	}
	if hc.Privileged || len(hc.Binds) != 0 || hc.NetworkMode != "none" {
		t.Errorf("privileged %v binds %v network %q", hc.Privileged, hc.Binds, hc.NetworkMode)
	}
	if len(info.Mounts) != 1 || info.Mounts[0].Name != cfg.Volume || info.Mounts[0].Destination != boxapi.WorkDir {
		t.Errorf("mounts %+v", info.Mounts)
	}
	if hc.Memory != cfg.Memory || hc.MemorySwap != cfg.Memory || hc.NanoCPUs != 1e9 || hc.PidsLimit == nil || *hc.PidsLimit != cfg.PidsLimit {
		t.Errorf("limits memory %d swap %d cpus %d pids %v", hc.Memory, hc.MemorySwap, hc.NanoCPUs, hc.PidsLimit)
	}
	if hc.RestartPolicy.Name != container.RestartPolicyUnlessStopped {
		t.Errorf("restart policy %q", hc.RestartPolicy.Name)
	}
	if info.Config.Labels[labelManaged] != "true" || info.Config.WorkingDir != boxapi.WorkDir {
		t.Errorf("labels %v workdir %q", info.Config.Labels, info.Config.WorkingDir)
	}
	// No Docker socket reachable from inside.
	res := mustExec(t, sb, "ls /var/run/docker.sock /run/docker.sock 2>&1; true", boxapi.ExecOptions{})
	if strings.Contains(res.Stdout, "docker.sock\n") && !strings.Contains(res.Stdout, "No such file") {
		t.Errorf("docker socket visible: %q", res.Stdout)
	}
}

func TestEnsureConcurrentCallersShareOneCreate(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- sb.Ensure(context.Background()) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// A recent success is trusted: Ensure must now be answered without Docker.
	start := time.Now()
	for i := 0; i < 1000; i++ {
		if err := sb.Ensure(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("1000 cached Ensure calls took %v", d)
	}
}

func TestEnsureRepairsContainer(t *testing.T) {
	cli := dockerClient(t)
	ctx := context.Background()
	sb := newTestSandbox(t, cli, testConfig(t))
	mustExec(t, sb, "echo precious > /sandbox/data.txt", boxapi.ExecOptions{})
	firstID := inspect(t, sb).ID
	check := func(t *testing.T) {
		t.Helper()
		res := mustExec(t, sb, "cat /sandbox/data.txt", boxapi.ExecOptions{})
		if res.Stdout != "precious\n" || res.ExitCode != 0 {
			t.Fatalf("data lost: %+v", res)
		}
	}

	t.Run("killed", func(t *testing.T) {
		if err := cli.ContainerKill(ctx, sb.cfg.Container, "KILL"); err != nil {
			t.Fatal(err)
		}
		check(t)
		if id := inspect(t, sb).ID; id != firstID {
			t.Errorf("container recreated after kill: %s != %s", id, firstID)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		timeout := 1
		if err := cli.ContainerStop(ctx, sb.cfg.Container, container.StopOptions{Timeout: &timeout}); err != nil {
			t.Fatal(err)
		}
		sb.life.invalidate()
		if err := sb.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		info := inspect(t, sb)
		if info.ID != firstID || !info.State.Running {
			t.Errorf("stopped container not restarted in place: id %s running %v", info.ID, info.State.Running)
		}
		check(t)
	})
	t.Run("removed", func(t *testing.T) {
		if err := cli.ContainerRemove(ctx, sb.cfg.Container, container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		// The cached state still says "running": Exec must notice and recreate.
		check(t)
		if id := inspect(t, sb).ID; id == firstID {
			t.Errorf("container was not recreated")
		}
	})
}

func TestEnsureAppliesLimitsLive(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	sb := newTestSandbox(t, cli, cfg)
	if err := sb.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := inspect(t, sb).ID
	for _, mem := range []int64{1 << 30, 256 << 20} { // raise, then lower below the start
		cfg.Memory = mem
		cfg.CPUs = 0.5
		cfg.PidsLimit = 300
		sb2, err := New(cli, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := sb2.Ensure(context.Background()); err != nil {
			t.Fatalf("memory %d: %v", mem, err)
		}
		info := inspect(t, sb2)
		hc := info.HostConfig
		if info.ID != id || hc.Memory != mem || hc.MemorySwap != mem || hc.NanoCPUs != 5e8 || *hc.PidsLimit != 300 {
			t.Errorf("after update: id %s memory %d swap %d cpus %d pids %d", info.ID, hc.Memory, hc.MemorySwap, hc.NanoCPUs, *hc.PidsLimit)
		}
		res := mustExec(t, sb2, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max", boxapi.ExecOptions{})
		if strings.TrimSpace(res.Stdout) != strconv.FormatInt(mem, 10) {
			t.Errorf("cgroup memory limit %q, want %d", res.Stdout, mem)
		}
	}
}

func TestEnsureImageChecks(t *testing.T) {
	cli := dockerClient(t)
	ctx := context.Background()

	t.Run("missing image", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.Image = "mcp-sandbox-no-such-image:" + testenv.RandomHex(4)
		sb := newTestSandbox(t, cli, cfg)
		err := sb.Ensure(ctx)
		if !errors.Is(err, boxapi.ErrImageMissing) || !strings.Contains(err.Error(), "build") {
			t.Fatalf("got %v", err)
		}
		if _, err := sb.Exec(ctx, "true", boxapi.ExecOptions{}); !errors.Is(err, boxapi.ErrImageMissing) {
			t.Fatalf("Exec: got %v", err)
		}
	})
	t.Run("changed image warns", func(t *testing.T) {
		cfg := testConfig(t)
		sb := newTestSandbox(t, cli, cfg)
		if err := sb.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		id := inspect(t, sb).ID
		// A really different image: the container's filesystem committed under a new tag.
		other := "mcp-sandbox-test-other:" + testenv.RandomHex(4)
		if _, err := cli.ContainerCommit(ctx, cfg.Container, container.CommitOptions{Reference: other}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.ImageRemove(context.Background(), other, image.RemoveOptions{Force: true}) })
		core, logs := observer.New(zapcore.WarnLevel)
		cfg.Image = other
		sb2, err := New(cli, cfg, zap.New(core))
		if err != nil {
			t.Fatal(err)
		}
		if err := sb2.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if inspect(t, sb2).ID != id {
			t.Errorf("container was recreated for a changed image")
		}
		var buf bytes.Buffer
		for _, e := range logs.All() {
			buf.WriteString(e.Message)
			for _, f := range e.Context {
				buf.WriteString(" " + f.Key + "=" + f.String)
			}
		}
		if !strings.Contains(buf.String(), "another image") || !strings.Contains(buf.String(), "docker rm -f "+cfg.Container) {
			t.Errorf("no recreate hint in warnings: %q", buf.String())
		}
	})
}

// TestUpkeepLeavesARemovedContainerAlone: background work (the next ranged reader, a
// cleanup pass) finds the container removed on purpose and leaves it so; the next
// command brings it back.
func TestUpkeepLeavesARemovedContainerAlone(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	cfg.FileTTL, cfg.CleanupInterval = time.Hour, time.Hour
	sb := newTestSandbox(t, cli, cfg)
	ctx := context.Background()
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	if err := cli.ContainerRemove(ctx, cfg.Container, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	sb.runner.fillWarm()
	sb.life.cleanupPass(ctx, nil)
	if _, err := cli.ContainerInspect(ctx, cfg.Container); err == nil {
		t.Fatal("upkeep brought back the container that was removed")
	}
	if res := mustExec(t, sb, "echo back", boxapi.ExecOptions{}); res.Stdout != "back\n" {
		t.Fatalf("the next command: %+v", res)
	}
}

// TestCancelledCommandLeavesAGoneContainerAlone: a command given up while its container
// went away is not killed by recreating the container (the container here is renamed, so
// the command's stream stays open while the name is free).
func TestCancelledCommandLeavesAGoneContainerAlone(t *testing.T) {
	cli, cfg, sb := runningTestSandbox(t)
	bg := context.Background()
	ctx, cancel := context.WithCancel(bg)
	wait := execAside(ctx, t, sb, "sleep 30")
	time.Sleep(time.Second)
	moved := cfg.Container + "-moved"
	if err := cli.ContainerRename(bg, cfg.Container, moved); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.ContainerRemove(bg, moved, container.RemoveOptions{Force: true}) })
	cancel()
	wait()
	if _, err := cli.ContainerInspect(bg, cfg.Container); err == nil {
		t.Fatal("cancelling the command brought a container back under the sandbox's name")
	}
}

// runningTestSandbox is a test sandbox whose container runs.
func runningTestSandbox(t *testing.T) (dockerEngine, Config, *Sandbox) {
	t.Helper()
	cli, cfg := dockerClient(t), testConfig(t)
	sb := newTestSandbox(t, cli, cfg)
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	return cli, cfg, sb
}

// execAside runs command in the background; wait waits up to a minute for it to return.
func execAside(ctx context.Context, t *testing.T, sb *Sandbox, command string) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = sb.Exec(ctx, command, boxapi.ExecOptions{})
	}()
	return func() {
		t.Helper()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("%q did not return", command)
		}
	}
}

// TestClosedSandboxLeavesARemovedContainerAlone: once the Sandbox is closed (its
// server configuration ended), a command still under way, a new call and a start
// after an idle stop find the removed container gone and leave it so.
func TestClosedSandboxLeavesARemovedContainerAlone(t *testing.T) {
	cli, cfg, sb := runningTestSandbox(t)
	ctx := context.Background()
	wait := execAside(ctx, t, sb, "sleep 3")
	time.Sleep(time.Second)
	sb.Close()
	if err := cli.ContainerRemove(ctx, cfg.Container, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	wait()
	if _, err := cli.ContainerInspect(ctx, cfg.Container); err == nil {
		t.Fatal("the command under way brought back the container that was removed")
	}
	if _, err := sb.Exec(ctx, "true", boxapi.ExecOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("a command after Close: %v, want ErrClosed", err)
	}
	if err := sb.Start(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
	if _, err := cli.ContainerInspect(ctx, cfg.Container); err == nil {
		t.Fatal("the closed sandbox brought back the container that was removed")
	}
}

// TestNewContainerHasGitIdentity: a new container gets a git identity in /etc/gitconfig
// (system level, so the person's own config beats it), added to a config the image
// ships without one, and never in place of an identity the image already sets.
func TestNewContainerHasGitIdentity(t *testing.T) {
	cli := dockerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ours := "[user]\n\tname = " + gitName + "\n\temail = " + gitEmail + "\n"
	for _, tc := range []struct{ name, file, want string }{
		{"none", "", ours},
		{"other-sections", "[core]\n\teditor = vi\n", "[core]\n\teditor = vi\n" + ours},
		{"own-identity", "[User]\n\tname = Someone\n", "[User]\n\tname = Someone\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			if tc.file != "" {
				cfg.Image = "mcp-sandbox-gitconfig-" + testenv.RandomHex(4) + ":latest"
				recipe := "FROM " + testImage() + "\nRUN printf '" + strings.ReplaceAll(strings.ReplaceAll(tc.file, "\t", `\t`), "\n", `\n`) + "' > /etc/gitconfig\n"
				if err := BuildImage(ctx, cli, cfg.Image, []byte(recipe), nil); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_, _ = cli.ImageRemove(context.Background(), cfg.Image, image.RemoveOptions{Force: true, PruneChildren: true})
				})
			}
			sb := newTestSandbox(t, cli, cfg)
			res := mustExec(t, sb, "cat /etc/gitconfig", boxapi.ExecOptions{})
			if res.Stdout != tc.want {
				t.Errorf("/etc/gitconfig is %q, want %q", res.Stdout, tc.want)
			}
		})
	}
}

// TestEnsureTrustsAnOpenAgent: past readyTrust, a command on a sandbox whose agent's
// channel is open does not ask the engine again whether the container runs (the
// agent is one of its processes), until readyTrustOpen; a container killed underneath
// ends the channel, and the next command finds that out and runs.
func TestEnsureTrustsAnOpenAgent(t *testing.T) {
	t.Parallel()
	sb, _ := agentTestSandbox(t, testConfig(t))
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	if !sb.link.agentOpen() {
		t.Fatal("no agent channel after a command")
	}
	seenAgo := func(d time.Duration) time.Time {
		sb.mu.Lock()
		defer sb.mu.Unlock()
		if d > 0 {
			sb.life.readyAt = time.Now().Add(-d)
		}
		return sb.life.readyAt
	}
	at := seenAgo(time.Minute)
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	if got := seenAgo(0); !got.Equal(at) {
		t.Errorf("seen running a minute ago with the agent's channel open, the command asked the engine again (at %v)", got)
	}
	at = seenAgo(readyTrustOpen + time.Second)
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	if got := seenAgo(0); !got.After(at) {
		t.Errorf("seen running %v ago, the command did not ask the engine", readyTrustOpen)
	}

	seenAgo(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.cli.KillBox(ctx, sb.cfg.Container); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); sb.link.agentOpen(); {
		if time.Now().After(deadline) {
			t.Fatal("the agent's channel is still open 20s after its container was killed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := mustExec(t, sb, "echo back", boxapi.ExecOptions{}); r.Stdout != "back\n" || r.ExitCode != 0 {
		t.Errorf("after the container was killed: %+v", r)
	}
}
