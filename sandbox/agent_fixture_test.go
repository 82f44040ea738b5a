package sandbox

import (
	"bytes"
	"context"
	"path"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// noexecContainer starts a container of the test image, without network, whose root
// filesystem is read-only and whose only writable places are noexec tmpfs mounts at
// /tmp and at agentDir's parent: the archive API cannot copy into it at all, and a file
// written there by a command cannot be run. It returns the container's name and removes
// it when the test ends.
func noexecContainer(t *testing.T) string {
	t.Helper()
	cli := dockerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "mcp-sandbox-test-noexec-" + testenv.RandomHex(4)
	_, err := cli.ContainerCreate(ctx,
		&container.Config{Image: testImage(), User: "root", Entrypoint: []string{"bash", "-c", keepAlive}},
		&container.HostConfig{
			NetworkMode:    "none",
			ReadonlyRootfs: true,
			Tmpfs: map[string]string{
				"/tmp":             "rw,noexec,nosuid,size=64m",
				path.Dir(agentDir): "rw,noexec,nosuid,size=64m",
			},
		}, nil, nil, name)
	if err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true}); err != nil {
			t.Errorf("removing %s: %v", name, err)
		}
	})
	if err := cli.ContainerStart(ctx, name, container.StartOptions{}); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	return name
}

// containerExec runs cmd in the container straight through the engine (no Sandbox)
// and returns its stdout and stderr together and its exit code.
func containerExec(t *testing.T, cli API, name string, cmd ...string) (string, int) {
	d := dockerOf(cli)
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ex, err := d.ContainerExecCreate(ctx, name, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, name, err)
	}
	hj, err := d.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, name, err)
	}
	defer hj.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, hj.Reader); err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, name, err)
	}
	st, err := d.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, name, err)
	}
	return out.String(), st.ExitCode
}

// TestNoexecContainer checks the fixture: nothing written can run, and the root
// filesystem takes no writes.
func TestNoexecContainer(t *testing.T) {
	name := noexecContainer(t)
	cli := dockerClient(t)
	for _, dir := range []string{"/tmp", path.Dir(agentDir)} {
		out, code := containerExec(t, cli, name, "sh", "-c", "cp /bin/busybox "+dir+"/x && "+dir+"/x true")
		if code != 126 {
			t.Errorf("running a copy in %s: exit %d (%q), want 126 (not executable)", dir, code, out)
		}
	}
	if out, code := containerExec(t, cli, name, "touch", "/x"); code == 0 {
		t.Errorf("touch /x succeeded (%q): the root filesystem is writable", out)
	}
}
