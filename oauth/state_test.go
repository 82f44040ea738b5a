package oauth

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// redeemConcurrently sends the same code to every handler at once and counts successes.
func redeemConcurrently(t *testing.T, e *testEnv, c issuedCode, handlers []http.Handler) int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for _, h := range handlers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := httptest.NewRequest(http.MethodPost, e.url("/token"), strings.NewReader(c.form().Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code == http.StatusOK {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ok
}

// TestConcurrentRedemption: one code sent many times at once, to one server and to two
// servers sharing the storage, yields tokens exactly once.
func TestConcurrentRedemption(t *testing.T) {
	e := newTestEnv(t, nil)
	reg := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})

	c := e.newCode(reg.ClientID, httpsRedirect)
	handlers := make([]http.Handler, 8)
	for i := range handlers {
		handlers[i] = e.server()
	}
	if n := redeemConcurrently(t, e, c, handlers); n != 1 {
		t.Fatalf("one server: %d successful redemptions of one code, want 1", n)
	}

	other, err := New(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	c = e.newCode(reg.ClientID, httpsRedirect)
	if n := redeemConcurrently(t, e, c, []http.Handler{e.server(), other, e.server(), other}); n != 1 {
		t.Fatalf("two servers: %d successful redemptions of one code, want 1", n)
	}
}

// TestCorruptEntries: an unreadable entry makes only its own token or client invalid;
// nothing panics, other sign-ins keep working, and Prune leaves the rest alone.
func TestCorruptEntries(t *testing.T) {
	e := newTestEnv(t, nil)
	reg := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})
	_, good, _ := e.tokenCall(e.newCode(reg.ClientID, httpsRedirect).form())
	_, bad, _ := e.tokenCall(e.newCode(reg.ClientID, httpsRedirect).form())
	broken := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})

	st := e.server().store
	ctx := e.ctx()
	for _, k := range []string{st.key(kindAccess, hashSecret(bad.AccessToken)), st.key(kindRefresh, hashSecret(bad.RefreshToken)),
		st.key(kindClients, broken.ClientID)} {
		if err := e.storage.Store(ctx, k, []byte("{not json")); err != nil {
			t.Fatal(err)
		}
	}
	e.restart(e.opts) // no cached state
	if got := e.callMCP(bad.AccessToken); got != http.StatusUnauthorized {
		t.Fatalf("corrupt access token: %d", got)
	}
	e.wantTokenError(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {bad.RefreshToken}, "client_id": {reg.ClientID}},
		http.StatusBadRequest, "invalid_grant")
	params, _ := authParamsFor(e, broken.ClientID, httpsRedirect)
	resp, body := e.get("/authorize?" + params.Encode())
	wantPage(t, resp, body, http.StatusBadRequest, "Unknown application")

	if got := e.callMCP(good.AccessToken); got != http.StatusOK {
		t.Fatalf("good token next to corrupt ones: %d", got)
	}
	before := len(e.keys())
	if err := e.server().Prune(ctx); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if after := len(e.keys()); after != before {
		t.Fatalf("Prune changed %d keys with nothing expired", before-after)
	}
	if got := e.callMCP(good.AccessToken); got != http.StatusOK {
		t.Fatalf("good token after Prune: %d", got)
	}
	if !strings.Contains(e.logs.String(), "unreadable") {
		t.Fatal("corrupt entries were not logged")
	}
}

// TestPrune: expired codes, tokens and grants go; live ones stay; registrations unused
// for 30 days go unless a live sign-in uses them.
func TestPrune(t *testing.T) {
	e := newTestEnv(t, func(o *Options) {
		o.AccessTokenTTL = time.Hour
		o.RefreshTokenTTL = 24 * time.Hour
	})
	ctx := e.ctx()
	count := func(kind string) int {
		ids, err := e.server().store.list(ctx, kind)
		if err != nil {
			t.Fatal(err)
		}
		return len(ids)
	}
	active := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})
	idle := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})
	_ = e.newCode(active.ClientID, httpsRedirect) // never redeemed
	_, tok, _ := e.tokenCall(e.newCode(active.ClientID, httpsRedirect).form())

	e.clock.Advance(2 * time.Hour) // codes and the access token expire
	if err := e.server().Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(kindCodes); n != 0 {
		t.Errorf("%d codes left after expiry", n)
	}
	if n := count(kindAccess); n != 0 {
		t.Errorf("%d access tokens left after expiry", n)
	}
	if count(kindGrants) != 1 || count(kindRefresh) != 1 || count(kindClients) != 2 {
		t.Fatalf("live state pruned: grants %d refresh %d clients %d", count(kindGrants), count(kindRefresh), count(kindClients))
	}
	// The sign-in still refreshes.
	status, _, oe := e.tokenCall(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}, "client_id": {active.ClientID}})
	if status != http.StatusOK {
		t.Fatalf("refresh after Prune: %d %v", status, oe)
	}

	// Long after: grants and refresh tokens expire, then unused registrations go.
	e.clock.Advance(unusedClientTTL + 48*time.Hour)
	if err := e.server().Prune(ctx); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{kindCodes, kindGrants, kindAccess, kindRefresh, kindClients} {
		if n := count(kind); n != 0 {
			t.Errorf("%d %s left", n, kind)
		}
	}
	_ = idle
}

