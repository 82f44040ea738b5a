package sandbox

import (
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// maxEngineConnsPer100 bounds the TCP connections 100 Exec calls may open to the
// engine: through the agent, whose channel is open already, none (one per call on the
// fallback: 101 measured).
const maxEngineConnsPer100 = 2

// TestExecConnectionsOverTCP runs 100 commands in a sandbox on an engine reached over
// TCP (DOCKER_HOST=tcp://...), through a proxy that counts the connections the
// engine sees.
func TestExecConnectionsOverTCP(t *testing.T) {
	eng := testengine.SecondEngine(t)
	addr, count := testenv.CountingProxy(t, eng.Addr())
	// As the project makes its clients (newDockerClient in the root package).
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithHost("tcp://"+addr), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	sb := newTestSandbox(t, Docker(cli), testConfig(t)) // network none: the engine has no bridge
	mustExec(t, sb, "true", boxapi.ExecOptions{})       // creates the container
	before, start := count(), time.Now()
	for i := range 100 {
		if res := mustExec(t, sb, "true", boxapi.ExecOptions{}); res.ExitCode != 0 || res.Running {
			t.Fatalf("call %d: exit %d, running %v, stderr %q", i, res.ExitCode, res.Running, strings.TrimSpace(res.Stderr))
		}
	}
	n := count() - before
	t.Logf("100 calls opened %d connections to the engine (in %v; %d with the container's creation)",
		n, time.Since(start).Round(time.Millisecond), count())
	if n > maxEngineConnsPer100 && !sb.cfg.NoAgent {
		t.Errorf("100 calls opened %d connections to the engine, more than %d", n, maxEngineConnsPer100)
	}
}
