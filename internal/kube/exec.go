package kube

import (
	"context"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
)

// execTable holds the exec sessions ContainerExecCreate made, until they end.
type execTable struct{}

func (c *Client) ContainerExecCreate(ctx context.Context, name string, options container.ExecOptions) (container.ExecCreateResponse, error) {
	return container.ExecCreateResponse{}, notImplemented("ContainerExecCreate")
}

func (c *Client) ContainerExecAttach(ctx context.Context, execID string, options container.ExecAttachOptions) (types.HijackedResponse, error) {
	return types.HijackedResponse{}, notImplemented("ContainerExecAttach")
}

func (c *Client) ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error) {
	return container.ExecInspect{}, notImplemented("ContainerExecInspect")
}
