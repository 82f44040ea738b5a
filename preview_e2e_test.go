package mcpsandbox

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The preview tests run a real Caddy, a real engine and a small web server inside a
// container with network none (testdata/previewserver, built statically and copied in
// through the Docker API, since the test image has neither python nor node).

var previewServer struct {
	once sync.Once
	path string
	err  error
}

// previewServerBinary builds testdata/previewserver once per test process, into one
// place under the temporary directory that every run reuses (Go's build cache makes
// the rebuild quick; the rename makes it safe for processes running at once).
func previewServerBinary(t testing.TB) string {
	t.Helper()
	previewServer.once.Do(func() {
		dir := filepath.Join(os.TempDir(), "mcp-sandbox-previewserver")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			previewServer.err = err
			return
		}
		previewServer.path = filepath.Join(dir, "previewserver")
		tmp := fmt.Sprintf("%s.%d", previewServer.path, os.Getpid())
		cmd := exec.Command("go", "build", "-o", tmp, "./testdata/previewserver")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			previewServer.err = fmt.Errorf("building previewserver: %v\n%s", err, out)
			return
		}
		previewServer.err = os.Rename(tmp, previewServer.path)
	})
	if previewServer.err != nil {
		t.Fatal(previewServer.err)
	}
	return previewServer.path
}

// previewSite is a site with `previews localhost` and the test server copied into its
// container.
type previewSite struct {
	*site
	c    *mcpclient.Client
	web  *http.Client // dials Caddy whatever the host name, as *.localhost does
	opts siteOptions
}

func startPreviewSite(t testing.TB, directives ...string) *previewSite {
	t.Helper()
	return startPreviewSiteAt(t, "http://:%d", directives...)
}

// startPreviewSiteAt is startPreviewSite with a site address (%d is the port).
func startPreviewSiteAt(t testing.TB, address string, directives ...string) *previewSite {
	t.Helper()
	opts := siteOptions{address: address, directive: append([]string{"previews localhost"}, directives...)}
	s := startSite(t, opts)
	ctx := context.Background()
	p := &previewSite{site: s, c: s.client(ctx), opts: opts}
	if res := call(ctx, t, p.c, "execute", map[string]any{"command": "true"}); res.IsError {
		t.Fatal(resultText(res)) // creates the container
	}
	p.copyIn(t)
	p.web = anyHostClient(s.port)
	return p
}

