package mcpsandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// scrape returns the text a Prometheus scrape of reg reads.
func scrape(t testing.TB, reg *prometheus.Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, b)
	}
	return string(b)
}

// testConfig is a sandbox configuration for container, whose image is never pulled.
func testConfig(container string) sandbox.Config {
	cfg := sandbox.DefaultConfig()
	cfg.Image = "example/image"
	cfg.Container = container
	cfg.Volume = container + "-data"
	return cfg
}

// poolSandbox puts a sandbox of cfg on eng into the pool that metrics scrape, as
// App.acquire does, until the test ends. It does no Docker I/O.
func poolSandbox(t *testing.T, cfg sandbox.Config, eng fleet.Engine) *sandbox.Sandbox {
	t.Helper()
	cli, err := newDockerClient(eng.Host)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(cli, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := "test\x00" + cfg.Container
	if _, _, err := sandboxes.LoadOrNew(key, func() (caddy.Destructor, error) {
		return fleet.NewEntry(fleet.EntryOptions{Sandbox: sb, Client: cli, Engine: eng}), nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = sandboxes.Delete(key) })
	return sb
}

// TestAgentOffByConfiguration: a sandbox configured without the agent shows in the
// console as off by configuration, and in the metrics as 0 with no start, without
// Docker.
func TestAgentOffByConfiguration(t *testing.T) {
	cfg := testConfig("mcp-sandbox-test-" + testenv.RandomHex(4))
	cfg.NoAgent = true
	sb := poolSandbox(t, cfg, fleet.Engine{Host: "unix:///nonexistent.sock"})

	if got := (consoleSandbox{sb: sb}).agent(); got != (console.Agent{Disabled: true}) {
		t.Fatalf("console agent: %+v", got)
	}
	reg := prometheus.NewRegistry()
	if err := registerMetrics(reg); err != nil {
		t.Fatal(err)
	}
	out := scrape(t, reg)
	for _, want := range []string{
		fmt.Sprintf("caddy_mcp_sandbox_agent_running{container=%q} 0\n", cfg.Container),
		fmt.Sprintf("caddy_mcp_sandbox_agent_starts_total{container=%q} 0\n", cfg.Container),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// TestScrapeListsEachEngineOnce: a scrape lists an engine's containers once, not once
// per sandbox, though each sandbox holds a Docker client of its own (a team of fifty
// made fifty listings a scrape). The engine is the real one, behind a proxy that counts
// the listings.
func TestScrapeListsEachEngineOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	var lists atomic.Int64
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
			if strings.HasSuffix(r.In.URL.Path, "/containers/json") {
				lists.Add(1)
			}
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", "/var/run/docker.sock")
		}},
	}
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })

	eng := fleet.Engine{Host: "unix://" + sock}
	prefix := "mcp-sandbox-test-" + testenv.RandomHex(4)
	for i := range 5 {
		poolSandbox(t, testConfig(fmt.Sprintf("%s-%d", prefix, i)), eng)
	}
	reg := prometheus.NewRegistry()
	if err := registerMetrics(reg); err != nil {
		t.Fatal(err)
	}
	out := scrape(t, reg)
	// Other tests' sandboxes on the default engine may count too: at least these five.
	const series = `caddy_mcp_sandbox_sandboxes{engine="",state="missing"} `
	_, after, ok := strings.Cut(out, series)
	line, _, _ := strings.Cut(after, "\n")
	if n, err := strconv.Atoi(line); !ok || err != nil || n < 5 {
		t.Errorf("want at least 5 in %q...; the scrape:\n%s", series, out)
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("one scrape listed the engine's containers %d times, want once", n)
	}
}
