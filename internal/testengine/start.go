package testengine

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// BareStart is how long the engine of cli takes to start a bare container of [Image]
// (network none) now: the baseline a test of starting a sandbox compares with, since a
// loaded machine slows Docker itself down.
func BareStart(tb testing.TB, cli client.APIClient) time.Duration {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: Image(), Entrypoint: []string{"sleep", "60"}},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		tb.Fatalf("creating a bare container: %v", err)
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true})
	begin := time.Now()
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		tb.Fatalf("starting a bare container: %v", err)
	}
	return time.Since(begin)
}

// StartBound is the longest starting a stopped sandbox may take: limit, or, on an
// engine that itself takes over a second to start a bare container (bare, from
// [BareStart]), at most slack more than that.
func StartBound(limit, bare, slack time.Duration) time.Duration {
	if bare < time.Second {
		return limit
	}
	return max(limit, bare+slack)
}
