package sandbox

import (
	"context"
	"io"

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
