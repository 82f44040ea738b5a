package integration

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestEngineRestart restarts the Docker engine under a running Caddy: the next tool
// call finds the container (brought back by its restart policy, or started again)
// with /sandbox intact. It stops dockerd, so `make test` runs it on its own after the
// other packages (MCP_SANDBOX_RESTART_DOCKER=1); elsewhere it is skipped.
func TestEngineRestart(t *testing.T) {
	if os.Getenv("MCP_SANDBOX_RESTART_DOCKER") != "1" {
		t.Skip("restarts the Docker engine: set MCP_SANDBOX_RESTART_DOCKER=1 (make test does, in a step of its own)")
	}
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo kept > /sandbox/before-restart.txt"})
	link := testsite.Structured(t, testsite.Call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/before-restart.txt"}))["url"].(string)

	if out, err := exec.Command("pkill", "-TERM", "-x", "dockerd").CombinedOutput(); err != nil {
		t.Fatalf("stopping dockerd: %v %s", err, out)
	}
	testenv.WaitFor(t, 60*time.Second, "dockerd to stop", func() bool {
		return exec.Command("pgrep", "-x", "dockerd").Run() != nil
	})
	// While the engine is down, a call fails with a clear error instead of hanging.
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"})
	if !res.IsError || !strings.Contains(testsite.ResultText(res), "Could not reach the sandbox (the Docker engine did not answer); try again") {
		t.Fatalf("call with the engine down: %v %q", res.IsError, testsite.ResultText(res))
	}
	if out, err := exec.Command("../scripts/docker-up.sh").CombinedOutput(); err != nil {
		t.Fatalf("starting dockerd again: %v %s", err, out)
	}

	res = testsite.Call(ctx, t, c, "execute", map[string]any{"command": "cat /sandbox/before-restart.txt"})
	if res.IsError || testsite.Structured(t, res)["stdout"] != "kept\n" {
		t.Fatalf("after the engine restart: %v %q", res.IsError, testsite.ResultText(res))
	}
	if body := httpGetBody(t, link); body != "kept\n" {
		t.Fatalf("download after the engine restart: %q", body)
	}
}
