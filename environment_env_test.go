package mcpsandbox

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestCommandsRunPythonUnbuffered: commands get PYTHONUNBUFFERED=1, so Python's output
// shows while it runs; an image that sets PYTHONUNBUFFERED itself keeps its value.
func TestCommandsRunPythonUnbuffered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli := dockerClient(t)
	own := "mcp-sandbox-pyenv-" + randomHex(4) + ":latest"
	if err := sandbox.BuildImage(ctx, cli, own, []byte("FROM "+testImage()+"\nENV PYTHONUNBUFFERED=0\n"), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), own, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	for _, tc := range []struct{ image, want string }{{"", "1\n"}, {own, "0\n"}} {
		s := startSite(t, siteOptions{image: tc.image})
		res := call(ctx, t, s.client(ctx), "execute", map[string]any{"command": "echo $PYTHONUNBUFFERED"})
		if got := structured(t, res)["stdout"]; got != tc.want {
			t.Errorf("image %q: PYTHONUNBUFFERED is %q, want %q", tc.image, got, tc.want)
		}
	}
}