// anyHostClient dials Caddy on port whatever the host name (preview hosts, as
// *.localhost does), and follows no redirects.
func anyHostClient(port int) *http.Client {
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

// copyIn puts the server binary in /usr/local/bin and the page in /sandbox/site.
func (p *previewSite) copyIn(t testing.TB) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, data []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := os.ReadFile(previewServerBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	add("usr/local/bin/previewserver", 0o755, bin)
	files, _ := filepath.Glob("testdata/previewsite/*")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		add("sandbox/site/"+filepath.Base(f), 0o644, data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.docker.CopyToContainer(context.Background(), p.container, "/", &buf, container.CopyToContainerOptions{}); err != nil {
		t.Fatalf("copying the test server into the container: %v", err)
	}
}

// startServer starts the test web server detached, on 127.0.0.1:port.
func (p *previewSite) startServer(t testing.TB, port int) {
	t.Helper()
	p.containerExec(fmt.Sprintf("setsid nohup /usr/local/bin/previewserver -addr 127.0.0.1:%d -dir /sandbox/site > /tmp/previewserver-%d.log 2>&1 < /dev/null &", port, port))
	// Listening before the test goes on: a preview answers 503 until then.
	p.containerExec(fmt.Sprintf("for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/%d) 2>/dev/null && break; sleep 0.1; done", port))
}

// expose calls expose_port and returns its structured result.
func (p *previewSite) expose(t testing.TB, port any) map[string]any {
	t.Helper()
	res := call(context.Background(), t, p.c, "expose_port", map[string]any{"port": port})
	if res.IsError {
		t.Fatalf("expose_port(%v): %s", port, resultText(res))
	}
	return structured(t, res)
}

// get fetches u (a preview URL) and returns the response and its body.
func (p *previewSite) get(t testing.TB, u string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := p.web.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// waitFor polls u until it answers want.
func (p *previewSite) waitFor(t testing.TB, u string, want int) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, body := p.get(t, u)
		if resp.StatusCode == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Logf("in the container: %s", p.tryExec("ps -o pid,args; tail -n 20 /tmp/previewserver-*.log"))
			if log, err := os.ReadFile(filepath.Join(p.storage, "caddy.log")); err == nil {
				t.Logf("Caddy log (end): %s", log[max(0, len(log)-3000):])
			}
			t.Fatalf("GET %s: %d %q, want %d", u, resp.StatusCode, human.Clip(body, 300), want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// relays counts the connections open to port 8000 inside the container (each is a
// relay: a stream of the agent, or an exec on the fallback).
func (p *previewSite) relays(t testing.TB) int {
	t.Helper()
	out := p.containerExec(`grep -cE '^ *[0-9]+: [0-9A-F]+:1F40 [0-9A-F]+:[0-9A-F]+ 01 ' /proc/net/tcp || true`)
	var n int
	fmt.Sscan(strings.TrimSpace(out), &n)
	return n
}

// TestPreviewLifecycle exposes a port before anything listens (a friendly page that
// retries), then serves through the relay with pooled connections, SSE, the Host the
// app sees, exposing again, a config reload, unexpose, and a container restart.
func TestPreviewLifecycle(t *testing.T) {
	p := startPreviewSite(t)
	ctx := context.Background()

	info, err := p.docker.ContainerInspect(ctx, p.container)
	if err != nil || info.HostConfig.NetworkMode != "none" {
		t.Fatalf("container network: %v %v", info.HostConfig.NetworkMode, err)
	}

	out := p.expose(t, 8000)
	u := out["url"].(string)
	parsed, err := url.Parse(u)
	if err != nil || parsed.Scheme != "http" || parsed.Port() != fmt.Sprint(p.port) || !strings.HasSuffix(parsed.Hostname(), ".localhost") {
		t.Fatalf("url %q", u)
	}
	label := strings.TrimSuffix(parsed.Hostname(), ".localhost")
	if len(label) != 26 || strings.ToLower(label) != label {
		t.Fatalf("label %q is not 26 lowercase base32 characters", label)
	}
	if out["listening"] != false || out["port"] != float64(8000) {
		t.Fatalf("structured result: %v", out)
	}
	if exp, err := time.Parse(time.RFC3339, out["expires_at"].(string)); err != nil || time.Until(exp) < 23*time.Hour {
		t.Fatalf("expires_at %v (%v), want about 24h ahead", out["expires_at"], err)
	}
	res := call(ctx, t, p.c, "expose_port", map[string]any{"port": 8000})
	if txt := resultText(res); !strings.Contains(txt, "0.0.0.0 or 127.0.0.1") || !strings.Contains(txt, "retries") {
		t.Fatalf("expose_port text does not tell how to bind and what the person sees: %s", txt)
	}

	// Nothing listens: a page that retries, not a bare 502.
	resp, body := p.get(t, u, "Accept", "text/html,application/xhtml+xml")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `http-equiv="refresh"`) ||
		!strings.Contains(body, "port 8000") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("no listener: %d %q", resp.StatusCode, human.Clip(body, 400))
	}
	resp, body = p.get(t, u+"app.js")
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(body, "<html") {
		t.Fatalf("no listener, asset: %d %q", resp.StatusCode, body)
	}

	p.startServer(t, 8000)
	body = p.waitFor(t, u, http.StatusOK)
	if !strings.Contains(body, "Hello from inside the sandbox") {
		t.Fatalf("index: %q", human.Clip(body, 300))
	}
	if _, hello := p.get(t, u+"hello"); !strings.Contains(hello, "host localhost:8000") {
		t.Fatalf("the app should see Host localhost:8000: %q", hello)
	}
	if again := p.expose(t, 8000); again["url"] != u || again["listening"] != true {
		t.Fatalf("expose again: %v, want the same working URL %s", again, u)
	}

	// Fifty assets over keep-alive: a handful of pooled relays, not one per request.
	p.web.CloseIdleConnections()
	for i := 0; i < 50; i++ {
		resp, _ := p.get(t, u+"style.css")
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/css; charset=utf-8" {
			t.Fatalf("asset %d: %d %s", i, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	if n := p.relays(t); n < 1 || n > 3 {
		t.Fatalf("%d relays after 50 sequential requests; want pooled connections (1-3)", n)
	}

	// SSE arrives event by event, not at the end.
	req, _ := http.NewRequest("GET", u+"sse?count=5", nil)
	start := time.Now()
	sresp, err := p.web.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(sresp.Body)
	first, _ := br.ReadString('\n')
	firstAt := time.Since(start)
	rest, _ := io.ReadAll(br)
	total := time.Since(start)
	sresp.Body.Close()
	if first != "data: tick 1\n" || !strings.Contains(string(rest), "data: tick 5") || total-firstAt < 300*time.Millisecond {
		t.Fatalf("SSE: first %q after %v, all after %v: %q", first, firstAt, total, rest)
	}

	// A reload keeps previews.
	p.load(p.opts)
	if resp, _ := p.get(t, u+"hello"); resp.StatusCode != 200 {
		t.Fatalf("after reload: %d", resp.StatusCode)
	}

	// Unexpose: an open stream ends with it, the old URL answers 404, and exposing
	// again gives a new URL that works.
	sresp, err = p.web.Get(u + "sse?count=200")
	if err != nil {
		t.Fatal(err)
	}
	streamEnded := make(chan time.Time, 1)
	go func() {
		io.Copy(io.Discard, sresp.Body)
		streamEnded <- time.Now()
	}()
	time.Sleep(300 * time.Millisecond)
	unexposedAt := time.Now()
	res = call(ctx, t, p.c, "unexpose_port", map[string]any{"port": "8000"})
	select {
	case at := <-streamEnded:
		if at.Sub(unexposedAt) > 3*time.Second {
			t.Fatalf("the open SSE stream ended %v after unexpose_port", at.Sub(unexposedAt))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an open SSE stream outlived unexpose_port")
	}
	sresp.Body.Close()
	if res.IsError || structured(t, res)["was_exposed"] != true {
		t.Fatalf("unexpose_port: %s", resultText(res))
	}
	if resp, _ := p.get(t, u); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("after unexpose: %d, want 404", resp.StatusCode)
	}
	res = call(ctx, t, p.c, "unexpose_port", map[string]any{"port": 8000})
	if res.IsError || structured(t, res)["was_exposed"] != false {
		t.Fatalf("unexpose_port again: %s", resultText(res))
	}
	u2 := p.expose(t, 8000)["url"].(string)
	if u2 == u {
		t.Fatal("exposing after unexpose returned the closed URL")
	}
	p.waitFor(t, u2, http.StatusOK)

	// Container restart: the server is gone, so the preview shows the waiting page;
	// once the server runs again, the same URL works.
	zero := 0
	if err := p.docker.ContainerRestart(ctx, p.container, container.StopOptions{Timeout: &zero}); err != nil {
		t.Fatal(err)
	}
	resp, body = p.get(t, u2, "Accept", "text/html")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "Waiting for the app") {
		t.Fatalf("after restart: %d %q", resp.StatusCode, human.Clip(body, 300))
	}
	p.startServer(t, 8000)
	p.waitFor(t, u2, http.StatusOK)
	if again := p.expose(t, 8000); again["url"] != u2 || again["listening"] != true {
		t.Fatalf("expose after restart: %v", again)
	}
}

// TestPreviewBadInput: bad ports are tool errors; odd Host headers are served or 404,
// never a panic and never the rest of the site.
func TestPreviewBadInput(t *testing.T) {
	p := startPreviewSite(t)
	ctx := context.Background()
	for _, port := range []any{0, 65536, -1, "abc", "80x", 80.5, true, nil} {
		res := call(ctx, t, p.c, "expose_port", map[string]any{"port": port})
		if !res.IsError || !strings.Contains(resultText(res), "port") {
			t.Errorf("expose_port(%v): %v %s", port, res.IsError, resultText(res))
		}
		res = call(ctx, t, p.c, "unexpose_port", map[string]any{"port": port})
		if !res.IsError {
			t.Errorf("unexpose_port(%v) accepted", port)
		}
	}
	res := call(ctx, t, p.c, "expose_port", map[string]any{})
	if !res.IsError || !strings.Contains(resultText(res), `needs "port"`) {
		t.Errorf("expose_port without port: %s", resultText(res))
	}
	res = call(ctx, t, p.c, "expose_port", map[string]any{"port": 8000, "host": "x"})
	if !res.IsError || !strings.Contains(resultText(res), "accepts: port") {
		t.Errorf("expose_port with an unknown argument: %s", resultText(res))
	}

	p.startServer(t, 8000)
	u := p.expose(t, "8000")["url"].(string) // numbers as strings are accepted
	p.waitFor(t, u, http.StatusOK)
	host := strings.TrimPrefix(strings.TrimSuffix(u, "/"), "http://")
	label, _, _ := strings.Cut(host, ".")
	for _, tc := range []struct {
		host string
		want int
	}{
		{host, 200},
		{strings.ToUpper(host), 200},
		{label + ".LOCALHOST", 200},
		{label + ".localhost.:" + fmt.Sprint(p.port), 200},
		{label + ".localhost.", 200},
		{"x." + host, 404},
		{label + "a.localhost", 404},
		{label[:25] + ".localhost", 404},
		{strings.Repeat(label, 40) + ".localhost", 404},
		{strings.Repeat("a", 63) + ".localhost", 404},
		{"aaaaaaaaaaaaaaaaaaaaaaaaaa.localhost", 404},
		{"localhost", 200}, // the previews domain itself is the site: the next handler
		{"127.0.0.1", 200},
	} {
		resp, body := p.get(t, "http://ignored/hello", "Host", tc.host)
		if resp.StatusCode != tc.want {
			t.Errorf("Host %.60q: %d %q, want %d", tc.host, resp.StatusCode, human.Clip(body, 100), tc.want)
		}
		if tc.want == 404 && !strings.Contains(body, "preview does not exist") {
			t.Errorf("Host %.60q: 404 body %q", tc.host, body)
		}
	}
}

// TestPreviewExpiry: a short preview_ttl ends the URL (404), and exposing again works.
func TestPreviewExpiry(t *testing.T) {
	// The site address of the README's local example: the site's host and *.localhost.
	p := startPreviewSiteAt(t, "http://127.0.0.1:%d, http://*.localhost:%d", "preview_ttl 2s")
	p.startServer(t, 8000)
	out := p.expose(t, 8000)
	u := out["url"].(string)
	p.waitFor(t, u, http.StatusOK)
	exp, _ := time.Parse(time.RFC3339, out["expires_at"].(string))
	time.Sleep(time.Until(exp) + 1500*time.Millisecond)
	if resp, _ := p.get(t, u); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("after expiry: %d, want 404", resp.StatusCode)
	}
	u2 := p.expose(t, 8000)["url"].(string)
	if u2 == u {
		t.Fatal("an expired URL came back")
	}
	p.waitFor(t, u2, http.StatusOK)
}

// TestPreviewAuth: with preview_auth on, the person signs in once with the API key; the
// cookie is host-only and never reaches the app; wrong keys are refused.
func TestPreviewAuth(t *testing.T) {
	p := startPreviewSite(t, "preview_auth on")
	p.startServer(t, 8000)
	u := p.expose(t, 8000)["url"].(string)

	resp, body := p.get(t, u+"hello", "Accept", "text/html")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "API key") {
		t.Fatalf("without cookie: %d %q", resp.StatusCode, human.Clip(body, 200))
	}
	post := func(key, next string) *http.Response {
		form := url.Values{"key": {key}, "next": {next}}
		resp, err := p.web.PostForm(u+".mcp-sandbox/preview-signin", form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post("wrong key", "/hello"); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong key: %d %v", resp.StatusCode, resp.Cookies())
	}
	resp = post(p.key, "/cookies")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/cookies" {
		t.Fatalf("right key: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "mcp_sandbox_preview" {
			cookie = c
		}
	}
	if cookie == nil || cookie.Domain != "" || !cookie.HttpOnly || cookie.Path != "/" {
		t.Fatalf("cookie: %+v", cookie)
	}
	if resp := post(p.key, "//evil.example/"); resp.Header.Get("Location") != "/" {
		t.Fatalf("open redirect: %q", resp.Header.Get("Location"))
	}
	resp, body = p.get(t, u+"cookies", "Cookie", cookie.Name+"="+cookie.Value+"; theirs=1")
	if resp.StatusCode != 200 || body != "theirs=1" {
		t.Fatalf("with cookie: %d, the app saw cookies %q (want only its own)", resp.StatusCode, body)
	}
	// The cookie is bound to its preview: another preview does not accept it.
	p.startServer(t, 8001)
	u2 := p.expose(t, 8001)["url"].(string)
	if resp, _ := p.get(t, u2+"hello", "Cookie", cookie.Name+"="+cookie.Value); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("cookie of another preview: %d", resp.StatusCode)
	}
}

