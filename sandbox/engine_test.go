package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestEngineDown: the errors of an engine that does not answer are told apart from
// the sandbox's own.
func TestEngineDown(t *testing.T) {
	cli, err := client.NewClientWithOpts(client.WithHost("unix:///nonexistent/docker.sock"), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, pingErr := cli.Ping(ctx)
	_, runnerErr := (&scriptOutput{}).header()
	for _, tc := range []struct {
		err  error
		down bool
	}{
		{pingErr, true},
		{fmt.Errorf("running the command: %w", pingErr), true},
		{fmt.Errorf("inspecting: %v", pingErr), true},
		{&net.OpError{Op: "dial", Net: "unix", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("reading output: %w", &net.OpError{Op: "read", Net: "unix", Err: syscall.ECONNRESET}), true},
		{runnerErr, true},
		{errors.New("cannot connect to the Docker daemon. Is 'docker daemon' running on this host?: dial unix /var/run/docker.sock: connect: no such file or directory"), true},
		{nil, false},
		{boxapi.ErrNotFound, false},
		{boxapi.ErrImageMissing, false},
		{errors.New("the job runner failed in the sandbox: bash: /bin/sh: not found"), false},
		{context.DeadlineExceeded, false},
	} {
		if got := EngineDown(tc.err); got != tc.down {
			t.Errorf("EngineDown(%v) = %v, want %v", tc.err, got, tc.down)
		}
	}
}
