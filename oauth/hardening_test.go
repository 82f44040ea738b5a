package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
)

// countingStorage counts the storage locks taken, to show which requests write.
type countingStorage struct {
	certmagic.Storage
	locks atomic.Int64
	lists atomic.Int64
}

func (c *countingStorage) Lock(ctx context.Context, name string) error {
	c.locks.Add(1)
	return c.Storage.Lock(ctx, name)
}

func (c *countingStorage) List(ctx context.Context, prefix string, recursive bool) ([]string, error) {
	c.lists.Add(1)
	return c.Storage.List(ctx, prefix, recursive)
}

// TestTokenLocksOnlyRealCodes: /token with a made-up code, from an unregistered
// metadata-document client or a registered one, answers invalid_grant without taking
// any storage lock; a real code takes one.
func TestTokenLocksOnlyRealCodes(t *testing.T) {
	var cs *countingStorage
	e := newTestEnv(t, func(o *Options) {
		cs = &countingStorage{Storage: o.Storage}
		o.Storage = cs
	})
	reg := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})
	for _, clientID := range []string{"https://unregistered.example/client.json", reg.ClientID} {
		for _, code := range []string{randomToken(), "short", strings.Repeat("x", 500)} {
			e.wantTokenError(url.Values{
				"grant_type":    {"authorization_code"},
				"client_id":     {clientID},
				"code":          {code},
				"code_verifier": {randomToken() + "abc"},
				"redirect_uri":  {httpsRedirect},
			}, http.StatusBadRequest, "invalid_grant")
		}
		e.wantTokenError(url.Values{"grant_type": {"refresh_token"}, "client_id": {clientID}, "refresh_token": {randomToken()}},
			http.StatusBadRequest, "invalid_grant")
	}
	if n := cs.locks.Load(); n != 0 {
		t.Fatalf("made-up codes took %d storage locks, want 0", n)
	}
	c := e.newCode(reg.ClientID, httpsRedirect)
	// The code's owner is checked before the lock too.
	f := c.form()
	f.Set("client_id", e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"}).ClientID)
	e.wantTokenError(f, http.StatusBadRequest, "invalid_grant")
	if n := cs.locks.Load(); n != 0 {
		t.Fatalf("another client's attempt at a real code took %d storage locks, want 0", n)
	}
	if status, _, oe := e.tokenCall(c.form()); status != http.StatusOK {
		t.Fatalf("real code: %d %+v", status, oe)
	}
	if n := cs.locks.Load(); n != 1 {
		t.Fatalf("a real code took %d storage locks, want 1", n)
	}
}

