package kube

import (
	"context"
	"io"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
)

func (c *Client) ImageBuild(ctx context.Context, buildContext io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	return build.ImageBuildResponse{}, notImplemented("ImageBuild")
}

func (c *Client) ImageInspect(ctx context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	return image.InspectResponse{}, notImplemented("ImageInspect")
}

func (c *Client) ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error) {
	return nil, notImplemented("ImageList")
}

func (c *Client) ImageRemove(ctx context.Context, ref string, options image.RemoveOptions) ([]image.DeleteResponse, error) {
	return nil, notImplemented("ImageRemove")
}

func (c *Client) NetworkCreate(ctx context.Context, name string, options network.CreateOptions) (network.CreateResponse, error) {
	return network.CreateResponse{}, notImplemented("NetworkCreate")
}

func (c *Client) NetworkInspect(ctx context.Context, netName string, options network.InspectOptions) (network.Inspect, error) {
	return network.Inspect{}, notImplemented("NetworkInspect")
}

func (c *Client) NetworkRemove(ctx context.Context, netName string) error {
	return notImplemented("NetworkRemove")
}

func (c *Client) VolumeCreate(ctx context.Context, options volume.CreateOptions) (volume.Volume, error) {
	return volume.Volume{}, notImplemented("VolumeCreate")
}

func (c *Client) VolumeInspect(ctx context.Context, volumeID string) (volume.Volume, error) {
	return volume.Volume{}, notImplemented("VolumeInspect")
}

func (c *Client) VolumeList(ctx context.Context, options volume.ListOptions) (volume.ListResponse, error) {
	return volume.ListResponse{}, notImplemented("VolumeList")
}

func (c *Client) VolumeRemove(ctx context.Context, volumeID string, force bool) error {
	return notImplemented("VolumeRemove")
}
