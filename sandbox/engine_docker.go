package sandbox

import (
	"context"
	"io"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// Docker is the engine of the Docker client cli: Docker's own calls where API still
// names them, and the sandbox's terms (boxapi) where it speaks them, translated here
// and nowhere else.
func Docker(cli *client.Client) API { return dockerEngine{cli} }

// dockerEngine is a Docker client as an API. It keeps every method of the client (the
// optional ones the package asks for, such as the checkpoint calls, among them).
type dockerEngine struct{ *client.Client }

var _ API = dockerEngine{}

func (d dockerEngine) StatPath(ctx context.Context, box, path string) (boxapi.PathStat, error) {
	st, err := d.ContainerStatPath(ctx, box, path)
	return boxapi.PathStat(st), err
}

func (d dockerEngine) CopyOut(ctx context.Context, box, path string) (io.ReadCloser, boxapi.PathStat, error) {
	rc, st, err := d.CopyFromContainer(ctx, box, path)
	return rc, boxapi.PathStat(st), err
}

func (d dockerEngine) CopyIn(ctx context.Context, box, dir string, content io.Reader) error {
	return d.CopyToContainer(ctx, box, dir, content, container.CopyToContainerOptions{})
}

func (d dockerEngine) StartBox(ctx context.Context, box string) error {
	return d.ContainerStart(ctx, box, container.StartOptions{})
}

func (d dockerEngine) StopBox(ctx context.Context, box string, grace time.Duration) error {
	secs := graceSeconds(grace)
	return d.ContainerStop(ctx, box, container.StopOptions{Timeout: &secs})
}

func (d dockerEngine) RestartBox(ctx context.Context, box string, grace time.Duration) error {
	secs := graceSeconds(grace)
	return d.ContainerRestart(ctx, box, container.StopOptions{Timeout: &secs})
}

// graceSeconds is grace in Docker's whole seconds, rounded up.
func graceSeconds(grace time.Duration) int {
	return int((max(grace, 0) + time.Second - 1) / time.Second)
}

func (d dockerEngine) KillBox(ctx context.Context, box string) error {
	return d.ContainerKill(ctx, box, "KILL")
}

func (d dockerEngine) RemoveBox(ctx context.Context, box string) error {
	return d.ContainerRemove(ctx, box, container.RemoveOptions{Force: true})
}

func (d dockerEngine) RenameBox(ctx context.Context, box, to string) error {
	return d.ContainerRename(ctx, box, to)
}
