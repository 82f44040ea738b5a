package testsite

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// Main runs a package's tests with XDG_DATA_HOME set to a directory of their own,
// removed at the end: each test container gets a directory there for the agent's
// direct channel. Call it from TestMain.
func Main(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcp-sandbox-data-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test data directory:", err)
		os.Exit(1)
	}
	os.Setenv("XDG_DATA_HOME", dir)
	code := m.Run()
	sweep()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sweep removes, once the tests of this process are over, the containers (and their
// volumes) of the sites it drew (their operator's, and their people's, named after
// it). A site stopped while it was making its container (the start's warm-up, a test
// that makes no call) cancels the create, but Docker may finish it after the test's
// cleanup removed the name: such a container is left created, never started.
func sweep() {
	var names []string
	drawn.Range(func(k, _ any) bool { names = append(names, k.(string)); return true })
	if len(names) == 0 {
		return
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", "mcp-sandbox-test-"))})
	if err != nil {
		return
	}
	n := 0
	for _, c := range list {
		if len(c.Names) == 0 || !slices.ContainsFunc(names, func(p string) bool {
			name := strings.TrimPrefix(c.Names[0], "/")
			return name == p || strings.HasPrefix(name, p+"-") || strings.HasPrefix(name, p+"_warm_")
		}) {
			continue
		}
		if cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}) == nil {
			n++
		}
		if v := c.Labels["mcp-sandbox.volume"]; strings.HasPrefix(v, "mcp-sandbox-test-") {
			_ = cli.VolumeRemove(ctx, v, true)
		}
	}
	if n > 0 {
		fmt.Fprintf(os.Stderr, "testsite: removed %d test container(s) left after their tests (made by Docker after the test's cleanup)\n", n)
	}
}

// drawn holds the container names New drew in this process.
var drawn sync.Map

// Site is one running Caddy with the plugin.
type Site struct {
	T         testing.TB
	URL       string // http://127.0.0.1:port
	Key       string // the operator's API key
	Container string // the operator's sandbox container
	Volume    string // its volume
	Storage   string // Caddy's storage directory; Caddy's log is caddy.log there
	Port      int
	Docker    *client.Client
}

// Options adds lines to the mcp_sandbox block or the site block; the zero value is a
// site with the test image, no network and one CPU.
type Options struct {
	Image     string   // default: the test image (testengine.Image)
	Network   string   // default: none (commands in test sandboxes stay off the network)
	CPUs      string   // default: 1
	Directive []string // extra lines in mcp_sandbox { }
	Site      []string // extra lines in the site block
	CatchAll  bool     // site address http://:port (any Host) instead of http://127.0.0.1:port
	Address   string   // site address; default http://127.0.0.1:<port>; %d is the port
	Log       string   // Caddy's log file; default caddy.log in the storage directory
}

// WithAndWithoutAgent runs f with the agent and with `agent off` (the fallback).
func WithAndWithoutAgent(t *testing.T, f func(t *testing.T, opts Options)) {
	t.Run("agent", func(t *testing.T) { f(t, Options{}) })
	t.Run("fallback", func(t *testing.T) { f(t, Options{Directive: []string{"agent off"}}) })
}

// FreePort is a TCP port on 127.0.0.1 that nothing listens on right now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// New draws a site's names, key, storage and port, and connects to Docker, without
// starting Caddy: a test that needs the names in its Caddyfile calls [Site.Start] after.
func New(t testing.TB) *Site {
	t.Helper()
	s := &Site{
		T:         t,
		Key:       "test-key-" + testenv.RandomHex(16),
		Container: "mcp-sandbox-test-" + testenv.RandomHex(4),
		Storage:   StorageDir(t),
		Port:      FreePort(t),
		Docker:    testengine.DockerClient(t),
	}
	s.Volume = s.Container + "-data"
	drawn.Store(s.Container, true)
	s.URL = fmt.Sprintf("http://127.0.0.1:%d", s.Port)
	return s
}

// Start loads a Caddyfile with the plugin on a free loopback port. The container and
// volume get unique names and are removed when the test ends.
func Start(t testing.TB, opts Options) *Site {
	t.Helper()
	s := New(t)
	s.Start(opts)
	return s
}

// Start loads the site drawn by [New]; see [Start]. Caddy stops when the test ends.
func (s *Site) Start(opts Options) {
	t := s.T
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
		_ = s.Docker.ContainerRemove(ctx, s.Container, container.RemoveOptions{Force: true})
		_ = s.Docker.VolumeRemove(ctx, s.Volume, true)
	})
	s.Load(opts)
}

