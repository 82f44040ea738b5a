package mcpsandbox

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/metrics"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// siteHandler is the mcp_sandbox handler of the config Caddy runs now.
func siteHandler(t testing.TB) *Handler {
	t.Helper()
	app, err := caddy.ActiveContext().App("http")
	if err != nil {
		t.Fatal(err)
	}
	var find func(routes caddyhttp.RouteList) *Handler
	find = func(routes caddyhttp.RouteList) *Handler {
		for _, r := range routes {
			for _, mh := range r.Handlers {
				switch v := mh.(type) {
				case *Handler:
					return v
				case *caddyhttp.Subroute:
					if h := find(v.Routes); h != nil {
						return h
					}
				}
			}
		}
		return nil
	}
	for _, srv := range app.(*caddyhttp.App).Servers {
		if h := find(srv.Routes); h != nil {
			return h
		}
	}
	t.Fatal("no mcp_sandbox handler in the running config")
	return nil
}

// containerRunning reports whether the container name runs on the engine of cli.
func containerRunning(t testing.TB, cli client.APIClient, name string) bool {
	t.Helper()
	info, err := cli.ContainerInspect(context.Background(), name)
	if err != nil {
		t.Fatalf("inspecting %s: %v", name, err)
	}
	return info.State != nil && info.State.Running
}

// sandboxesByState is the sandboxes metric of one engine and state.
func sandboxesByState(t testing.TB, engine, state string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.Sandboxes(pooledSandboxes))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["engine"] == engine && labels["state"] == state {
				n += m.GetGauge().GetValue()
			}
		}
	}
	return n
}

// TestIdleStopAndResume: with idle_stop, a sandbox whose only job waits silently (a
// dev server) is stopped; a job that prints keeps it running; the next call starts it
// again, quickly, with its files.
func TestIdleStopAndResume(t *testing.T) {
	const idle = 2 * time.Second
	s := startSite(t, siteOptions{directive: []string{"idle_stop " + idle.String()}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.client(ctx)
	call(ctx, t, c, "execute", map[string]any{"command": "echo kept > /sandbox/f"})
	call(ctx, t, c, "execute", map[string]any{"command": "sleep 600", "wait": 0}) // silent: idle

	// A job that prints for 3 idle periods keeps the sandbox running.
	call(ctx, t, c, "execute", map[string]any{"command": "for i in $(seq 24); do echo $i; sleep 0.25; done", "wait": 0})
	time.Sleep(3 * idle)
	if !containerRunning(t, s.docker, s.container) {
		t.Fatal("the sandbox was stopped while a job printed")
	}
	// The metric counts it once Docker has confirmed the stop.
	waitFor(t, 4*idle+30*time.Second, "the idle sandbox to stop", func() bool {
		return !containerRunning(t, s.docker, s.container) && sandboxesByState(t, "", "stopped") >= 1
	})

	raw := testenv.BareStart(t, s.docker)
	begin := time.Now()
	res := call(ctx, t, c, "execute", map[string]any{"command": "cat /sandbox/f; ps -eo comm= | grep -c '^sleep$' || true"})
	took := time.Since(begin)
	t.Logf("the first call after the idle stop took %v (the engine starts a bare container in %v)", took.Round(time.Millisecond), raw.Round(time.Millisecond))
	// One sleep: the container's own main process; the job's sleep 600 ended.
	if res.IsError || structured(t, res)["stdout"] != "kept\n1\n" {
		t.Fatalf("after the idle stop: %v %q", res.IsError, resultText(res))
	}
	if bound := testenv.StartBound(3*time.Second, raw, 3*time.Second); took > bound {
		t.Errorf("the first call after the idle stop took %v, more than %v (a bare container starts in %v)", took, bound, raw)
	}
	if n := sandboxesByState(t, "", "stopped"); n != 0 {
		t.Errorf("sandboxes{state=stopped} = %v after the start", n)
	}
}

// TestStoppedSiteLeavesItsContainerAlone: once Caddy stops, a command still under way
// on the sandbox and any later use of it find the removed container gone and leave it
// so, instead of bringing it back, running, after the site is gone.
func TestStoppedSiteLeavesItsContainerAlone(t *testing.T) {
	s := startSite(t, siteOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	call(ctx, t, s.client(ctx), "execute", map[string]any{"command": "true"})
	sb := siteHandler(t).fleet.Operator().Sandbox()
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, "sleep 3", boxapi.ExecOptions{})
		done <- err
	}()
	time.Sleep(time.Second)
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.docker.ContainerRemove(ctx, s.container, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	<-done
	if _, err := sb.Exec(ctx, "true", boxapi.ExecOptions{}); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("a command after Caddy stopped: %v, want ErrClosed", err)
	}
	if _, err := s.docker.ContainerInspect(ctx, s.container); err == nil {
		t.Fatal("the container removed after Caddy stopped is back")
	}
}

// TestStoppedSitePlacesNoSandbox: a call that outlives its config (a task under way
// when Caddy stops) gets no sandbox for a person the config had not placed yet, where
// it would have made a container nothing removes.
func TestStoppedSitePlacesNoSandbox(t *testing.T) {
	p := startPeopleSite(t, []string{"alice"})
	h := siteHandler(t)
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := h.fleet.For(ctx, "alice")
	if err == nil {
		_, err = e.Sandbox().Exec(ctx, "true", boxapi.ExecOptions{})
	}
	if !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("alice's sandbox after Caddy stopped: %v, want ErrClosed", err)
	}
	if _, err := p.docker.ContainerInspect(ctx, p.containerOf("alice")); err == nil {
		t.Fatal("alice's container was made after Caddy stopped")
	}
}