// TestRefreshRetryWindow: concurrent refreshes with one token all get the same new pair
// and the sign-in survives; a retry within the window gets that pair again; after the
// window the old token counts as reuse and revokes the sign-in.
func TestRefreshRetryWindow(t *testing.T) {
	e := newTestEnv(t, nil)
	reg := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})
	c := e.newCode(reg.ClientID, httpsRedirect)
	status, first, _ := e.tokenCall(c.form())
	if status != http.StatusOK {
		t.Fatalf("code exchange: %d", status)
	}
	refresh := func(token string) (int, tokenResponse, oauthError) {
		return e.tokenCall(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {token}, "client_id": {reg.ClientID}})
	}

	const n = 6
	var wg sync.WaitGroup
	results := make([]tokenResponse, n)
	statuses := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], results[i], _ = refresh(first.RefreshToken)
		}()
	}
	wg.Wait()
	for i := range n {
		if statuses[i] != http.StatusOK {
			t.Fatalf("concurrent refresh %d: %d (statuses %v): the sign-in was revoked", i, statuses[i], statuses)
		}
		if results[i].AccessToken != results[0].AccessToken || results[i].RefreshToken != results[0].RefreshToken {
			t.Fatalf("concurrent refreshes got different pairs")
		}
	}
	second := results[0]
	if second.RefreshToken == first.RefreshToken || second.AccessToken == first.AccessToken {
		t.Fatal("refresh did not rotate")
	}
	if got := e.callMCP(second.AccessToken); got != http.StatusOK {
		t.Fatalf("/mcp with the refreshed token: %d", got)
	}

	e.clock.Advance(refreshRetryWindow - 5*time.Second)
	status, again, _ := refresh(first.RefreshToken)
	if status != http.StatusOK || again.AccessToken != second.AccessToken || again.RefreshToken != second.RefreshToken {
		t.Fatalf("retry within the window: %d, same pair %v", status, again.AccessToken == second.AccessToken)
	}
	if again.ExpiresIn > int64(DefaultAccessTokenTTL/time.Second)-20 || again.ExpiresIn <= 0 {
		t.Fatalf("retry expires_in %d does not count from the rotation", again.ExpiresIn)
	}
	e.noSecretsLogged(first.RefreshToken, second.RefreshToken, second.AccessToken)
	for _, k := range e.keys() {
		if strings.Contains(k, "/grants/") {
			raw, _ := e.storage.Load(e.ctx(), k)
			if strings.Contains(string(raw), second.RefreshToken) || strings.Contains(string(raw), second.AccessToken) {
				t.Fatal("the grant stores the new tokens in the clear")
			}
		}
	}

	e.clock.Advance(10 * time.Second) // past the window
	status, _, oe := refresh(first.RefreshToken)
	if status != http.StatusBadRequest || oe.Error != "invalid_grant" {
		t.Fatalf("reuse after the window: %d %+v", status, oe)
	}
	if got := e.callMCP(second.AccessToken); got != http.StatusUnauthorized {
		t.Fatalf("/mcp after reuse: %d, want 401 (sign-in revoked)", got)
	}
	if status, _, _ := refresh(second.RefreshToken); status != http.StatusBadRequest {
		t.Fatalf("current refresh token after reuse: %d, want 400", status)
	}

	// A token two rotations old is reuse even within the window.
	c = e.newCode(reg.ClientID, httpsRedirect)
	_, a, _ := e.tokenCall(c.form())
	_, b, _ := refresh(a.RefreshToken)
	if status, _, _ := refresh(b.RefreshToken); status != http.StatusOK {
		t.Fatal("second rotation failed")
	}
	if status, _, _ := refresh(a.RefreshToken); status != http.StatusBadRequest {
		t.Fatalf("token two rotations old: %d, want 400", status)
	}
}

// TestStoredIDsStayInPrefix: a tampered grant that names keys outside the OAuth prefix
// (here a certificate of Caddy's) cannot make a revocation delete them.
func TestStoredIDsStayInPrefix(t *testing.T) {
	e := newTestEnv(t, nil)
	reg := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})
	_, tok, _ := e.tokenCall(e.newCode(reg.ClientID, httpsRedirect).form())
	const certKey = "certificates/acme/example.com/example.com.crt"
	if err := e.storage.Store(e.ctx(), certKey, []byte("certificate")); err != nil {
		t.Fatal(err)
	}
	var grantKey string
	for _, k := range e.keys() {
		if strings.Contains(k, "/grants/") {
			grantKey = k
		}
	}
	raw, err := e.storage.Load(e.ctx(), grantKey)
	if err != nil {
		t.Fatal(err)
	}
	var g map[string]any
	_ = json.Unmarshal(raw, &g)
	g["access_tokens"] = []map[string]any{{"sha256": "../../../../" + certKey, "expires_at": time.Now().Add(time.Hour)}}
	raw, _ = json.Marshal(g)
	if err := e.storage.Store(e.ctx(), grantKey, raw); err != nil {
		t.Fatal(err)
	}
	resp, _ := e.postForm("/revoke", url.Values{"token": {tok.RefreshToken}, "client_id": {reg.ClientID}})
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	if _, err := e.storage.Load(e.ctx(), certKey); errors.Is(err, fs.ErrNotExist) {
		t.Fatal("revoking a tampered grant deleted a key outside the OAuth prefix")
	}
	if got := e.callMCP(tok.AccessToken); got != http.StatusUnauthorized {
		t.Fatalf("the grant was not revoked: %d", got)
	}

	// The store itself refuses such ids for every operation.
	st := e.server().store
	for _, id := range []string{"../x", "a/b", "", strings.Repeat("a", 129), "a.b"} {
		if err := st.save(e.ctx(), kindGrants, id, grantRecord{}); !errors.Is(err, errBadID) {
			t.Errorf("save %q: %v", id, err)
		}
		if err := st.delete(e.ctx(), kindGrants, id); !errors.Is(err, errBadID) {
			t.Errorf("delete %q: %v", id, err)
		}
		if _, err := st.lock(e.ctx(), kindGrants, id); !errors.Is(err, errBadID) {
			t.Errorf("lock %q: %v", id, err)
		}
		if err := st.load(e.ctx(), kindGrants, id, &grantRecord{}); !errors.Is(err, errNotFound) {
			t.Errorf("load %q: %v", id, err)
		}
	}
}

