// Package testengine holds the engines the tests of this module run against: the
// local Docker engine and the test image, a client that tells the two test tiers
// apart, a second engine on TCP loopback ([SecondEngine]), gVisor, and the test
// Kubernetes cluster. Only tests import it.
//
// The tiers: under -short, the tier that needs no engine, a test that needs Docker is
// skipped when no engine answers; in a full run it fails, so a full run never passes
// by skipping.
package testengine

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// Image is the image tests run their sandboxes from: $SANDBOX_TEST_IMAGE, or the
// small busybox+bash image that containers/build-test-image.sh builds.
func Image() string {
	if img := os.Getenv("SANDBOX_TEST_IMAGE"); img != "" {
		return img
	}
	return "code-sandbox-test:latest"
}

// DockerClient returns a client for the local engine (configured from the
// environment, as the docker CLI is), closed when the test ends. Under -short it
// skips the test (go test -short stays free of Docker, engine or not); otherwise a
// missing engine or [Image] fails it.
func DockerClient(tb testing.TB) *client.Client {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: needs a Docker engine")
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		tb.Fatalf("creating Docker client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		cli.Close()
		tb.Fatalf("no Docker engine answers (%v): run scripts/docker-up.sh, or make test, which starts one", err)
	}
	tb.Cleanup(func() { cli.Close() })
	if _, err := cli.ImageInspect(ctx, Image()); err != nil {
		tb.Fatalf("test image %s is missing (%v): run containers/build-test-image.sh", Image(), err)
	}
	return cli
}
