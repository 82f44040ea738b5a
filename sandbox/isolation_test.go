package sandbox

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// wantIsolated checks the isolation settings of the running container, from Docker's
// view and from inside.
func wantIsolated(t *testing.T, sb *Sandbox) container.InspectResponse {
	t.Helper()
	info := inspect(t, sb)
	hc := info.HostConfig
	if !slices.ContainsFunc(hc.CapDrop, func(c string) bool { return strings.TrimPrefix(strings.ToUpper(c), "CAP_") == "NET_RAW" }) {
		t.Errorf("CapDrop %v lacks NET_RAW", hc.CapDrop)
	}
	if !slices.ContainsFunc(hc.SecurityOpt, func(o string) bool { return strings.HasPrefix(o, "no-new-privileges") }) {
		t.Errorf("SecurityOpt %v lacks no-new-privileges", hc.SecurityOpt)
	}
	// From inside: NoNewPrivs set, and CAP_NET_RAW (bit 13) absent from every set.
	res := mustExec(t, sb, "grep -E '^(NoNewPrivs|CapEff|CapBnd):' /proc/self/status", boxapi.ExecOptions{})
	if !strings.Contains(res.Stdout, "NoNewPrivs:\t1") {
		t.Errorf("inside, no_new_privs is not set:\n%s", res.Stdout)
	}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		if name, hex, ok := strings.Cut(line, ":\t"); ok && strings.HasPrefix(name, "Cap") {
			var v uint64
			for _, c := range hex {
				v = v<<4 | uint64(strings.IndexRune("0123456789abcdef", c))
			}
			if v&(1<<13) != 0 {
				t.Errorf("inside, %s %s still has CAP_NET_RAW", name, hex)
			}
		}
	}
	return info
}

// TestEnsureIsolation: the container drops NET_RAW and sets no-new-privileges, and ping
// still works through unprivileged ICMP sockets (the ping_group_range sysctl); a raw
// socket is refused.
func TestEnsureIsolation(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	if err := sb.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	info := wantIsolated(t, sb)
	if got := info.HostConfig.Sysctls["net.ipv4.ping_group_range"]; got != "0 2147483647" {
		t.Errorf("ping_group_range %q", got)
	}
	// The test image's busybox ping knows only raw sockets, so a small probe does what
	// iputils ping (the production image's) does without NET_RAW: an unprivileged ICMP
	// echo. Loopback only: the test container has no network.
	installProgram(t, sb, "./testdata/pingprobe", "/tmp/pingprobe")
	res := mustExec(t, sb, "/tmp/pingprobe", boxapi.ExecOptions{})
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "ping: ok") {
		t.Errorf("ping without NET_RAW: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "raw: operation not permitted") {
		t.Errorf("a raw socket was not refused:\n%s", res.Stdout)
	}
}

// TestEnsureCreatesNetwork: a named network that does not exist is created as a bridge
// with inter-container traffic off, and the container joins it. No traffic is sent.
func TestEnsureCreatesNetwork(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	cfg.NetworkMode = "mcp-sandbox-test-net-" + testenv.RandomHex(4)
	sb := newTestSandbox(t, cli, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = cli.ContainerRemove(ctx, cfg.Container, container.RemoveOptions{Force: true})
		if err := cli.NetworkRemove(ctx, cfg.NetworkMode); err != nil {
			t.Errorf("removing test network: %v", err)
		}
	})
	if err := sb.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	info := inspect(t, sb)
	if string(info.HostConfig.NetworkMode) != cfg.NetworkMode {
		t.Errorf("network mode %q", info.HostConfig.NetworkMode)
	}
	n, err := cli.NetworkInspect(context.Background(), cfg.NetworkMode, network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Driver != "bridge" || n.Options["com.docker.network.bridge.enable_icc"] != "false" || n.Labels[labelManaged] != "true" {
		t.Errorf("network driver %q options %v labels %v", n.Driver, n.Options, n.Labels)
	}
	if DefaultConfig().NetworkMode != DefaultNetwork || builtinNetwork(DefaultNetwork) {
		t.Errorf("the default network is not our own network")
	}
}

// TestEnsureUpgradesOldContainer: a container created without the current isolation (as
// earlier versions did) is recreated on the same volume: new container, isolated, and
// the files in /sandbox are still there.
func TestEnsureUpgradesOldContainer(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	sb := newTestSandbox(t, cli, cfg)
	ctx := context.Background()
	if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: cfg.Volume}); err != nil {
		t.Fatal(err)
	}
	old, err := cli.ContainerCreate(ctx,
		&container.Config{Image: cfg.Image, WorkingDir: boxapi.WorkDir, Entrypoint: []string{"bash", "-c", keepAlive},
			Labels: map[string]string{labelManaged: "true"}},
		&container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: cfg.Volume, Target: boxapi.WorkDir}},
			NetworkMode: "none", RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyUnlessStopped}},
		nil, nil, cfg.Container)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerStart(ctx, old.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if res := mustExec(t, sb, "echo kept > /sandbox/keep.txt && mkdir -p /sandbox/d && echo deep > /sandbox/d/f", boxapi.ExecOptions{}); res.ExitCode != 0 {
		t.Fatalf("writing: %+v", res)
	}
	sb.life.invalidate()
	if err := sb.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	info := wantIsolated(t, sb)
	if info.ID == old.ID {
		t.Fatal("the old container was kept")
	}
	if res := mustExec(t, sb, "cat /sandbox/keep.txt /sandbox/d/f", boxapi.ExecOptions{}); res.Stdout != "kept\ndeep\n" {
		t.Fatalf("/sandbox after the upgrade: %q %q", res.Stdout, res.Stderr)
	}
	// Once upgraded, Ensure leaves it alone.
	sb.life.invalidate()
	if err := sb.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if inspect(t, sb).ID != info.ID {
		t.Fatal("an up-to-date container was recreated")
	}
}
