package integration

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestWarmSandboxFaults: a warm sandbox killed, or removed, behind Caddy's back while
// it waits to be taken: the next new person's first call still answers, in a running
// sandbox of theirs, and the pool makes a new warm one.
func TestWarmSandboxFaults(t *testing.T) {
	for _, fault := range []string{"killed", "removed"} {
		t.Run(fault, func(t *testing.T) {
			p := startPeopleSite(t, []string{"alice"}, "warm_sandboxes 1")
			p.removeWarmLeftovers(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			w := p.awaitWarm(t, 1)[0]
			var err error
			if fault == "killed" {
				err = p.Docker.ContainerKill(ctx, w.id, "KILL")
			} else {
				err = p.Docker.ContainerRemove(ctx, w.id, container.RemoveOptions{Force: true})
			}
			if err != nil {
				t.Fatal(err)
			}
			alice := p.client(ctx, "alice")
			res := testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "echo alice-runs; touch /sandbox/mine"})
			if got := testsite.Structured(t, res)["stdout"]; res.IsError || got != "alice-runs\n" {
				t.Fatalf("alice's first call after the warm sandbox was %s: %q (%s)", fault, got, testsite.ResultText(res))
			}
			if !testsite.ContainerRunning(t, p.Docker, p.containerOf("alice")) {
				t.Errorf("alice's container does not run")
			}
			res = testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "ls /sandbox"})
			if got := testsite.Structured(t, res)["stdout"]; res.IsError || got != "mine\n" {
				t.Errorf("alice's /sandbox on her second call: %q (%s)", got, testsite.ResultText(res))
			}
			for _, x := range p.awaitWarm(t, 1) {
				if x.id == w.id {
					t.Errorf("the %s warm sandbox is still counted", fault)
				}
			}
		})
	}
}
