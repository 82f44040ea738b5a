package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/browsertest"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// sharedPage is an HTML page the model shares: its script writes into the page, then
// tries to reach the site (its MCP endpoint and the page's own download link) and any
// other server, and says what it reached.
const sharedPage = `<!doctype html><html><head><title>Report</title><style>h1{color:#2a7ae2}</style></head>
<body><h1>Quarterly report</h1><p id="ran">script did not run</p><p id="net">pending</p>
<script>
document.getElementById("ran").textContent = "script ran";
const tries = [%q, %q, "http://127.0.0.1:9/"].map((u) => fetch(u).then(() => "reached " + u, () => "blocked"));
Promise.all(tries).then((r) => { document.getElementById("net").textContent = r.join(", ") + " origin=" + self.origin; });
</script></body></html>`

// TestFileAppInHost: share_file's app, in the reference host, shows a shared image
// inline and a shared HTML page in a frame of its own: the page's script runs, but it
// reaches nothing, neither the site (its MCP endpoint, its own link) nor another
// server, and its origin is opaque. A download link answers CORS for a valid link
// only. Screenshots: testdata/artifacts/app-file-*.png.
func TestFileAppInHost(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	host := appsHost(t)
	ui, _ := rawSessionWith(s, t, uiCapabilities)

	// An image.
	img := image.NewRGBA(image.Rect(0, 0, 120, 80))
	for x := 0; x < 120; x++ {
		for y := 0; y < 80; y++ {
			img.Set(x, y, color.RGBA{uint8(2 * x), uint8(3 * y), 200, 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	s.ContainerExec("mkdir -p /sandbox/out && echo " + base64.StdEncoding.EncodeToString(buf.Bytes()) + " | base64 -d > /sandbox/out/chart.png")
	input := map[string]any{"path": "out/chart.png"}
	result := ui.mustCall("tools/call", map[string]any{"name": "share_file", "arguments": input})
	resource := ui.mustCall("resources/read", map[string]any{"uri": "ui://mcp-sandbox/file.html"})
	b, app := showApp(t, host, "Plot the answers by region.", "Here is the chart.", input, result, resource)
	if _, err := chromedp.Run(app, chromedp.Poll[bool](`(() => { const i = document.getElementById('img');
		return !i.hidden && i.complete && i.naturalWidth === 120; })()`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		st, _ := chromedp.Run(app, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("the app does not show the image: %v; it shows %q", err, st)
	}
	browsertest.Screenshot(t, b, "app-file-image.png")

	// An HTML page.
	// The page tries its own link: share it once to learn the URL, then write it.
	s.ContainerExec("touch /sandbox/out/report.html")
	var res struct {
		Structured struct {
			URL string `json:"url"`
		} `json:"structuredContent"`
	}
	first := ui.mustCall("tools/call", map[string]any{"name": "share_file", "arguments": map[string]any{"path": "out/report.html"}})
	if err := json.Unmarshal(first, &res); err != nil || res.Structured.URL == "" {
		t.Fatalf("share_file: %v %s", err, first)
	}
	pageURL := res.Structured.URL
	page := fmt.Sprintf(sharedPage, s.URL+"/mcp", pageURL)
	s.ContainerExec("printf '%s' " + shellQuote(page) + " > /sandbox/out/report.html")
	input = map[string]any{"path": "out/report.html"}
	result = ui.mustCall("tools/call", map[string]any{"name": "share_file", "arguments": input})
	b, app = showApp(t, host, "Make me a report page.", "Here it is.", input, result, resource)
	if _, err := chromedp.Run(app, chromedp.Poll[bool](`!document.getElementById('page').hidden`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		st, _ := chromedp.Run(app, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("the app does not show the page: %v; it shows %q", err, st)
	}
	// The page's frame: read it through the DOM of the app's target (an opaque origin
	// is not readable from the app's script, as it should be).
	var text string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		frames, err := chromedp.Run(app, chromedp.Nodes(chromedp.ID("page")))
		if err != nil || len(frames) == 0 {
			t.Fatalf("no page frame in the app: %v", err)
		}
		ctx, cancel := context.WithTimeout(app, 2*time.Second)
		got, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body"), chromedp.FromNode(frames[0])))
		cancel()
		if err == nil && strings.Contains(got, "origin=") {
			text = got
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("the shared page shows: %q", text)
	if !strings.Contains(text, "Quarterly report") || !strings.Contains(text, "script ran") || strings.Contains(text, "reached") ||
		strings.Count(text, "blocked") != 3 {
		t.Errorf("the shared page shows %q: want it rendered, its script run, and every request blocked", text)
	}
	if !strings.Contains(text, "origin=null") {
		t.Errorf("the shared page's origin is not opaque: %q", text)
	}
	time.Sleep(300 * time.Millisecond)
	browsertest.Screenshot(t, b, "app-file-page.png")

	// CORS: a valid link may be read by any page, without credentials; a tampered one
	// gets no CORS header.
	for _, c := range []struct {
		url  string
		cors bool
	}{{pageURL, true}, {strings.Replace(pageURL, "report.html", "report.htm1", 1), false}} {
		req, _ := http.NewRequest(http.MethodGet, c.url, nil)
		req.Header.Set("Origin", "null")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Access-Control-Allow-Origin"); (got == "*") != c.cors || resp.Header.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("GET %s: %d, Access-Control-Allow-Origin %q", c.url, resp.StatusCode, got)
		}
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
