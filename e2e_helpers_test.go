package mcpsandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// These tests run a real Caddy (in this process, loaded from a Caddyfile through the
// caddyfile adapter), a real Docker engine and real MCP clients over loopback HTTP.

func testImage() string { return testenv.Image() }

func randomHex(n int) string { return testenv.RandomHex(n) }

// dockerClient skips under -short when no engine answers and fails otherwise; see
// [testenv.DockerClient].
func dockerClient(t testing.TB) *client.Client { t.Helper(); return testenv.DockerClient(t) }

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// site is one running Caddy with the plugin.
type site struct {
	t         testing.TB
	url       string // http://127.0.0.1:port
	key       string
	container string
	volume    string
	storage   string
	port      int
	docker    *client.Client
}

// siteOptions adds lines to the mcp_sandbox block or the site block.
type siteOptions struct {
	image     string   // default: the test image
	network   string   // default: none (commands in test sandboxes stay off the network)
	cpus      string   // default: 1
	directive []string // extra lines in mcp_sandbox { }
	site      []string // extra lines in the site block
	catchAll  bool     // site address http://:port (any Host) instead of http://127.0.0.1:port
	address   string   // site address; default http://127.0.0.1:<port>; %d is the port
}

// withAndWithoutAgent runs f with the agent and with `agent off` (the fallback).
func withAndWithoutAgent(t *testing.T, f func(t *testing.T, opts siteOptions)) {
	t.Run("agent", func(t *testing.T) { f(t, siteOptions{}) })
	t.Run("fallback", func(t *testing.T) { f(t, siteOptions{directive: []string{"agent off"}}) })
}

// newSite draws a site's names, key, storage and port, and connects to Docker.
func newSite(t testing.TB) *site {
	t.Helper()
	s := &site{
		t:         t,
		key:       "test-key-" + randomHex(16),
		container: "mcp-sandbox-test-" + randomHex(4),
		storage:   t.TempDir(),
		port:      freePort(t),
		docker:    dockerClient(t),
	}
	s.volume = s.container + "-data"
	s.url = fmt.Sprintf("http://127.0.0.1:%d", s.port)
	return s
}

// startSite loads a Caddyfile with the plugin on a free loopback port. The container
// and volume get unique names and are removed when the test ends.
func startSite(t testing.TB, opts siteOptions) *site {
	t.Helper()
	s := newSite(t)
	s.start(opts)
	return s
}

// start loads the site drawn by newSite; see startSite.
func (s *site) start(opts siteOptions) {
	t := s.t
	t.Helper()
	// Tests share http.DefaultClient: every site starts and ends with no kept-alive
	// connection in it, so no request goes out over a connection to an earlier site
	// (a POST over a dead one is not retried).
	http.DefaultClient.CloseIdleConnections()
	t.Cleanup(func() {
		_ = caddy.Stop()
		http.DefaultClient.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.docker.ContainerRemove(ctx, s.container, container.RemoveOptions{Force: true})
		_ = s.docker.VolumeRemove(ctx, s.volume, true)
	})
	s.load(opts)
}

func (s *site) caddyfile(opts siteOptions) string {
	image := opts.image
	if image == "" {
		image = testImage()
	}
	network := opts.network
	if network == "" {
		network = "none"
	}
	cpus := opts.cpus
	if cpus == "" {
		cpus = "1"
	}
	address := fmt.Sprintf("http://%s:%d", siteHost(opts), s.port)
	if opts.address != "" {
		address = strings.ReplaceAll(opts.address, "%d", fmt.Sprint(s.port))
	}
	return fmt.Sprintf(`{
	admin off
	persist_config off
	auto_https off
	storage file_system %s
	log {
		output file %s/caddy.log
	}
}

%s {
	bind 127.0.0.1
	mcp_sandbox {
		api_key %s
		image %s
		container %s
		volume %s
		network %s
		memory 1g
		cpus %s
		%s
	}
	%s
	respond "the next handler" 200
}
`, s.storage, s.storage, address, s.key, image, s.container, s.volume, network, cpus,
		strings.Join(opts.directive, "\n\t\t"), strings.Join(opts.site, "\n\t"))
}

func siteHost(opts siteOptions) string {
	if opts.catchAll {
		return ""
	}
	return "127.0.0.1"
}

