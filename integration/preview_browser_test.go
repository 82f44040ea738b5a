package integration

import (
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/browsertest"
)

// TestPreviewInBrowser opens a preview in headless Chromium through a real Caddy
// (Chromium resolves *.localhost to loopback itself): the page served inside the
// container (network none) loads its stylesheet, script and image, holds a WebSocket
// whose echo round trips work, and receives Server-Sent Events. The screenshot is kept
// in testdata/artifacts/preview.png.
func TestPreviewInBrowser(t *testing.T) {
	p := startPreviewSite(t)
	p.startServer(t, 8000)
	u := p.expose(t, 8000)["url"].(string)
	p.waitFor(t, u, http.StatusOK)

	ctx := browsertest.New(t, 900, 600, 90*time.Second)

	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(u))
	if err != nil {
		t.Fatalf("opening %s: %v", u, err)
	}
	if resp.Status != 200 {
		t.Fatalf("%s answered %d", u, resp.Status)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('status').textContent === 'all good'`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		state := map[string]string{}
		for _, id := range []string{"css", "js", "img", "ws", "sse", "status"} {
			state[id], _ = chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
		}
		t.Fatalf("the page did not come up fully: %v %v", err, state)
	}
	open, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.wsState()`))
	if err != nil || open != 1 {
		t.Fatalf("WebSocket state %d (%v), want 1 (open)", open, err)
	}
	browsertest.Screenshot(t, ctx, "preview.png")
}
