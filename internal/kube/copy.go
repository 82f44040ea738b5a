package kube

import (
	"context"
	"io"

	"github.com/docker/docker/api/types/container"
)

func (c *Client) ContainerStatPath(ctx context.Context, name, path string) (container.PathStat, error) {
	return container.PathStat{}, notImplemented("ContainerStatPath")
}

func (c *Client) CopyFromContainer(ctx context.Context, name, srcPath string) (io.ReadCloser, container.PathStat, error) {
	return nil, container.PathStat{}, notImplemented("CopyFromContainer")
}

func (c *Client) CopyToContainer(ctx context.Context, name, path string, content io.Reader, options container.CopyToContainerOptions) error {
	return notImplemented("CopyToContainer")
}
