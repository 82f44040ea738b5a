package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// warmSandbox is a warm container of a site as Docker lists it.
type warmSandbox struct{ id, name, volume string }

// warmSandboxes are the site's warm containers nobody took, running.
func (p *peopleSite) warmSandboxes(t testing.TB) []warmSandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := p.Docker.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", "mcp-sandbox.warm=true"), filters.Arg("name", p.Container+"_warm_"))})
	if err != nil {
		t.Fatal(err)
	}
	var out []warmSandbox
	for _, c := range list {
		if c.State == "running" && len(c.Names) > 0 {
			out = append(out, warmSandbox{c.ID, strings.TrimPrefix(c.Names[0], "/"), c.Labels["mcp-sandbox.volume"]})
		}
	}
	return out
}

// awaitWarm waits until n warm sandboxes are ready and returns them.
func (p *peopleSite) awaitWarm(t testing.TB, n int) []warmSandbox {
	t.Helper()
	var w []warmSandbox
	testenv.WaitFor(t, 2*time.Minute, "warm sandboxes", func() bool {
		w = p.warmSandboxes(t)
		return len(w) == n
	})
	// Ready means its agent runs too: the pool adds it to its ready ones last.
	testenv.WaitFor(t, time.Minute, "warm sandboxes ready in the metrics", func() bool {
		v, _ := testsite.MetricSum(testsite.Metrics(t, p.web, p.URL), "caddy_mcp_sandbox_warm_sandboxes", nil)
		return int(v) == n
	})
	return w
}

// removeWarmLeftovers removes the site's warm containers and volumes when the test ends.
func (p *peopleSite) removeWarmLeftovers(t testing.TB) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, _ := p.Docker.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", "mcp-sandbox.warm=true"))})
		for _, c := range list {
			if v := c.Labels["mcp-sandbox.volume"]; strings.HasPrefix(v, p.Volume+"_warm_") {
				_ = p.Docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
				_ = p.Docker.VolumeRemove(ctx, v, true)
			}
		}
	})
}

// volumeRecord reads storage's record of the volume of person's container.
func (p *peopleSite) volumeRecord(t testing.TB, person string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.Storage, "mcp_sandbox", "volume", p.containerOf(person)))
	if err != nil {
		t.Fatalf("volume record of %s: %v", person, err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("volume record of %s: %v in %s", person, err, b)
	}
	return rec
}

// sandboxVolume is the volume mounted at /sandbox in person's container.
func (p *peopleSite) sandboxVolume(t testing.TB, person string) (id, volume string, labels map[string]string) {
	t.Helper()
	info, err := p.Docker.ContainerInspect(context.Background(), p.containerOf(person))
	if err != nil {
		t.Fatalf("inspecting %s's container: %v", person, err)
	}
	for _, m := range info.Mounts {
		if m.Type == mount.TypeVolume && m.Destination == "/sandbox" {
			volume = m.Name
		}
	}
	return info.ID, volume, info.Config.Labels
}

// TestWarmSandboxes: with warm_sandboxes 2, a new person's first call takes a warm
// container (renamed to theirs, its volume recorded as theirs in storage), a new warm
// one is made, two people never share a volume, a person's files outlive their
// container's removal and a stop, and a reload without the setting removes the warm
// ones nobody took while the people's stay on their recorded volumes.
func TestWarmSandboxes(t *testing.T) {
	people := []string{"alice", "bob"}
	p := startPeopleSite(t, people, "warm_sandboxes 2")
	p.removeWarmLeftovers(t)
	ctx := context.Background()

	before := p.awaitWarm(t, 2)
	warmIDs := map[string]warmSandbox{}
	for _, w := range before {
		warmIDs[w.id] = w
	}

	// alice's first call takes one.
	alice := p.client(ctx, "alice")
	res := testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "echo alice-was-here > /sandbox/mine; cat /sandbox/mine; ls /sandbox | wc -l"})
	if got := testsite.Structured(t, res)["stdout"]; res.IsError || got != "alice-was-here\n1\n" {
		t.Fatalf("alice's first call: %q (%s)", got, testsite.ResultText(res))
	}
	id, vol, labels := p.sandboxVolume(t, "alice")
	w, took := warmIDs[id]
	if !took {
		t.Fatalf("alice's container %s is none of the warm ones %v", id, before)
	}
	if vol != w.volume || labels["mcp-sandbox.volume"] != w.volume || labels["mcp-sandbox.warm"] != "true" {
		t.Errorf("alice's container is on %s (labels %v), want the warm one's volume %s", vol, labels, w.volume)
	}
	if rec := p.volumeRecord(t, "alice"); rec["volume"] != w.volume || rec["person"] != "alice" {
		t.Errorf("alice's volume record = %v, want volume %s", rec, w.volume)
	}

	// A new warm one replaces it; the one left is not alice's.
	after := p.awaitWarm(t, 2)
	for _, x := range after {
		if x.id == id || x.volume == vol {
			t.Errorf("warm sandbox %s is alice's container or volume", x.name)
		}
	}

	// bob takes another, on another volume, without alice's files.
	bob := p.client(ctx, "bob")
	res = testsite.Call(ctx, t, bob, "execute", map[string]any{"command": "ls -A /sandbox"})
	if got := testsite.Structured(t, res)["stdout"]; res.IsError || got != "" {
		t.Fatalf("bob's /sandbox = %q (%s), want it empty", got, testsite.ResultText(res))
	}
	bobID, bobVol, _ := p.sandboxVolume(t, "bob")
	if bobVol == vol || bobID == id {
		t.Fatalf("bob shares alice's volume %s or container", vol)
	}
	if rec := p.volumeRecord(t, "bob"); rec["volume"] != bobVol {
		t.Errorf("bob's volume record = %v, want %s", rec, bobVol)
	}

	// alice's files outlive her container's removal (a recreate on the recorded
	// volume) and a stop.
	if err := p.Docker.ContainerRemove(ctx, p.containerOf("alice"), container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	catMine := func(what string) {
		t.Helper()
		res := testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "cat /sandbox/mine"})
		if got := testsite.Structured(t, res)["stdout"]; res.IsError || got != "alice-was-here\n" {
			t.Fatalf("alice's file after %s: %q (%s)", what, got, testsite.ResultText(res))
		}
	}
	catMine("her container was removed")
	newID, newVol, newLabels := p.sandboxVolume(t, "alice")
	if newID == id || newVol != vol || newLabels["mcp-sandbox.person"] != "alice" {
		t.Errorf("alice's recreated container %s is on %s (labels %v), want a new one on %s labelled hers", newID, newVol, newLabels, vol)
	}
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.Docker.ContainerStop(stopCtx, p.containerOf("alice"), container.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	catMine("her container was stopped")

	// A reload without warm_sandboxes removes the warm ones nobody took, containers
	// and volumes; the people's stay, on their recorded volumes.
	left := p.warmSandboxes(t)
	p.extra = nil
	p.Load(p.options(people))
	testenv.WaitFor(t, time.Minute, "the warm sandboxes' removal", func() bool { return len(p.warmSandboxes(t)) == 0 })
	for _, x := range left {
		if _, err := p.Docker.VolumeInspect(ctx, x.volume); err == nil {
			t.Errorf("the volume %s of a warm sandbox nobody took is still there", x.volume)
		}
	}
	alice = p.client(ctx, "alice")
	catMine("a reload without warm_sandboxes")
	if _, v, _ := p.sandboxVolume(t, "bob"); v != bobVol {
		t.Errorf("bob's container is on %s after the reload, want %s", v, bobVol)
	}
}
