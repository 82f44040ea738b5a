package oauth

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/browsertest"
)

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

	ctx := browsertest.New(t, 900, 820, 90*time.Second)
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
	browsertest.Screenshot(t, ctx, "signin.png")

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
	browsertest.Screenshot(t, ctx, "signin-wrong-key.png")

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
