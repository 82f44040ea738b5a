package testengine

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// runTrue runs `true` in a new container of the test image with network none on cli,
// and removes the container.
func runTrue(t *testing.T, cli *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: Image(), Cmd: []string{"true"}},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "engine-test-"+testenv.RandomHex(4))
	if err != nil {
		t.Fatalf("creating a container: %v", err)
	}
	defer cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) //nolint:errcheck
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatalf("starting a container: %v", err)
	}
	okC, errC := cli.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
	select {
	case r := <-okC:
		if r.StatusCode != 0 {
			t.Fatalf("true exited %d", r.StatusCode)
		}
	case err := <-errC:
		t.Fatalf("waiting for a container: %v", err)
	}
}

// TestSecondEngine starts the second engine, runs a container on it, and stops and
// starts it again: the local engine and its containerd go on answering and running
// containers, and the second engine keeps its image.
func TestSecondEngine(t *testing.T) {
	e := SecondEngine(t)
	t.Logf("second engine answered %v after its start", e.Startup().Round(time.Millisecond))
	local, cli := DockerClient(t), e.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	info, err := cli.Info(ctx)
	if err != nil || info.DockerRootDir == "" {
		t.Fatalf("second engine info: %v", err)
	}
	localInfo, err := local.Info(ctx)
	if err != nil || localInfo.ID == info.ID || localInfo.DockerRootDir == info.DockerRootDir {
		t.Fatalf("the second engine is not a different engine: %v %q %q", err, info.ID, info.DockerRootDir)
	}
	nets, err := cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Its default bridge is an interface of its own, and the main engine's docker0
	// (which a dockerd without a bridge would delete) is still there.
	for _, n := range nets {
		if n.Name == "bridge" && n.Options["com.docker.network.bridge.name"] != engineBridge {
			t.Errorf("the second engine's bridge is %q, not %s", n.Options["com.docker.network.bridge.name"], engineBridge)
		}
	}
	if ln, err := local.NetworkInspect(ctx, "bridge", network.InspectOptions{}); err == nil && ln.Options["com.docker.network.bridge.name"] == "docker0" {
		if _, err := net.InterfaceByName("docker0"); err != nil {
			t.Errorf("the main engine's docker0 is gone: %v", err)
		}
	}
	runTrue(t, cli)

	localPid, _ := os.ReadFile("/var/run/docker.pid")
	begin := time.Now()
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("second engine stopped in %v", time.Since(begin).Round(time.Millisecond))
	if _, err := cli.Ping(ctx); err == nil {
		t.Fatal("the second engine answers after Stop")
	}
	if _, err := local.Ping(ctx); err != nil {
		t.Fatalf("the local engine after the second one stopped: %v", err)
	}
	if pid, _ := os.ReadFile("/var/run/docker.pid"); string(pid) != string(localPid) {
		t.Fatalf("the local dockerd changed from %q to %q", localPid, pid)
	}
	runTrue(t, local) // its containerd runs

	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("second engine answered %v after its restart", e.Startup().Round(time.Millisecond))
	if _, err := cli.ImageInspect(ctx, Image()); err != nil {
		t.Fatalf("the image after a restart: %v", err)
	}
	runTrue(t, cli)
}

// TestSecondEngineReapedAtExit starts an engine in a test binary of its own that then
// exits without stopping it: the engine's dockerd ends and its directory goes.
func TestSecondEngineReapedAtExit(t *testing.T) {
	if os.Getenv("TESTENV_ENGINE_CHILD") == "1" {
		e := SecondEngine(t)
		pid, _ := os.ReadFile(e.path("docker.pid"))
		t.Logf("engine %s %s", e.dir, pid)
		return
	}
	SecondEngine(t) // the skips
	child := exec.Command(os.Args[0], "-test.run", "^TestSecondEngineReapedAtExit$", "-test.v", "-test.timeout", "2m")
	child.Env = append(os.Environ(), "TESTENV_ENGINE_CHILD=1")
	out, err := child.CombinedOutput()
	if err != nil {
		t.Fatalf("child test binary: %v\n%s", err, out)
	}
	_, rest, _ := strings.Cut(string(out), "engine ")
	f := strings.Fields(rest)
	if len(f) < 2 || !strings.HasPrefix(f[0], enginesDir) {
		t.Fatalf("child test binary printed no engine:\n%s", out)
	}
	dir, pid := f[0], f[1]
	testenv.WaitFor(t, 60*time.Second, "the engine's directory to go", func() bool {
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	})
	if cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline")); strings.Contains(string(cmdline), dir) {
		t.Fatalf("dockerd %s runs on: %q", pid, cmdline)
	}
}

func TestSweepEngines(t *testing.T) {
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(enginesDir, strconv.Itoa(ended.Process.Pid))
	kept := filepath.Join(enginesDir, "1") // init runs
	if _, err := os.Stat(kept); err == nil {
		t.Skip(kept + " exists")
	}
	for _, d := range []string{gone, kept} {
		if err := os.MkdirAll(filepath.Join(d, "data", "x"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	defer os.RemoveAll(kept)
	sweepEngines()
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("the directory of an ended test binary is left: %v", err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("the directory of a running one went: %v", err)
	}
}
