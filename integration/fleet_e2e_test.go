package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// sandboxesByState is the sandboxes metric of one engine and state, as the site's
// /metrics says (the site has testsite.MetricsRoute).
func sandboxesByState(t testing.TB, s *testsite.Site, engine, state string) float64 {
	t.Helper()
	n, _ := testsite.MetricSum(testsite.Metrics(t, nil, s.URL), "caddy_mcp_sandbox_sandboxes", map[string]string{"engine": engine, "state": state})
	return n
}

// TestIdleStopAndResume: with idle_stop, a sandbox whose only job waits silently (a
// dev server) is stopped; a job that prints keeps it running; the next call starts it
// again, quickly, with its files.
func TestIdleStopAndResume(t *testing.T) {
	const idle = 2 * time.Second
	s := testsite.Start(t, testsite.Options{Directive: []string{"idle_stop " + idle.String()}, Site: []string{testsite.MetricsRoute}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo kept > /sandbox/f"})
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "sleep 600", "wait": 0}) // silent: idle

	// A job that prints for 3 idle periods keeps the sandbox running.
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "for i in $(seq 24); do echo $i; sleep 0.25; done", "wait": 0})
	time.Sleep(3 * idle)
	if !testsite.ContainerRunning(t, s.Docker, s.Container) {
		t.Fatal("the sandbox was stopped while a job printed")
	}
	// The metric counts it once Docker has confirmed the stop.
	testenv.WaitFor(t, 4*idle+30*time.Second, "the idle sandbox to stop", func() bool {
		return !testsite.ContainerRunning(t, s.Docker, s.Container) && sandboxesByState(t, s, "", "stopped") >= 1
	})

	raw := testengine.BareStart(t, s.Docker)
	begin := time.Now()
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "cat /sandbox/f; ps -eo comm= | grep -c '^sleep$' || true"})
	took := time.Since(begin)
	t.Logf("the first call after the idle stop took %v (the engine starts a bare container in %v)", took.Round(time.Millisecond), raw.Round(time.Millisecond))
	// One sleep: the container's own main process; the job's sleep 600 ended.
	if res.IsError || testsite.Structured(t, res)["stdout"] != "kept\n1\n" {
		t.Fatalf("after the idle stop: %v %q", res.IsError, testsite.ResultText(res))
	}
	if bound := testengine.StartBound(3*time.Second, raw, 3*time.Second); took > bound {
		t.Errorf("the first call after the idle stop took %v, more than %v (a bare container starts in %v)", took, bound, raw)
	}
	if n := sandboxesByState(t, s, "", "stopped"); n != 0 {
		t.Errorf("sandboxes{state=stopped} = %v after the start", n)
	}
}

