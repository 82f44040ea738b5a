package sandbox

import (
	"context"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// Count is how many sandbox containers, running or stopped, an engine holds.
func Count(ctx context.Context, cli client.APIClient) (int, error) {
	list, err := cli.ContainerList(ctx, container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", labelVolume)),
	})
	return len(list), err
}

// Exists reports whether an engine has a container named name.
func Exists(ctx context.Context, cli client.APIClient, name string) (bool, error) {
	_, err := cli.ContainerInspect(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
