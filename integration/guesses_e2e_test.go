package integration

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestWrongKeysShareOneBudget: wrong keys count against one budget per address,
// wherever they are tried (bearer tokens on /mcp, the preview sign-in, the console API),
// and the count survives a config reload. A token the server issued and then revoked is
// no guess, however often a client retries with it. Once the budget is spent, no key is
// looked at until the address's first wait is over; then the right key works.
func TestWrongKeysShareOneBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and a real Caddy")
	}
	opts := testsite.Options{Address: "http://:%d", Directive: []string{"previews localhost", "preview_auth on"}}
	s := testsite.Start(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	res := testsite.Call(ctx, t, c, "expose_port", map[string]any{"port": 8000})
	if res.IsError {
		t.Fatalf("expose_port: %s", testsite.ResultText(res))
	}
	u, err := url.Parse(testsite.Structured(t, res)["url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	previewSignin := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/.mcp-sandbox/preview-signin",
			strings.NewReader(url.Values{"key": {key}, "next": {"/"}}.Encode()))
		req.Host = u.Host
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := previewSignin(s.Key); got != http.StatusSeeOther {
		t.Fatalf("the right key on the preview sign-in: %d, want 303", got)
	}

	// A revoked token of ours, retried far more often than the budget, costs nothing.
	token := s.OAuthToken(ctx, t, "Stale client")
	resp, err := http.PostForm(s.URL+"/revoke", url.Values{"token": {token}})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %v %v", err, resp)
	}
	resp.Body.Close()
	for i := range 15 {
		if got := statusWithToken(t, s.URL, token); got != http.StatusUnauthorized {
			t.Fatalf("revoked token, try %d: %d, want 401 (a revoked token is no guess)", i+1, got)
		}
	}

	// Five wrong bearer tokens, a reload, five wrong keys on the preview sign-in: ten.
	for i := range 5 {
		if got := statusWithToken(t, s.URL, "guess-"+testenv.RandomHex(16)); got != http.StatusUnauthorized {
			t.Fatalf("wrong bearer token %d: %d, want 401", i+1, got)
		}
	}
	s.Load(opts)
	for i := range 5 {
		if got := previewSignin("guess-" + testenv.RandomHex(16)); got != http.StatusUnauthorized {
			t.Fatalf("wrong key %d on the preview sign-in (after five wrong bearer tokens and a reload): %d, want 401", i+1, got)
		}
	}
	// The budget is spent: every place refuses, even the right key, for a while.
	if got := previewSignin(s.Key); got != http.StatusTooManyRequests {
		t.Errorf("the right key on the preview sign-in after ten wrong keys: %d, want 429", got)
	}
	if got := statusWithToken(t, s.URL, s.Key); got != http.StatusTooManyRequests {
		t.Errorf("the API key as bearer token after ten wrong keys: %d, want 429", got)
	}
	if got := apiCall(t, s, http.MethodGet, "/activity", nil); got != http.StatusTooManyRequests {
		t.Errorf("the console API with the right key after ten wrong keys: %d, want 429", got)
	}
	testenv.WaitFor(t, 30*time.Second, "the right key to work again", func() bool {
		return apiCall(t, s, http.MethodGet, "/activity", nil) == http.StatusOK
	})
}