// Caddyfile is the site's Caddyfile with opts.
func (s *Site) Caddyfile(opts Options) string {
	image := opts.Image
	if image == "" {
		image = testengine.Image()
	}
	network := opts.Network
	if network == "" {
		network = "none"
	}
	cpus := opts.CPUs
	if cpus == "" {
		cpus = "1"
	}
	host := "127.0.0.1"
	if opts.CatchAll {
		host = ""
	}
	address := fmt.Sprintf("http://%s:%d", host, s.Port)
	if opts.Address != "" {
		address = strings.ReplaceAll(opts.Address, "%d", fmt.Sprint(s.Port))
	}
	logFile := opts.Log
	if logFile == "" {
		logFile = s.Storage + "/caddy.log"
	}
	return fmt.Sprintf(`{
	admin off
	persist_config off
	auto_https off
	storage file_system %s
	log {
		output file %s
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
`, s.Storage, logFile, address, s.Key, image, s.Container, s.Volume, network, cpus,
		strings.Join(opts.Directive, "\n\t\t"), strings.Join(opts.Site, "\n\t"))
}

// Load (re)loads the site's config, as `caddy reload` does, and returns once the new
// config answers.
func (s *Site) Load(opts Options) {
	s.T.Helper()
	cfg, warn, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(s.Caddyfile(opts)), nil)
	if err != nil {
		s.T.Fatalf("adapting Caddyfile: %v %v", err, warn)
	}
	LoadConfig(s.T, cfg, s.Port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("Caddy does not answer on %s: %v", s.URL, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LoadConfig loads cfg into Caddy, which may already serve port, and returns once
// only the new config listens there.
func LoadConfig(t testing.TB, cfg []byte, port int) {
	t.Helper()
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("loading config: %v", err)
	}
	WaitOneListener(t, port)
}

// WaitOneListener waits until one socket listens on port. Caddy binds each config's
// listener with SO_REUSEPORT and its stop only waits for the old servers' shutdowns to
// start, so right after a reload the old config's socket may still listen for a
// moment: the kernel queues some new connections on it, and they are reset when it
// closes. A test's next request must not be one of them.
func WaitOneListener(t testing.TB, port int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := Listeners(port)
		if n <= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sockets still listen on port %d 10s after a reload", n, port)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Listeners counts the TCP sockets listening on port, from /proc/net/tcp and tcp6.
func Listeners(port int) int {
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

// Client returns an initialized mcp-go client that uses the API key as bearer token.
func (s *Site) Client(ctx context.Context) *mcpclient.Client {
	s.T.Helper()
	return s.ClientWith(ctx, s.URL, mcp.LATEST_PROTOCOL_VERSION)
}

// ClientWith is [Site.Client] through base (a proxy in front of the site, say) with
// the protocol version asked for in initialize.
func (s *Site) ClientWith(ctx context.Context, base, version string) *mcpclient.Client {
	s.T.Helper()
	return s.ClientAs(ctx, base, version, s.Key)
}

// ClientAs is [Site.ClientWith] with key as the bearer token (a person's key).
func (s *Site) ClientAs(ctx context.Context, base, version, key string) *mcpclient.Client {
	s.T.Helper()
	c, err := mcpclient.NewStreamableHttpClient(base+"/mcp",
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + key}))
	if err != nil {
		s.T.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		s.T.Fatal(err)
	}
	s.T.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = version
	init.Params.ClientInfo = mcp.Implementation{Name: "e2e-test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		s.T.Fatalf("initialize: %v", err)
	}
	return c
}

// Call runs a tool and returns its result; a protocol error fails the test.
func Call(ctx context.Context, t testing.TB, c *mcpclient.Client, tool string, args map[string]any) *mcp.CallToolResult {
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

// Structured decodes a result's structuredContent.
func Structured(t testing.TB, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	m, ok := res.StructuredContent.(map[string]any)
	if !ok {
		t.Fatalf("no structured content in %+v", res)
	}
	return m
}

// ResultText is the text of a result's text content blocks, joined.
func ResultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// ContainerExec runs a command in the site's container straight through the Docker
// API, to observe the container independently of the plugin; an error fails the test.
func (s *Site) ContainerExec(cmd string) string {
	s.T.Helper()
	out, err := s.Exec(cmd)
	if err != nil {
		s.T.Fatalf("docker exec %q: %v", cmd, err)
	}
	return out
}

// TryExec is [Site.ContainerExec] for polling: it returns "" while the container is
// not there.
func (s *Site) TryExec(cmd string) string {
	out, _ := s.Exec(cmd)
	return out
}

// Exec runs `bash -c cmd` in the site's container through the Docker API and returns
// its output, stdout and stderr together.
func (s *Site) Exec(cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := s.Docker.ContainerExecCreate(ctx, s.Container, container.ExecOptions{
		Cmd: []string{"bash", "-c", cmd}, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return "", fmt.Errorf("creating exec in %s: %w", s.Container, err)
	}
	resp, err := s.Docker.ContainerExecAttach(ctx, id.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", fmt.Errorf("attaching to exec in %s: %w", s.Container, err)
	}
	defer resp.Close()
	var out strings.Builder
	_, err = stdcopy.StdCopy(&out, &out, resp.Reader)
	return out.String(), err
}

// ContainerID is the ID of the site's container, which must exist.
func (s *Site) ContainerID() string {
	s.T.Helper()
	info, err := s.Docker.ContainerInspect(context.Background(), s.Container)
	if err != nil {
		s.T.Fatal(err)
	}
	return info.ID
}

// AnyHostClient dials Caddy on port 127.0.0.1:port whatever the URL's host name
// (preview hosts, people's hosts, as *.localhost does), and follows no redirects.
func AnyHostClient(port int) *http.Client {
	dialer := &net.Dialer{}
	return &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", port))
			},
			MaxIdleConnsPerHost: 16,
			DisableCompression:  true,
			ReadBufferSize:      64 << 10,
			WriteBufferSize:     64 << 10,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       60 * time.Second,
	}
}

// PutFile writes data to the path p in the site's container through the Docker API,
// making its directory first.
func (s *Site) PutFile(p string, data []byte) {
	s.T.Helper()
	s.ContainerExec("mkdir -p " + path.Dir(p))
	s.CopyInto(s.T, path.Dir(p), path.Base(p), data)
}

// CopyInto writes data to dir/name (dir must exist) in the site's container through
// the Docker API, as a program in the sandbox could have written it; t is the test (or
// subtest) that fails when it cannot.
func (s *Site) CopyInto(t testing.TB, dir, name string, data []byte) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write(data)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Docker.CopyToContainer(context.Background(), s.Container, dir, &buf, container.CopyToContainerOptions{}); err != nil {
		t.Fatalf("copying %s into the container: %v", name, err)
	}
}

