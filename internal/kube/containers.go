package kube

import (
	"context"
	"io"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func (c *Client) ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error) {
	return container.CreateResponse{}, notImplemented("ContainerCreate")
}

func (c *Client) ContainerInspect(ctx context.Context, name string) (container.InspectResponse, error) {
	return container.InspectResponse{}, notImplemented("ContainerInspect")
}

func (c *Client) ContainerInspectWithRaw(ctx context.Context, name string, getSize bool) (container.InspectResponse, []byte, error) {
	return container.InspectResponse{}, nil, notImplemented("ContainerInspectWithRaw")
}

func (c *Client) ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error) {
	return nil, notImplemented("ContainerList")
}

func (c *Client) ContainerStart(ctx context.Context, name string, options container.StartOptions) error {
	return notImplemented("ContainerStart")
}

func (c *Client) ContainerStop(ctx context.Context, name string, options container.StopOptions) error {
	return notImplemented("ContainerStop")
}

func (c *Client) ContainerRestart(ctx context.Context, name string, options container.StopOptions) error {
	return notImplemented("ContainerRestart")
}

func (c *Client) ContainerKill(ctx context.Context, name, signal string) error {
	return notImplemented("ContainerKill")
}

func (c *Client) ContainerRemove(ctx context.Context, name string, options container.RemoveOptions) error {
	return notImplemented("ContainerRemove")
}

func (c *Client) ContainerRename(ctx context.Context, name, newContainerName string) error {
	return notImplemented("ContainerRename")
}

func (c *Client) ContainerPause(ctx context.Context, name string) error {
	return notImplemented("ContainerPause")
}

func (c *Client) ContainerUnpause(ctx context.Context, name string) error {
	return notImplemented("ContainerUnpause")
}

func (c *Client) ContainerUpdate(ctx context.Context, name string, updateConfig container.UpdateConfig) (container.UpdateResponse, error) {
	return container.UpdateResponse{}, notImplemented("ContainerUpdate")
}

func (c *Client) ContainerWait(ctx context.Context, name string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error) {
	errc := make(chan error, 1)
	errc <- notImplemented("ContainerWait")
	return nil, errc
}

func (c *Client) ContainerLogs(ctx context.Context, name string, options container.LogsOptions) (io.ReadCloser, error) {
	return nil, notImplemented("ContainerLogs")
}

func (c *Client) ContainerStatsOneShot(ctx context.Context, name string) (container.StatsResponseReader, error) {
	return container.StatsResponseReader{}, notImplemented("ContainerStatsOneShot")
}

func (c *Client) ContainerCommit(ctx context.Context, name string, options container.CommitOptions) (container.CommitResponse, error) {
	return container.CommitResponse{}, notImplemented("ContainerCommit")
}