// TestSpoofingNamesAndHosts: client names with bidi controls or other invisible
// characters are refused; redirect hosts that could inject into the page's CSP are
// refused; look-alike hosts show in punycode on the sign-in page and in its CSP.
func TestSpoofingNamesAndHosts(t *testing.T) {
	e := newTestEnv(t, nil)
	for _, name := range []string{"Claude\u202Eedualc", "Claude\u2066x\u2069", "Cl\u200Baude", "Claude\u00AD", "Claude\u0007", "a\u2028b", "x\uE000"} {
		body, _ := json.Marshal(map[string]any{"client_name": name, "redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})
		resp, out := e.postJSON("/register", body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(out), "invalid_client_metadata") {
			t.Errorf("client_name %q: %d %s", name, resp.StatusCode, out)
		}
	}
	for _, uri := range []string{"https://a;b/cb", "https://a'b/cb", `https://a"b/cb`, "https://a,b/cb", "https://a*b/cb",
		"https://host:99999/cb", "https://host:/cb", "https://host:0x1f/cb", "https://-bad-.example/cb", "https://a..b/cb",
		"https://a;script-src/cb", "http://127.0.0.1:1;x/cb"} {
		body, _ := json.Marshal(map[string]any{"redirect_uris": []string{uri}, "token_endpoint_auth_method": "none"})
		resp, out := e.postJSON("/register", body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(out), "invalid_redirect_uri") {
			t.Errorf("redirect URI %q: %d %s", uri, resp.StatusCode, out)
		}
	}

	lookalike := "https://claude.\u0430i/api/mcp/auth_callback"
	reg := e.register(map[string]any{"client_name": "Claude", "redirect_uris": []string{lookalike}, "token_endpoint_auth_method": "none"})
	params, _ := authParamsFor(e, reg.ClientID, lookalike)
	resp, page := e.get("/authorize?" + params.Encode())
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign-in page: %d %s", resp.StatusCode, page)
	}
	if !strings.Contains(string(page), `<span id="redirect-host">claude.xn--i-7sb</span>`) {
		t.Errorf("sign-in page does not show the look-alike host in punycode:\n%s", page)
	}
	if visible := hiddenInput.ReplaceAll(page, nil); strings.Contains(string(visible), "claude.\u0430i") {
		t.Error("sign-in page shows the look-alike host in Unicode")
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' https://claude.xn--i-7sb;") {
		t.Errorf("CSP %q", csp)
	}
}

// TestBearerGuessesLimited: unknown bearer tokens count against the address in the
// sign-in limiter; once blocked, neither /mcp nor the sign-in page compares a new key
// until the address's wait is over, while a valid OAuth token keeps working unslowed.
func TestBearerGuessesLimited(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.APIKeyBearer = true })
	reg := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})
	c := e.newCode(reg.ClientID, httpsRedirect)
	_, tok, _ := e.tokenCall(c.form())
	params, _ := authParamsFor(e, reg.ClientID, httpsRedirect)
	_, page := e.get("/authorize?" + params.Encode())
	form := formFields(t, page)

	for i := range signinBlockAfter {
		if got := e.callMCP("guess-" + randomToken()); got != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i+1, got)
		}
		if got := e.callMCP(tok.AccessToken); got != http.StatusOK {
			t.Fatalf("valid token after %d guesses: %d", i+1, got)
		}
	}
	if got := e.callMCP("guess-" + randomToken()); got != http.StatusTooManyRequests {
		t.Fatalf("guess after %d: %d, want 429", signinBlockAfter, got)
	}
	if got := e.callMCP(testKey); got != http.StatusTooManyRequests {
		t.Fatalf("the right key from a blocked address: %d, want 429 (no confirmation while blocked)", got)
	}
	if got := e.callMCP(tok.AccessToken); got != http.StatusOK {
		t.Fatalf("valid OAuth token from a blocked address: %d, want 200", got)
	}
	form.Set("api_key", testKey)
	if resp, body := e.postForm("/authorize", form); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("sign-in page from a blocked address: %d %s", resp.StatusCode, body)
	}
	e.clock.Advance(blockedFirstWait)
	if got := e.callMCP(testKey); got != http.StatusOK {
		t.Fatalf("the key once the blocked address's wait is over: %d, want 200", got)
	}
	if got := e.callMCP("guess-" + randomToken()); got != http.StatusTooManyRequests {
		t.Fatalf("a guess right after: %d, want 429", got)
	}
	e.clock.Advance(signinWindow)
	if got := e.callMCP(testKey); got != http.StatusOK {
		t.Fatalf("the key after the window: %d", got)
	}
}