// TestTwoEngines places sandboxes on two engines: the local one and a second dockerd.
// Stopping the second leaves the first engine's sandboxes working and gives the
// second's a clear error; once it is back, and after Caddy restarts, every sandbox is
// found where it was, with its files.
func TestTwoEngines(t *testing.T) {
	eng := testengine.SecondEngine(t)
	two := eng.Client(t)
	local := testengine.DockerClient(t)
	localHost := os.Getenv("DOCKER_HOST")
	if localHost == "" {
		localHost = client.DefaultDockerHost
	}
	s := testsite.New(t)
	keys := map[string]string{"p1": "two-engines-key-of-p1", "p2": "two-engines-key-of-p2"}
	opts := testsite.Options{Directive: []string{"engine local " + localHost, "engine two " + eng.Host(),
		"person p1 " + keys["p1"], "person p2 " + keys["p2"]}}
	for _, p := range []struct {
		cli    *client.Client
		person string
	}{{two, "p1"}, {local, "p2"}} {
		name := s.Container + "-" + p.person
		vol := s.Volume + "-" + p.person
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = p.cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true})
			_ = p.cli.VolumeRemove(ctx, vol, true)
		})
	}
	// p2 was placed on local earlier: the placement record, in Caddy's file storage as
	// the handler writes it, before the site starts. p1 is new and goes to the engine
	// with fewer sandboxes: two, which has none.
	record := filepath.Join(s.Storage, "mcp_sandbox", "placement", s.Container+"-p2")
	if err := os.MkdirAll(filepath.Dir(record), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(record, []byte(`{"engine":"local"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Start(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo operator > /sandbox/f"}) // on local, the first engine

	clients := map[string]*mcpclient.Client{}
	session := func(person string) *mcpclient.Client {
		if clients[person] == nil {
			clients[person] = s.ClientAs(ctx, s.URL, mcp.LATEST_PROTOCOL_VERSION, keys[person])
		}
		return clients[person]
	}
	run := func(person, cmd string) (string, *mcp.CallToolResult) {
		res := testsite.Call(ctx, t, session(person), "execute", map[string]any{"command": cmd})
		if res.IsError {
			return "", res
		}
		out, _ := testsite.Structured(t, res)["stdout"].(string)
		return out, nil
	}
	for _, p := range []string{"p1", "p2"} {
		if _, failed := run(p, "echo "+p+" > /sandbox/f"); failed != nil {
			t.Fatalf("%s: %q", p, testsite.ResultText(failed))
		}
	}
	onEngine := func(when string) {
		t.Helper()
		for cli, name := range map[*client.Client]string{two: s.Container + "-p1", local: s.Container + "-p2"} {
			info, err := cli.ContainerInspect(ctx, name)
			if err != nil {
				t.Fatalf("%s: %s is not on its engine: %v", when, name, err)
			}
			want := map[string]string{s.Container + "-p1": "two", s.Container + "-p2": "local"}[name]
			if got := info.Config.Labels["mcp-sandbox.engine"]; got != want {
				t.Errorf("%s: %s: label mcp-sandbox.engine %q, want %q", when, name, got, want)
			}
		}
	}
	onEngine("placed")

	if err := eng.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Start() })
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "cat /sandbox/f"})
	if res.IsError || testsite.Structured(t, res)["stdout"] != "operator\n" {
		t.Fatalf("the operator's sandbox with engine two down: %v %q", res.IsError, testsite.ResultText(res))
	}
	if out, failed := run("p2", "cat /sandbox/f"); failed != nil || out != "p2\n" {
		t.Fatalf("p2 (local) with engine two down: %q %v", out, failed)
	}
	begin := time.Now()
	_, failed := run("p1", "true")
	if failed == nil {
		t.Fatal("p1 with its engine down: the call worked")
	}
	text := testsite.ResultText(failed)
	t.Logf("p1 with its engine down: %q (after %v)", text, time.Since(begin).Round(time.Millisecond))
	if !strings.Contains(text, "the Docker engine did not answer") {
		t.Fatalf("p1 with its engine down: %q, want an engine error", text)
	}

	if err := eng.Start(); err != nil {
		t.Fatal(err)
	}
	if out, failed := run("p1", "cat /sandbox/f"); failed != nil || out != "p1\n" {
		t.Fatalf("p1 after its engine came back: %q %v", out, failed)
	}

	// Caddy restarts: the placements come from storage.
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	s.Load(opts)
	clients = map[string]*mcpclient.Client{}
	for _, p := range []string{"p1", "p2"} {
		if out, failed := run(p, "cat /sandbox/f"); failed != nil || out != p+"\n" {
			t.Fatalf("%s after Caddy restarted: %q %v", p, out, failed)
		}
	}
	onEngine("after Caddy restarted")
	c = s.Client(ctx)
	res = testsite.Call(ctx, t, c, "execute", map[string]any{"command": "cat /sandbox/f"})
	if res.IsError || testsite.Structured(t, res)["stdout"] != "operator\n" {
		t.Fatalf("the operator's sandbox after Caddy restarted: %v %q", res.IsError, testsite.ResultText(res))
	}
}
