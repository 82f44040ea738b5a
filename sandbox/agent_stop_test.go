package sandbox

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// A listener that listens again as soon as its channel ends, as the egress proxy's
// does, meets each Stop (then Start), Restart and Recreate: none sends the sandbox to
// the fallback, and after each it listens again at once. Before, the listener started
// an agent in the container being stopped, its failure ("is not running") was taken
// for an agent that cannot run, and the sandbox went without one for 5 minutes.
func TestStopsKeepAgent(t *testing.T) {
	sb, _ := agentTestSandbox(t, directConfig(t))
	ctx := context.Background()
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	const port = 3129
	quit, ended := make(chan struct{}), make(chan struct{})
	var listens atomic.Int64
	go func() {
		defer close(ended)
		for {
			stop, done, err := sb.ListenPort(Upkeep(ctx), port, func(c net.Conn) { c.Close() })
			if err == nil {
				listens.Add(1)
				select {
				case <-done:
					continue
				case <-quit:
					stop()
					return
				}
			}
			select {
			case <-quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(quit); <-ended })
	acts := []struct {
		name string
		do   func() error
	}{
		{"stop and start", func() error {
			if err := sb.Stop(ctx, "test"); err != nil {
				return err
			}
			return sb.Start(ctx)
		}},
		{"restart", func() error { return sb.Restart(ctx) }},
		{"recreate", func() error { return sb.Recreate(ctx) }},
	}
	for round := range 3 {
		for _, a := range acts {
			testenv.WaitFor(t, 10*time.Second, "the listener before "+a.name, func() bool { return sb.Listening(port) })
			n := listens.Load()
			if err := a.do(); err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			if running, why := sb.AgentStatus(); !running && why != "" {
				t.Fatalf("round %d, %s: the sandbox fell back: %s", round, a.name, why)
			}
			testenv.WaitFor(t, 5*time.Second, "the listener after "+a.name, func() bool { return sb.Listening(port) && listens.Load() > n })
		}
	}
}

// A start, restart or replacement of the container gives the agent a new try at
// once, whatever sent the sandbox to the fallback before.
func TestStartClearsFallback(t *testing.T) {
	sb, _ := agentTestSandbox(t, testConfig(t))
	ctx := context.Background()
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	for _, a := range []struct {
		name string
		do   func() error
	}{
		{"start", func() error {
			if err := sb.Stop(ctx, "test"); err != nil {
				return err
			}
			return sb.Start(ctx)
		}},
		{"restart", func() error { return sb.Restart(ctx) }},
		{"recreate", func() error { return sb.Recreate(ctx) }},
	} {
		sb.CloseAgent()
		sb.link.agentFailed("a reason of the test's")
		if running, why := sb.AgentStatus(); running || why == "" {
			t.Fatalf("not on the fallback: %v %q", running, why)
		}
		if err := a.do(); err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		mustExec(t, sb, "true", boxapi.ExecOptions{})
		if running, why := sb.AgentStatus(); !running {
			t.Fatalf("after %s, no agent: %s", a.name, why)
		}
	}
}

// A container whose pids are used up (a loop of sleeps, as a fork bomb) cannot start
// any exec: the engine answers 126 for the agent's in the read-only directory too. That
// is no reason to start a copy in the container's own filesystem, which root in the
// container could replace: the sandbox goes without its agent until the container
// can start one, and the read-only directory's binary is the one started then. The
// Sandbox that meets it is a new one (Caddy started again), which has not seen the
// directory's agent run in that container.
func TestPidsExhaustedKeepsReadOnlyAgent(t *testing.T) {
	cfg := directConfig(t)
	cfg.PidsLimit = 32
	first, cli := agentTestSandbox(t, cfg)
	ctx := context.Background()
	if err := first.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	first.CloseAgent()
	name := cfg.Container
	ex, err := cli.ContainerExecCreate(ctx, name, container.ExecOptions{Cmd: []string{"bash", "-c", "while :; do sleep 1000 & done"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerExecStart(ctx, ex.ID, container.ExecStartOptions{Detach: true}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the container's pids to be used up", func() bool {
		st, err := cli.ContainerStatsOneShot(ctx, name)
		if err != nil {
			return false
		}
		defer st.Body.Close()
		var v container.StatsResponse
		return json.NewDecoder(st.Body).Decode(&v) == nil && v.PidsStats.Current >= uint64(cfg.PidsLimit)
	})
	sb := newTestSandbox(t, cli, cfg)
	res, err := sb.Exec(ctx, "true", boxapi.ExecOptions{})
	t.Logf("a command with the pids used up: %+v, %v", res, err)
	info, err := cli.ContainerInspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	sb.link.agentMu.Lock()
	unusable := sb.link.agent.readOnlyUnusable == info.ID
	sb.link.agentMu.Unlock()
	if unusable {
		t.Fatal("the read-only directory's agent was taken for unusable")
	}
	if bin := sb.link.agentBinary(); bin != "" && !strings.HasPrefix(bin, directMount+"/") {
		t.Fatalf("an agent runs from %s", bin)
	}
	if st, err := cli.ContainerStatPath(ctx, name, agentDir); err == nil {
		t.Fatalf("the agent was copied into the container's filesystem: %s (%v)", agentDir, st.Mode)
	}
	// The restart ends the loop; the agent runs from the read-only directory then.
	if err := sb.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	if bin := sb.link.agentBinary(); !strings.HasPrefix(bin, directMount+"/") {
		t.Fatalf("after the restart the agent runs from %q, not from %s", bin, directMount)
	}
}