// TestMetadataFetchBounded: fetch failures show a generic message (the detail goes to
// the log) and are remembered for a minute; at most maxMetadataFetches run at once; and
// a fetch ends when the request that wanted it goes away.
func TestMetadataFetchBounded(t *testing.T) {
	var fetches, running, peak atomic.Int64
	release := make(chan struct{})
	cancelled := make(chan struct{}, 100)
	doc := httptestTLS(t, func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		switch {
		case strings.HasPrefix(r.URL.Path, "/slow/"):
			select {
			case <-release:
			case <-r.Context().Done():
				cancelled <- struct{}{}
				return
			}
		}
		http.NotFound(w, r)
	})
	e := newTestEnv(t, func(o *Options) {
		o.AllowPrivateClientMetadataURLs = true
		o.HTTPClient = doc.Client()
	})
	page := func(clientID string) (*http.Response, []byte) {
		params, _ := authParamsFor(e, clientID, httpsRedirect)
		return e.get("/authorize?" + params.Encode())
	}

	// Generic message, detail logged.
	closed := "http://127.0.0.1:1/client.json"
	resp, body := page(closed)
	wantPage(t, resp, body, http.StatusBadRequest, "could not be fetched")
	for _, leak := range []string{"connection refused", "127.0.0.1:1", "dial", "connect:"} {
		if strings.Contains(string(body), leak) {
			t.Errorf("the page tells the caller %q:\n%s", leak, body)
		}
	}
	if !strings.Contains(e.logs.String(), "connection refused") {
		t.Errorf("the log lacks the reason:\n%s", e.logs.String())
	}
	resp, body = page(doc.URL + "/missing.json")
	wantPage(t, resp, body, http.StatusBadRequest, "could not be fetched")
	// As a word: the page's own address (127.0.0.1:40423) may hold the digits.
	if regexp.MustCompile(`\b404\b`).Match(body) {
		t.Errorf("the page shows the status the URL answered:\n%s", body)
	}

	// Failures are cached briefly.
	before := fetches.Load()
	page(doc.URL + "/missing.json")
	if fetches.Load() != before {
		t.Fatal("a failed document was fetched again at once")
	}
	e.clock.Advance(failedMetadataCacheTTL + time.Second)
	page(doc.URL + "/missing.json")
	if fetches.Load() != before+1 {
		t.Fatal("a failed document was not fetched again after a minute")
	}

	// A fetch ends with the request that wanted it.
	short := &http.Client{Timeout: 300 * time.Millisecond}
	params, _ := authParamsFor(e, doc.URL+"/slow/gone.json", httpsRedirect)
	if _, err := short.Get(e.url("/authorize?" + params.Encode())); err == nil {
		t.Fatal("the slow document answered")
	}
	select {
	case <-cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("the fetch outlived its request by 2s")
	}

	// A global cap on concurrent fetches: the rest are told to try again.
	var wg sync.WaitGroup
	var busy atomic.Int64
	for i := range 3 * maxMetadataFetches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			params, _ := authParamsFor(e, doc.URL+"/slow/"+strconv.Itoa(i)+".json", httpsRedirect)
			resp, err := http.Get(e.url("/authorize?" + params.Encode()))
			if err != nil {
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "too many applications") {
				busy.Add(1)
			}
		}()
	}
	waitUntil(t, func() bool { return busy.Load() >= 2*maxMetadataFetches })
	close(release)
	wg.Wait()
	if p := peak.Load(); p > maxMetadataFetches {
		t.Fatalf("%d fetches ran at once, limit %d", p, maxMetadataFetches)
	}
}

