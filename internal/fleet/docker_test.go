package fleet

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// dockerPool hands out entries on the local engine, one client each, and removes
// their containers and volumes when the test ends.
func dockerPool(t *testing.T) (func(Engine, sandbox.Config) (*Entry, func() error, error), sandbox.API) {
	cli := testengine.DockerClient(t)
	entries := map[string]*Entry{}
	acquire := func(eng Engine, cfg sandbox.Config) (*Entry, func() error, error) {
		if e := entries[cfg.Container]; e != nil {
			return e, func() error { return nil }, nil
		}
		dc, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, nil, err
		}
		own := sandbox.Docker(dc)
		sb, err := sandbox.New(own, cfg, nil)
		if err != nil {
			return nil, nil, err
		}
		e := NewEntry(EntryOptions{Sandbox: sb, Client: own, Engine: eng})
		entries[cfg.Container] = e
		t.Cleanup(func() {
			_ = e.Destruct()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cli.ContainerRemove(ctx, cfg.Container, container.RemoveOptions{Force: true})
			_ = cli.VolumeRemove(ctx, cfg.Volume, true)
		})
		return e, func() error { return nil }, nil
	}
	return acquire, sandbox.Docker(cli)
}

func dockerBase() sandbox.Config {
	cfg := testBase("mcp-sandbox-fleet-" + testenv.RandomHex(4))
	cfg.Image, cfg.NetworkMode, cfg.NoAgent = testengine.Image(), "none", true
	return cfg
}

func running(t *testing.T, cli sandbox.API, name string) bool {
	info, err := cli.InspectBox(context.Background(), name)
	return err == nil && info.State.Running
}

// TestIdleStopAndResumeOnDocker: a person's sandbox left alone for idle_stop is
// stopped, with its files kept; the next use starts it again.
func TestIdleStopAndResumeOnDocker(t *testing.T) {
	acquire, cli := dockerPool(t)
	f, err := New(Options{Base: dockerBase(), People: []Person{{Name: "alice"}}, Acquire: acquire, IdleStop: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := f.For(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Sandbox().Exec(ctx, "echo kept > /sandbox/f", boxapi.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	name := e.Sandbox().Config().Container
	f.Start()
	begin := time.Now()
	testenv.WaitFor(t, 30*time.Second, "alice's idle sandbox to stop", func() bool { return e.IdleStopped() && !running(t, cli, name) })
	t.Logf("stopped %v after the idle loop started (idle_stop 2s, checked every 1s)", time.Since(begin).Round(100*time.Millisecond))
	again, err := f.For(ctx, "alice")
	if err != nil || again != e {
		t.Fatalf("alice again: %v", err)
	}
	if !running(t, cli, name) || e.IdleStopped() {
		t.Fatal("the next use did not start the sandbox again")
	}
	res, err := e.Sandbox().Exec(ctx, "cat /sandbox/f", boxapi.ExecOptions{})
	if err != nil || res.Stdout != "kept\n" {
		t.Fatalf("after the restart: %+v %v", res, err)
	}
}

// TestRemovedOnDocker: the sandbox of a person the next configuration no longer names
// is listed as removed, stopped when that configuration starts, and deleted with its
// volume on request; a person still named is never listed.
func TestRemovedOnDocker(t *testing.T) {
	acquire, cli := dockerPool(t)
	base := dockerBase()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before, err := New(Options{Base: base, People: []Person{{Name: "bob"}, {Name: "carol"}}, Acquire: acquire})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"bob", "carol"} {
		e, err := before.For(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Sandbox().Exec(ctx, "true", boxapi.ExecOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := before.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := New(Options{Base: base, People: []Person{{Name: "carol"}}, Acquire: acquire})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = after.Close() })
	removed := after.Removed(ctx)
	if len(removed) != 1 || removed[0].Person != "bob" || removed[0].Name != base.Container+"-bob" {
		t.Fatalf("removed: %+v, want bob's only", removed)
	}
	after.Start()
	testenv.WaitFor(t, 30*time.Second, "bob's container to stop", func() bool { return !running(t, cli, base.Container+"-bob") })
	if !running(t, cli, base.Container+"-carol") {
		t.Fatal("carol's sandbox was stopped too")
	}
	var rows []string
	for _, s := range after.Statuses(ctx) {
		rows = append(rows, s.Person+":"+s.State+":"+map[bool]string{true: "removed"}[s.Removed])
	}
	if got := strings.Join(rows, " "); got != ":missing: carol:running: bob:exited:removed" {
		t.Errorf("statuses %q", got)
	}
	if err := after.DeleteRemoved(ctx, "carol", true); !errors.Is(err, ErrNoRemoved) {
		t.Fatalf("deleting carol, still configured: %v, want ErrNoRemoved", err)
	}
	if err := after.DeleteRemoved(ctx, "bob", true); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.InspectBox(ctx, base.Container+"-bob"); err == nil {
		t.Error("bob's container is still there")
	}
	if _, err := cli.InspectVolume(ctx, base.Volume+"-bob"); err == nil {
		t.Error("bob's volume is still there")
	}
	if r := after.Removed(ctx); len(r) != 0 {
		t.Errorf("removed after the delete: %+v", r)
	}
}