// TestClientCap: registration stops at the cap with a clear error, and registrations
// that never led to a sign-in make room after an hour.
func TestClientCap(t *testing.T) {
	e := newTestEnv(t, nil)
	e.server().maxClients = 3
	meta := map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"}
	used := e.register(meta)
	_ = e.newCode(used.ClientID, httpsRedirect)
	e.register(meta)
	e.register(meta)
	body, _ := json.Marshal(meta)
	resp, out := e.postJSON("/register", body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(out), "registered clients") {
		t.Fatalf("registration over the cap: %d %s", resp.StatusCode, out)
	}
	e.clock.Advance(abandonedClientAge + time.Minute)
	e.register(meta)
	ids, _ := e.server().store.list(e.ctx(), kindClients)
	if len(ids) != 2 {
		t.Fatalf("%d clients after making room, want 2 (the one that signed in and the new one)", len(ids))
	}
	if _, err := e.server().lookupClient(e.ctx(), used.ClientID); err != nil {
		t.Fatalf("the client that signed in was dropped: %v", err)
	}
}

// TestRegistrationRateLimit: one address cannot register without bound.
func TestRegistrationRateLimit(t *testing.T) {
	e := newTestEnv(t, nil)
	meta := map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"}
	for range registerMaxPerWindow {
		e.register(meta)
	}
	body, _ := json.Marshal(meta)
	resp, _ := e.postJSON("/register", body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("registration over the per-address limit: %d", resp.StatusCode)
	}
	e.clock.Advance(registerWindow)
	e.register(meta)
}

// TestConfidentialClient: a client_secret_post client gets a secret that is stored
// only as a hash and must be presented at the token endpoint.
func TestConfidentialClient(t *testing.T) {
	e := newTestEnv(t, nil)
	reg := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "client_secret_post"})
	if reg.ClientSecret == "" || reg.TokenEndpointAuthMethod != "client_secret_post" {
		t.Fatalf("registration: %+v", reg)
	}
	data, err := e.storage.Load(e.ctx(), e.server().store.key(kindClients, reg.ClientID))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), reg.ClientSecret) || !strings.Contains(string(data), hashSecret(reg.ClientSecret)) {
		t.Fatalf("the client secret is not stored as a hash only: %s", data)
	}
	c := e.newCode(reg.ClientID, httpsRedirect)
	f := c.form()
	f.Set("client_secret", reg.ClientSecret)
	if status, _, oe := e.tokenCall(f); status != http.StatusOK {
		t.Fatalf("client_secret_post: %d %v", status, oe)
	}
	// The same secret by HTTP Basic, for a second sign-in.
	c = e.newCode(reg.ClientID, httpsRedirect)
	f = c.form()
	f.Del("client_id")
	req, _ := http.NewRequest(http.MethodPost, e.url("/token"), strings.NewReader(f.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(reg.ClientID), url.QueryEscape(reg.ClientSecret))
	if resp, body := e.do(req); resp.StatusCode != http.StatusOK {
		t.Fatalf("client_secret_basic: %d %s", resp.StatusCode, body)
	}
	// Tokens are stored only as hashes too.
	for _, k := range e.keys() {
		if strings.Contains(k, "/access/") || strings.Contains(k, "/refresh/") || strings.Contains(k, "/codes/") {
			if len(k[strings.LastIndex(k, "/")+1:]) != 64 {
				t.Fatalf("token key is not a sha256: %s", k)
			}
		}
	}
}
