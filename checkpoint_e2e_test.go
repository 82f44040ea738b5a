package mcpsandbox

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	mcpclient "github.com/mark3labs/mcp-go/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

func stdoutOf(ctx context.Context, t *testing.T, c *mcpclient.Client, command string) string {
	t.Helper()
	res := call(ctx, t, c, "execute", map[string]any{"command": command})
	if res.IsError {
		t.Fatalf("%s: %s", command, resultText(res))
	}
	return structured(t, res)["stdout"].(string)
}

// imageGone reports whether checkpoint id's image and volume are gone from the engine
// (whatever their names: see sandbox.CheckpointImage).
func imageGone(t *testing.T, cli *client.Client, id string) bool {
	t.Helper()
	ctx := context.Background()
	list, err := sandbox.Checkpoints(ctx, sandbox.Docker(cli))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		if c.ID == id {
			return false
		}
	}
	vols, err := cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "mcp-sandbox.checkpoint="+id))})
	if err != nil {
		t.Fatal(err)
	}
	return len(vols.Volumes) == 0
}

// removeCheckpoints removes every checkpoint of the containers.
func removeCheckpoints(cli *client.Client, names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, _ := sandbox.Checkpoints(ctx, sandbox.Docker(cli))
	for _, c := range list {
		for _, n := range names {
			if c.Container == n {
				_ = sandbox.DeleteCheckpoint(ctx, sandbox.Docker(cli), c.ID)
			}
		}
	}
}

// TestCheckpointRemovedPerson sweeps as the site would at later times, through the
// handler, so it stays beside it. A removed person's checkpoints are kept through the
// grace period, counted from when the site first found them gone, then deleted; the
// others' are kept.
func TestCheckpointRemovedPerson(t *testing.T) {
	p := startPeopleSite(t, []string{"alice", "bob"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Cleanup(func() { removeCheckpoints(p.docker, p.containerOf("alice"), p.containerOf("bob")) })
	ids := map[string]string{}
	for _, person := range []string{"alice", "bob"} {
		c := p.client(ctx, person)
		stdoutOf(ctx, t, c, "echo x > /sandbox/x")
		ids[person] = structured(t, call(ctx, t, c, "checkpoint", map[string]any{}))["id"].(string)
	}
	p.load(p.options([]string{"bob"}))
	h := siteHandler(t)
	now := time.Now()
	h.fleet.SweepRemovedCheckpoints(ctx, now)
	h.fleet.SweepRemovedCheckpoints(ctx, now.Add(fleet.CheckpointGrace-time.Hour))
	if imageGone(t, p.docker, ids["alice"]) {
		t.Fatal("alice's checkpoint went before the grace period ended")
	}
	h.fleet.SweepRemovedCheckpoints(ctx, now.Add(fleet.CheckpointGrace+time.Minute))
	if !imageGone(t, p.docker, ids["alice"]) {
		t.Error("alice's checkpoint is kept after the grace period")
	}
	if imageGone(t, p.docker, ids["bob"]) {
		t.Error("bob's checkpoint was deleted")
	}
}
