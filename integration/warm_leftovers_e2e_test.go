package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestWarmLeftoversOfAKilledCaddy: a Caddy process with warm_sandboxes 2 is killed
// outright (no stop: its warm containers stay, running, nobody's); the next Caddy on
// the same storage and engine removes them and their volumes at its start, makes two
// of its own, and the console's API shows them (wanted 2, ready 2, none taken).
func TestWarmLeftoversOfAKilledCaddy(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	bin := caddyBinary(t)
	site := testsite.New(t)
	warm := func() map[string]string { // container id -> pool
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		list, err := site.Docker.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", "mcp-sandbox.warm=true"), filters.Arg("name", site.Container+"_warm_"))})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, c := range list {
			if c.State == "running" {
				out[c.ID] = c.Labels["mcp-sandbox.warm-pool"]
			}
		}
		return out
	}
	volumes := func(ids map[string]string) []string {
		var out []string
		for id := range ids {
			if info, err := site.Docker.ContainerInspect(context.Background(), id); err == nil {
				out = append(out, info.Config.Labels["mcp-sandbox.volume"])
			}
		}
		return out
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for id := range warm() {
			_ = site.Docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
		}
		if vols, err := site.Docker.VolumeList(ctx, volume.ListOptions{}); err == nil {
			for _, v := range vols.Volumes {
				if strings.HasPrefix(v.Name, site.Volume+"_warm_") {
					_ = site.Docker.VolumeRemove(ctx, v.Name, true)
				}
			}
		}
	})
	dir := t.TempDir()
	caddyfile := site.Caddyfile(testsite.Options{
		Directive: []string{"warm_sandboxes 2", "person alice alice-key-" + testenv.RandomHex(16)},
		Log:       filepath.Join(dir, "caddy.log"),
	})

	first := startInstance(t, bin, dir, "first", site.Port, caddyfile)
	var left map[string]string
	testenv.WaitFor(t, 2*time.Minute, "the first Caddy's two warm sandboxes", func() bool {
		left = warm()
		return len(left) == 2
	})
	leftVolumes := volumes(left)
	first.kill(t)
	if got := warm(); len(got) != 2 {
		t.Fatalf("after the kill, warm containers running: %v, want the first Caddy's two left behind", got)
	}

	second := startInstance(t, bin, dir, "second", site.Port, caddyfile)
	testenv.WaitFor(t, time.Minute, "the warm sandboxes left behind to go", func() bool {
		for id := range warm() {
			if _, ok := left[id]; ok {
				return false
			}
		}
		return true
	})
	for _, v := range leftVolumes {
		if _, err := site.Docker.VolumeInspect(context.Background(), v); err == nil {
			t.Errorf("the volume %s of a warm sandbox left behind is still there", v)
		}
	}
	var now map[string]string
	testenv.WaitFor(t, 2*time.Minute, "the second Caddy's two warm sandboxes", func() bool {
		now = warm()
		return len(now) == 2
	})
	oldPools := map[string]bool{}
	for _, pool := range left {
		oldPools[pool] = true
	}
	for id, pool := range now {
		if _, old := left[id]; old || pool == "" || oldPools[pool] {
			t.Errorf("warm container %s (pool %q) is not the second Caddy's own", id, pool)
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, "caddy.log"))
	if !strings.Contains(string(log), "removed warm sandboxes a Caddy left behind") {
		t.Error("the second Caddy's log does not say it removed the warm sandboxes left behind")
	}

	// The console's API shows the warm sandboxes.
	var body struct {
		Warm struct{ Wanted, Ready, Making, Taken int }
	}
	testenv.WaitFor(t, time.Minute, "the console to show two warm sandboxes ready", func() bool {
		consoleGet(t, second.http, second.url, site.Key, "/console/api/sandboxes", &body)
		return body.Warm.Ready == 2
	})
	if body.Warm.Wanted != 2 || body.Warm.Making != 0 || body.Warm.Taken != 0 {
		t.Errorf("the console's warm sandboxes: %+v, want 2 wanted, 2 ready, none being made or taken", body.Warm)
	}
}