func httptestTLS(t *testing.T, h http.HandlerFunc) *httptest.Server {
	ts := httptest.NewTLSServer(h)
	t.Cleanup(ts.Close)
	return ts
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUnusedRegistrationsExpire: a registration that never led to a sign-in is pruned
// after a day; one that signed in stays; at the cap a flood of registrations is refused
// without listing the storage again.
func TestUnusedRegistrationsExpire(t *testing.T) {
	var cs *countingStorage
	e := newTestEnv(t, func(o *Options) {
		cs = &countingStorage{Storage: o.Storage}
		o.Storage = cs
	})
	meta := map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"}
	used := e.register(meta)
	_, tok, _ := e.tokenCall(e.newCode(used.ClientID, httpsRedirect).form())
	unused := e.register(meta)
	e.clock.Advance(neverUsedClientTTL - time.Minute)
	if err := e.server().Prune(e.ctx()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.server().lookupClient(e.ctx(), unused.ClientID); err != nil {
		t.Fatalf("a registration was dropped before a day: %v", err)
	}
	e.clock.Advance(2 * time.Minute)
	// Keep the sign-in alive, as a client in use would.
	if status, _, _ := e.tokenCall(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}, "client_id": {used.ClientID}}); status != http.StatusOK {
		t.Fatal("refresh failed")
	}
	if err := e.server().Prune(e.ctx()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.server().lookupClient(e.ctx(), unused.ClientID); !errors.Is(err, errNotFound) {
		t.Fatalf("a registration that never signed in survived a day: %v", err)
	}
	if _, err := e.server().lookupClient(e.ctx(), used.ClientID); err != nil {
		t.Fatalf("the client in use was dropped: %v", err)
	}

	e.server().maxClients = 3
	e.register(meta)
	e.register(meta)
	body, _ := json.Marshal(meta)
	lists := cs.lists.Load()
	for i := range 20 {
		resp, _ := e.postJSON("/register", body)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("registration %d over the cap: %d", i, resp.StatusCode)
		}
		e.server().registerLimiter.reset("127.0.0.1")
	}
	if n := cs.lists.Load() - lists; n > 1 {
		t.Fatalf("20 registrations at the cap listed the storage %d times, want at most 1", n)
	}
}
