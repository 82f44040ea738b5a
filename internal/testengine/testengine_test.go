package testengine

import "testing"

func TestDockerClientSkipsUnderShort(t *testing.T) {
	if !testing.Short() {
		t.Skip("checks the -short tier; a full run fails without an engine instead")
	}
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	skipped := false
	t.Run("no engine", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		DockerClient(t)
		t.Error("DockerClient returned without an engine")
	})
	if !skipped {
		t.Error("DockerClient did not skip under -short without an engine")
	}
}
