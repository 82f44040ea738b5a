package mcpsandbox

import (
	"runtime"
	"testing"

	"github.com/docker/docker/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestToolBoxCPUs: until the engine has been asked, a local engine's CPU count is this
// machine's, and a remote engine's is unknown, so cpus is stated as set.
func TestToolBoxCPUs(t *testing.T) {
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := sandbox.DefaultConfig()
	cfg.CPUs = 1000
	sb, err := sandbox.New(cli, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]float64{
		"unix:///var/run/docker.sock": float64(runtime.NumCPU()),
		"tcp://10.0.0.7:2376":         1000,
	} {
		if got := (toolBox{Sandbox: sb, e: fleet.NewEntry(fleet.EntryOptions{Sandbox: sb, Engine: fleet.Engine{Host: host}})}).CPUs(); got != want {
			t.Errorf("engine %s: CPUs() = %v, want %v", host, got, want)
		}
	}
}