// RemoveContainer removes the site's container, as an operator or a crash might.
func (s *Site) RemoveContainer() {
	s.T.Helper()
	if err := s.Docker.ContainerRemove(context.Background(), s.Container, container.RemoveOptions{Force: true}); err != nil {
		s.T.Fatal(err)
	}
}

// Dial starts an MCP client on base+"/mcp" with token as bearer and initializes it;
// unlike [Site.Client] it returns a failed start or initialize, for tests of refusals.
func Dial(ctx context.Context, t testing.TB, base, token string) (*mcpclient.Client, error) {
	t.Helper()
	c, err := mcpclient.NewStreamableHttpClient(base+"/mcp",
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.ProtocolVersion20250618
	init.Params.ClientInfo = mcp.Implementation{Name: "oauth2-e2e", Version: "1"}
	_, err = c.Initialize(ctx, init)
	return c, err
}

// ContainerRunning reports whether the container name runs on the engine of cli; a
// container that is not there fails the test.
func ContainerRunning(t testing.TB, cli client.APIClient, name string) bool {
	t.Helper()
	info, err := cli.ContainerInspect(context.Background(), name)
	if err != nil {
		t.Fatalf("inspecting %s: %v", name, err)
	}
	return info.State != nil && info.State.Running
}

// StorageDir is a directory for Caddy's storage, removed when the test ends. Unlike
// t.TempDir, its removal tries again for a few seconds: a Caddy just stopped may still
// be writing there in the background (the fingerprints of keys it saw), and a write
// that lands during the removal would fail the test for no fault of what it checks.
func StorageDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcp-sandbox-storage-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var err error
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if err = os.RemoveAll(dir); err == nil {
				return
			}
		}
		t.Errorf("removing Caddy's storage %s: %v", dir, err)
	})
	return dir
}
