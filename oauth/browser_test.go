package oauth

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's chromium, which `make test` installs.
const chromiumPath = "/usr/bin/chromium"

// newBrowser starts a headless chromium with a fresh profile. A missing browser fails
// the test: the sign-in page must be seen working in a real browser.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is required for this test (make test installs it): %v", err)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(900, 820),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
	)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
		cancelAlloc()
	})
	return ctx
}

func saveScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := filepath.Join("testdata", "artifacts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSignInPageInBrowser drives the sign-in page in headless chromium: it names the
// client, a wrong key shows an error, and the right key lands on the client's loopback
// redirect URI with code, state and iss (so the CSP lets the redirect through).
func TestSignInPageInBrowser(t *testing.T) {
	got := make(chan url.Values, 1)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cb" {
			select {
			case got <- r.URL.Query():
			default:
			}
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<!doctype html><title>done</title><p>You can return to the app.")
	}))
	defer target.Close()

	e := newTestEnv(t, nil)
	reg := e.register(map[string]any{
		"redirect_uris":              []string{"http://127.0.0.1/cb"}, // any port, RFC 8252
		"token_endpoint_auth_method": "none",
		"client_name":                "Claude",
	})
	redirectURI := target.URL + "/cb"
	params, verifier := authParamsFor(e, reg.ClientID, redirectURI)
	params.Set("state", "browser-state")

	ctx := newBrowser(t)
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(e.url("/authorize?"+params.Encode())))
	if err != nil {
		t.Fatalf("opening the sign-in page: %v", err)
	}
	if resp.Status != http.StatusOK {
		t.Fatalf("sign-in page status %d", resp.Status)
	}
	name, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("client-name")))
	if err != nil || name != "Claude" {
		t.Fatalf("client name on the page: %q %v", name, err)
	}
	where, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("redirect-host")))
	if err != nil || !strings.Contains(where, strings.TrimPrefix(target.URL, "http://")) {
		t.Fatalf("redirect host on the page: %q %v", where, err)
	}
	saveScreenshot(t, ctx, "signin.png")

	// A wrong key: the page again, with an error.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("api_key"), "not the key")); err != nil {
		t.Fatal(err)
	}
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("submit")))
	if err != nil {
		t.Fatalf("submitting a wrong key: %v", err)
	}
	if resp.Status != http.StatusForbidden {
		t.Fatalf("wrong key answered %d", resp.Status)
	}
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("error")))
	if err != nil || !strings.Contains(msg, "not correct") {
		t.Fatalf("error after a wrong key: %q %v", msg, err)
	}
	saveScreenshot(t, ctx, "signin-wrong-key.png")

	// The right key: a 303 to the client's loopback redirect URI.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("api_key"), testKey)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("submit"))); err != nil {
		t.Fatalf("submitting the key: %v", err)
	}
	var q url.Values
	select {
	case q = <-got:
	case <-time.After(20 * time.Second):
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		t.Fatalf("the browser never reached the redirect URI; it is at %s", loc)
	}
	if q.Get("code") == "" || q.Get("state") != "browser-state" || q.Get("iss") != e.origin {
		t.Fatalf("redirect query %v", q)
	}
	status, tok, oe := e.tokenCall(url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {q.Get("code")},
		"code_verifier": {verifier},
		"redirect_uri":  {redirectURI},
		"client_id":     {reg.ClientID},
	})
	if status != http.StatusOK || e.callMCP(tok.AccessToken) != http.StatusOK {
		t.Fatalf("exchanging the browser's code: %d %v", status, oe)
	}
}
