package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/browsertest"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// The apps in the reference host: the AppBridge of @modelcontextprotocol/ext-apps, in
// headless Chromium, runs each app in a sandboxed iframe (an opaque origin) under the
// CSP its resource declares, and gives it the tool result read through a real Caddy.

// appsHostDir holds the host page and its npm dependencies (scripts/test-deps.sh).
const appsHostDir = "testdata/apps-host"

// appsHost serves the host page on loopback, its script bundled with esbuild from the
// installed reference SDK, and returns the page's URL.
func appsHost(t *testing.T) string {
	t.Helper()
	esbuild, err := filepath.Abs(filepath.Join(appsHostDir, "node_modules", ".bin", "esbuild"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(esbuild); err != nil {
		t.Fatalf("the apps host's npm packages are missing: run scripts/test-deps.sh (%v)", err)
	}
	bundle := filepath.Join(t.TempDir(), "host.js")
	cmd := exec.Command(esbuild, "host.mjs", "--bundle", "--format=esm", "--log-level=warning", "--outfile="+bundle)
	cmd.Dir = appsHostDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bundling the host: %v\n%s", err, out)
	}
	page, err := os.ReadFile(filepath.Join(appsHostDir, "host.html"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write(page)
		case "/host.js":
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			w.Write(js)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

// showApp opens the host page and shows the app of a tool call in it: the tool's
// result and the app's resource (HTML and _meta) as the site gave them. It returns
// the browser and a context attached to the app's frame.
func showApp(t *testing.T, hostURL, ask, answer string, input map[string]any, result, resource json.RawMessage) (browser, app context.Context) {
	t.Helper()
	var read struct {
		Contents []struct {
			Text string          `json:"text"`
			Meta json.RawMessage `json:"_meta"`
		} `json:"contents"`
	}
	if err := json.Unmarshal(resource, &read); err != nil || len(read.Contents) != 1 {
		t.Fatalf("resources/read: %v %.200s", err, resource)
	}
	data, _ := json.Marshal(map[string]any{"html": read.Contents[0].Text, "meta": read.Contents[0].Meta, "input": input, "result": result})

	b := browsertest.New(t, 820, 640, 2*time.Minute)
	if err := chromedp.Do(b, chromedp.Navigate(hostURL)); err != nil {
		t.Fatalf("opening the host: %v", err)
	}
	if _, err := chromedp.Run(b, chromedp.Poll[bool](`typeof window.showApp === 'function'`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the host's script did not load: %v", err)
	}
	q, _ := json.Marshal(ask)
	a, _ := json.Marshal(answer)
	if _, err := chromedp.Run(b, chromedp.Evaluate[bool](fmt.Sprintf(`document.getElementById('ask').textContent = %s;
		document.getElementById('answer').textContent = %s; window.showApp(%s); true`, q, a, data))); err != nil {
		t.Fatalf("showing the app: %v", err)
	}
	// The handshake: the app sent ui/initialize, the bridge answered, the app said
	// it is initialized.
	if _, err := chromedp.Run(b, chromedp.Poll[bool](`window.host.initialized === true`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		errs, _ := chromedp.Run(b, chromedp.Evaluate[string](`JSON.stringify(window.host)`))
		t.Fatalf("the app and the bridge did not complete the handshake: %v; host %s", err, errs)
	}
	name, _ := chromedp.Run(b, chromedp.Evaluate[string](`window.host.appInfo && window.host.appInfo.name`))
	policy, _ := chromedp.Run(b, chromedp.Evaluate[string](`window.host.policy`))
	t.Logf("app %q initialized under %q", name, policy)

	// A sandboxed iframe runs in its own process: attach to it as a target.
	var id target.ID
	deadline := time.Now().Add(10 * time.Second)
	for id == "" && time.Now().Before(deadline) {
		infos, err := chromedp.Targets(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range infos {
			if info.Type == "iframe" && info.URL == "about:srcdoc" { // not a frame the app holds
				id = info.TargetID
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if id == "" {
		t.Fatal("the app's iframe is not a target of its own")
	}
	// Attach once the app has drawn the tool result (its size reports stop): chromedp
	// reads the frame's nodes at attach time without a lock its DOM events take, and
	// the race detector sees that when the app's DOM changes under the attach.
	settleApp(t, b)
	app, cancel := chromedp.NewContext(b, chromedp.WithTargetID(id))
	t.Cleanup(cancel)
	if _, err := chromedp.Run(app, chromedp.Evaluate[bool](`true`)); err != nil {
		t.Fatalf("attaching to the app's frame: %v", err)
	}
	return b, app
}

// settleApp waits, up to 5 s, until the app's size reports to the host have stopped
// for 600 ms.
func settleApp(t *testing.T, b context.Context) {
	t.Helper()
	last, quiet := -1, 0
	for deadline := time.Now().Add(5 * time.Second); quiet < 3 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		n, err := chromedp.Run(b, chromedp.Evaluate[int](`window.host.heights.length`))
		if err != nil {
			t.Fatalf("reading the host's state: %v", err)
		}
		if n == last {
			quiet++
		} else {
			last, quiet = n, 0
		}
	}
}

// TestUploadAppInHost: upload_link's app, in the reference host, gets the tool result
// through the bridge, shows where files go, and a file chosen in it is uploaded at
// once to the signed link (a cross-origin PUT from the app's opaque origin, allowed by
// the link's CORS preflight and the app's CSP) and lands in the sandbox; the app says
// where. Screenshots: testdata/artifacts/app-upload-*.png.
func TestUploadAppInHost(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	host := appsHost(t)
	ui, _ := rawSessionWith(s, t, uiCapabilities)
	input := map[string]any{"directory": "/sandbox/from-app"}
	result := ui.mustCall("tools/call", map[string]any{"name": "upload_link", "arguments": input})
	resource := ui.mustCall("resources/read", map[string]any{"uri": "ui://mcp-sandbox/upload.html"})

	b, app := showApp(t, host, "Here is my survey: please chart the answers by region.",
		"Use the form below to send the file; I will read it from /sandbox/from-app.", input, result, resource)
	// The tool result arrived: the app names the directory of this call.
	if _, err := chromedp.Run(app, chromedp.Poll[bool](`!document.getElementById('drop').hidden &&
		document.getElementById('where').textContent.includes('/sandbox/from-app')`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		st, _ := chromedp.Run(app, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("the app did not show the upload form for the tool result: %v; it shows %q", err, st)
	}
	browsertest.Screenshot(t, b, "app-upload-before.png")

	dir := t.TempDir()
	file := filepath.Join(dir, "survey 2026.csv")
	body := "region,answer\nnorth,yes\nsouth,no\n" + strings.Repeat("east,maybe\n", 20000)
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(app, chromedp.SetUploadFiles(chromedp.ID("pick"), []string{file})); err != nil {
		t.Fatalf("choosing the file in the app: %v", err)
	}
	if _, err := chromedp.Run(app, chromedp.Poll[bool](`(() => { const n = document.querySelector('#list li small');
		return !!n && n.className !== ''; })()`, chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		t.Fatalf("the upload did not finish: %v", err)
	}
	note, _ := chromedp.Run(app, chromedp.Evaluate[string](`document.querySelector('#list li small').textContent`))
	path, _ := chromedp.Run(app, chromedp.Evaluate[string](`document.querySelector('#list li small').dataset.path || ''`))
	if path != "/sandbox/from-app/survey 2026.csv" || !strings.Contains(note, "Saved /sandbox/from-app/survey 2026.csv") {
		t.Fatalf("the app says %q (path %q), want where the file landed", note, path)
	}
	if got := s.ContainerExec("wc -c < '/sandbox/from-app/survey 2026.csv'"); strings.TrimSpace(got) != fmt.Sprint(len(body)) {
		t.Errorf("the file in the sandbox has %s bytes, want %d", got, len(body))
	}
	if bar, _ := chromedp.Run(app, chromedp.Evaluate[float64](`document.querySelector('#list progress').value`)); bar != 1 {
		t.Errorf("the progress bar ends at %v, want 1", bar)
	}
	browsertest.Screenshot(t, b, "app-upload-after.png")
}

// TestPreviewAppInHost: expose_port's app, in the reference host, frames the live
// preview (its origin allowed by frameDomains) and offers to open it full size
// through the host (ui/open-link). Screenshot: testdata/artifacts/app-preview.png.
func TestPreviewAppInHost(t *testing.T) {
	p := startPreviewSite(t)
	p.startServer(t, 8000)
	host := appsHost(t)
	ui, _ := rawSessionWith(p.Site, t, uiCapabilities)
	input := map[string]any{"port": 8000}
	result := ui.mustCall("tools/call", map[string]any{"name": "expose_port", "arguments": input})
	var res struct {
		Structured struct {
			URL string `json:"url"`
		} `json:"structuredContent"`
	}
	if err := json.Unmarshal(result, &res); err != nil || res.Structured.URL == "" {
		t.Fatalf("expose_port: %v %s", err, result)
	}
	p.waitFor(t, res.Structured.URL, http.StatusOK)
	resource := ui.mustCall("resources/read", map[string]any{"uri": "ui://mcp-sandbox/preview.html"})

	b, app := showApp(t, host, "Show me the dashboard you built.", "It is running: here is the live preview.", input, result, resource)
	if _, err := chromedp.Run(app, chromedp.Poll[bool](fmt.Sprintf(`document.getElementById('view').src === %q &&
		!document.getElementById('view').hidden && document.getElementById('open').href === %q`, res.Structured.URL, res.Structured.URL),
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		st, _ := chromedp.Run(app, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("the app does not frame the preview: %v; it shows %q", err, st)
	}
	// The preview's own page came up inside the app (its frame is another target).
	var previewTarget target.ID
	deadline := time.Now().Add(30 * time.Second)
	for previewTarget == "" && time.Now().Before(deadline) {
		infos, _ := chromedp.Targets(b)
		for _, info := range infos {
			if info.Type == "iframe" && info.URL == res.Structured.URL {
				previewTarget = info.TargetID
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if previewTarget == "" {
		t.Fatalf("the preview %s was not loaded in the app", res.Structured.URL)
	}
	pv, cancel := chromedp.NewContext(b, chromedp.WithTargetID(previewTarget))
	defer cancel()
	// The frame inherits the app's sandbox (an opaque origin): the page, its
	// stylesheet, script, image and WebSocket work; requests that need CORS (its
	// EventSource) depend on the app in it.
	if _, err := chromedp.Run(pv, chromedp.Poll[bool](`['css', 'js', 'img', 'ws'].every((id) => document.getElementById(id).className === 'ok')`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		st, _ := chromedp.Run(pv, chromedp.Evaluate[string](`document.body.innerText`))
		t.Errorf("the preview page inside the app did not come up: %v; it shows %q", err, st)
	}
	st, _ := chromedp.Run(pv, chromedp.Evaluate[string](`document.body.innerText`))
	t.Logf("the framed preview shows: %q", st)
	time.Sleep(300 * time.Millisecond)
	browsertest.Screenshot(t, b, "app-preview.png")

	if err := chromedp.Do(app, chromedp.Click(chromedp.ID("open"))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(b, chromedp.Poll[bool](fmt.Sprintf(`window.host.links.includes(%q)`, res.Structured.URL),
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Errorf("open full size did not ask the host to open the preview: %v", err)
	}
}