// TestTwoEngines places sandboxes on two engines: the local one and a second dockerd.
// Stopping the second leaves the first engine's sandboxes working and gives the
// second's a clear error; once it is back, and after Caddy restarts, every sandbox is
// found where it was, with its files.
func TestTwoEngines(t *testing.T) {
	eng := testenv.SecondEngine(t)
	two := eng.Client(t)
	local := dockerClient(t)
	localHost := os.Getenv("DOCKER_HOST")
	if localHost == "" {
		localHost = client.DefaultDockerHost
	}
	s := newSite(t)
	opts := siteOptions{directive: []string{"engine local " + localHost, "engine two " + eng.Host(),
		"person p1 two-engines-key-of-p1", "person p2 two-engines-key-of-p2"}}
	for _, p := range []struct {
		cli    *client.Client
		person string
	}{{two, "p1"}, {local, "p2"}} {
		name := s.container + "-" + p.person
		vol := s.volume + "-" + p.person
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = p.cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true})
			_ = p.cli.VolumeRemove(ctx, vol, true)
		})
	}
	s.start(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := s.client(ctx)
	call(ctx, t, c, "execute", map[string]any{"command": "echo operator > /sandbox/f"}) // on local, the first engine

	h := siteHandler(t)
	// p2 was placed on local earlier (recorded in storage); p1 is new and goes to the
	// engine with fewer sandboxes: two, which has none.
	if err := h.storage.Store(ctx, fleet.PlacementPrefix+s.container+"-p2", []byte(`{"engine":"local"}`)); err != nil {
		t.Fatal(err)
	}
	run := func(h *Handler, person, cmd string) (string, error) {
		e, err := h.fleet.For(ctx, person)
		if err != nil {
			return "", err
		}
		res, err := e.Sandbox().Exec(ctx, cmd, boxapi.ExecOptions{})
		if err != nil {
			return "", err
		}
		return res.Stdout, nil
	}
	for _, p := range []string{"p1", "p2"} {
		if _, err := run(h, p, "echo "+p+" > /sandbox/f"); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	for cli, name := range map[*client.Client]string{two: s.container + "-p1", local: s.container + "-p2"} {
		info, err := cli.ContainerInspect(ctx, name)
		if err != nil {
			t.Fatalf("%s is not on its engine: %v", name, err)
		}
		want := map[string]string{s.container + "-p1": "two", s.container + "-p2": "local"}[name]
		if got := info.Config.Labels["mcp-sandbox.engine"]; got != want {
			t.Errorf("%s: label mcp-sandbox.engine %q, want %q", name, got, want)
		}
	}

	if err := eng.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Start() })
	res := call(ctx, t, c, "execute", map[string]any{"command": "cat /sandbox/f"})
	if res.IsError || structured(t, res)["stdout"] != "operator\n" {
		t.Fatalf("the operator's sandbox with engine two down: %v %q", res.IsError, resultText(res))
	}
	if out, err := run(h, "p2", "cat /sandbox/f"); err != nil || out != "p2\n" {
		t.Fatalf("p2 (local) with engine two down: %q %v", out, err)
	}
	begin := time.Now()
	_, err := run(h, "p1", "true")
	t.Logf("p1 with its engine down: %v (after %v)", err, time.Since(begin).Round(time.Millisecond))
	if err == nil || !sandbox.EngineDown(err) {
		t.Fatalf("p1 with its engine down: %v, want an engine error", err)
	}

	if err := eng.Start(); err != nil {
		t.Fatal(err)
	}
	if out, err := run(h, "p1", "cat /sandbox/f"); err != nil || out != "p1\n" {
		t.Fatalf("p1 after its engine came back: %q %v", out, err)
	}

	// Caddy restarts: the placements come from storage.
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	s.load(opts)
	h = siteHandler(t)
	for _, p := range []string{"p1", "p2"} {
		if out, err := run(h, p, "cat /sandbox/f"); err != nil || out != p+"\n" {
			t.Fatalf("%s after Caddy restarted: %q %v", p, out, err)
		}
	}
	e, _ := h.fleet.For(ctx, "p1")
	if e.Engine().Name != "two" {
		t.Errorf("p1 after Caddy restarted is on %q", e.Engine().Name)
	}
	c = s.client(ctx)
	res = call(ctx, t, c, "execute", map[string]any{"command": "cat /sandbox/f"})
	if res.IsError || structured(t, res)["stdout"] != "operator\n" {
		t.Fatalf("the operator's sandbox after Caddy restarted: %v %q", res.IsError, resultText(res))
	}
}