// TestPreviewWebSocketBytes: bytes sent to the person over an upgraded connection count
// in caddy_mcp_sandbox_preview_bytes_total, as those of plain responses do.
func TestPreviewWebSocketBytes(t *testing.T) {
	p := startPreviewSite(t)
	p.startServer(t, 8000)
	u := p.expose(t, 8000)["url"].(string)
	p.waitFor(t, u+"hello", http.StatusOK)
	host := strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/")

	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", host)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", err, resp)
	}
	before := counterValue(t, metrics.PreviewBytes)

	// One masked text frame of 100,000 bytes (64-bit length, a zero mask), then a close.
	const n = 100000
	frame := []byte{0x81, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint64(frame[2:10], n)
	if _, err := conn.Write(append(frame, bytes.Repeat([]byte("w"), n)...)); err != nil {
		t.Fatal(err)
	}
	var head [10]byte
	if _, err := io.ReadFull(br, head[:]); err != nil || head[1] != 127 || binary.BigEndian.Uint64(head[2:]) != n {
		t.Fatalf("echo frame header %x: %v", head, err)
	}
	if _, err := io.CopyN(io.Discard, br, n); err != nil {
		t.Fatalf("echo payload: %v", err)
	}
	if _, err := conn.Write([]byte{0x88, 0x80, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, br) // the close echo, then the end of the tunnel
	conn.Close()

	var got float64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = counterValue(t, metrics.PreviewBytes) - before; got >= n+10 {
			return
		}
	}
	t.Fatalf("preview bytes counted for the WebSocket: %v, want at least %d", got, n+10)
}

// counterValue reads a Prometheus counter.
func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