// load (re)loads the site's config, as `caddy reload` does.
func (s *site) load(opts siteOptions) {
	s.t.Helper()
	cfg, warn, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(s.caddyfile(opts)), nil)
	if err != nil {
		s.t.Fatalf("adapting Caddyfile: %v %v", err, warn)
	}
	loadConfig(s.t, cfg, s.port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("Caddy does not answer on %s: %v", s.url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loadConfig loads cfg into Caddy, which may already serve port, and returns once
// only the new config listens there.
func loadConfig(t testing.TB, cfg []byte, port int) {
	t.Helper()
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("loading config: %v", err)
	}
	waitOneListener(t, port)
}

// waitOneListener waits until one socket listens on port. Caddy binds each config's
// listener with SO_REUSEPORT and its stop only waits for the old servers' shutdowns to
// start, so right after a reload the old config's socket may still listen for a
// moment: the kernel queues some new connections on it, and they are reset when it
// closes. A test's next request must not be one of them.
func waitOneListener(t testing.TB, port int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := listeners(port)
		if n <= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sockets still listen on port %d 10s after a reload", n, port)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// listeners counts the TCP sockets listening on port, from /proc/net/tcp and tcp6.
func listeners(port int) int {
	n := 0
	suffix := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			// sl local_address rem_address st ...; st 0A is LISTEN
			if f := strings.Fields(line); len(f) > 3 && strings.HasSuffix(f[1], suffix) && f[3] == "0A" {
				n++
			}
		}
	}
	return n
}

// client returns an initialized mcp-go client that uses the API key as bearer token.
func (s *site) client(ctx context.Context) *mcpclient.Client {
	s.t.Helper()
	return s.clientWith(ctx, s.url, mcp.LATEST_PROTOCOL_VERSION)
}

func (s *site) clientWith(ctx context.Context, base, version string) *mcpclient.Client {
	s.t.Helper()
	return s.clientAs(ctx, base, version, s.key)
}

// clientAs is clientWith with key as the bearer token (a person's key).
func (s *site) clientAs(ctx context.Context, base, version, key string) *mcpclient.Client {
	s.t.Helper()
	c, err := mcpclient.NewStreamableHttpClient(base+"/mcp",
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + key}))
	if err != nil {
		s.t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = version
	init.Params.ClientInfo = mcp.Implementation{Name: "e2e-test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		s.t.Fatalf("initialize: %v", err)
	}
	return c
}

// call runs a tool and returns its result.
func call(ctx context.Context, t testing.TB, c *mcpclient.Client, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("calling %s(%v): %v", tool, args, err)
	}
	return res
}

// structured decodes a result's structuredContent.
func structured(t testing.TB, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	m, ok := res.StructuredContent.(map[string]any)
	if !ok {
		t.Fatalf("no structured content in %+v", res)
	}
	return m
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// containerExec runs a command in the site's container straight through the Docker
// API, to observe the container independently of the plugin.
func (s *site) containerExec(cmd string) string {
	s.t.Helper()
	out, err := s.exec(cmd)
	if err != nil {
		s.t.Fatalf("docker exec %q: %v", cmd, err)
	}
	return out
}

// tryExec is containerExec for polling: it returns "" while the container is not there.
func (s *site) tryExec(cmd string) string {
	out, _ := s.exec(cmd)
	return out
}

func (s *site) exec(cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := s.docker.ContainerExecCreate(ctx, s.container, container.ExecOptions{
		Cmd: []string{"bash", "-c", cmd}, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return "", err
	}
	resp, err := s.docker.ContainerExecAttach(ctx, id.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", err
	}
	defer resp.Close()
	var out strings.Builder
	_, err = stdcopy.StdCopy(&out, &out, resp.Reader)
	return out.String(), err
}

func (s *site) containerID() string {
	s.t.Helper()
	info, err := s.docker.ContainerInspect(context.Background(), s.container)
	if err != nil {
		s.t.Fatal(err)
	}
	return info.ID
}

// TestListenersCountsReusePortSockets: the reload wait sees both sockets of a port
// bound twice with SO_REUSEPORT, as Caddy binds a port across a reload.
func TestListenersCountsReusePortSockets(t *testing.T) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, 0xf, 1) // SO_REUSEPORT on Linux
		})
		return errors.Join(err, serr)
	}}
	a, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	port := a.Addr().(*net.TCPAddr).Port
	b, err := lc.Listen(context.Background(), "tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if n := listeners(port); n != 2 {
		t.Fatalf("%d listeners on port %d, want 2", n, port)
	}
	b.Close()
	if n := listeners(port); n != 1 {
		t.Fatalf("%d listeners on port %d after closing one, want 1", n, port)
	}
}
