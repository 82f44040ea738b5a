package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/certmagic"
	"golang.org/x/oauth2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/oauth"
)

// These tests attack a real Caddy with the plugin over loopback, as the outside review
// did. None of them needs the container: the OAuth endpoints and the checks in front of
// /mcp answer without it.

// registerThroughCaddy registers a public client and returns its id, or the status and
// body when registration is refused.
func registerThroughCaddy(t *testing.T, base string, meta map[string]any) (string, int, string) {
	t.Helper()
	if meta["token_endpoint_auth_method"] == nil {
		meta["token_endpoint_auth_method"] = "none"
	}
	body, _ := json.Marshal(meta)
	resp, err := http.Post(base+"/register", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var reg struct {
		ClientID string `json:"client_id"`
	}
	_ = json.Unmarshal(out, &reg)
	return reg.ClientID, resp.StatusCode, string(out)
}

// authorizeURL is a valid authorization request, with its PKCE verifier.
func authorizeURL(base, clientID, redirect string, edit func(url.Values)) (string, string) {
	verifier := oauth2.GenerateVerifier()
	conf := &oauth2.Config{ClientID: clientID, RedirectURL: redirect,
		Endpoint: oauth2.Endpoint{AuthURL: base + "/authorize", TokenURL: base + "/token", AuthStyle: oauth2.AuthStyleInParams}}
	u, _ := url.Parse(conf.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", base+"/mcp")))
	q := u.Query()
	if edit != nil {
		edit(q)
	}
	u.RawQuery = q.Encode()
	return u.String(), verifier
}

// oauthTokenThroughCaddy signs in with the API key and returns an access token.
func oauthTokenThroughCaddy(ctx context.Context, t *testing.T, s *testsite.Site) string {
	t.Helper()
	redirect := "http://127.0.0.1:45678/callback"
	clientID, status, body := registerThroughCaddy(t, s.URL, map[string]any{"redirect_uris": []string{redirect}})
	if status != http.StatusCreated {
		t.Fatalf("register: %d %s", status, body)
	}
	authURL, verifier := authorizeURL(s.URL, clientID, redirect, nil)
	q := testsite.SignIn(t, authURL, s.Key)
	conf := &oauth2.Config{ClientID: clientID, RedirectURL: redirect,
		Endpoint: oauth2.Endpoint{AuthURL: s.URL + "/authorize", TokenURL: s.URL + "/token", AuthStyle: oauth2.AuthStyleInParams}}
	tok, err := conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier), oauth2.SetAuthURLParam("resource", s.URL+"/mcp"))
	if err != nil {
		t.Fatal(err)
	}
	return tok.AccessToken
}

func getNoFollow(t *testing.T, u string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 20 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestNoRedirectBeforeSignIn (item 1): a bad authorization request from a registered
// client with its registered redirect URI gets the error page; nothing redirects before
// the person has signed in, so the origin is no open redirector.
func TestNoRedirectBeforeSignIn(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	redirect := "https://app.example/cb"
	clientID, status, body := registerThroughCaddy(t, s.URL, map[string]any{"redirect_uris": []string{redirect}})
	if status != http.StatusCreated {
		t.Fatalf("register: %d %s", status, body)
	}
	for name, edit := range map[string]func(url.Values){
		"response_type token": func(v url.Values) { v.Set("response_type", "token") },
		"no PKCE":             func(v url.Values) { v.Del("code_challenge") },
		"wrong resource":      func(v url.Values) { v.Set("resource", "https://elsewhere.example/mcp") },
	} {
		u, _ := authorizeURL(s.URL, clientID, redirect, edit)
		resp, page := getNoFollow(t, u, nil)
		if loc := resp.Header.Get("Location"); loc != "" || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, Location %q; want the 400 error page", name, resp.StatusCode, loc)
		}
		if !strings.Contains(page, "Invalid sign-in request") {
			t.Errorf("%s: page:\n%s", name, page)
		}
	}
}

// TestBearerGuessesThrottled (item 2): wrong bearer tokens on /mcp count in the sign-in
// limiter of the client address; after ten the address is refused (even with the right
// key, which is then not compared), while a valid OAuth token is never slowed.
func TestBearerGuessesThrottled(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	token := oauthTokenThroughCaddy(ctx, t, s)

	var statuses []int
	for range 15 {
		statuses = append(statuses, statusWithToken(t, s.URL, "guess-"+testenv.RandomHex(8)))
	}
	for i, st := range statuses {
		want := http.StatusUnauthorized
		if i >= 10 {
			want = http.StatusTooManyRequests
		}
		if st != want {
			t.Fatalf("guess %d: %d, want %d (all: %v)", i+1, st, want, statuses)
		}
	}
	if st := statusWithToken(t, s.URL, s.Key); st != http.StatusTooManyRequests {
		t.Fatalf("the API key from a blocked address: %d, want 429", st)
	}
	if st := statusWithToken(t, s.URL, token); st != http.StatusOK {
		t.Fatalf("a valid OAuth token from a blocked address: %d, want 200", st)
	}
	// Timed on a second request: the first initialize may wait (up to 3 s) for the
	// detection of what is installed, which has nothing to do with the token.
	start := time.Now()
	if st := statusWithToken(t, s.URL, token); st != http.StatusOK {
		t.Fatalf("a valid OAuth token from a blocked address, again: %d, want 200", st)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a valid token took %v", d)
	}
}

// TestMetadataFetchErrorsGeneric (item 3): a client ID metadata document that cannot be
// fetched gets a generic page; how the fetch failed is only in Caddy's log.
func TestMetadataFetchErrorsGeneric(t *testing.T) {
	s := testsite.Start(t, testsite.Options{Directive: []string{"allow_private_client_metadata"}})
	closed := "http://127.0.0.1:" + strconv.Itoa(testsite.FreePort(t)) + "/client.json"
	u, _ := authorizeURL(s.URL, closed, "https://app.example/cb", nil)
	resp, page := getNoFollow(t, u, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "could not be fetched") {
		t.Fatalf("%d:\n%s", resp.StatusCode, page)
	}
	for _, leak := range []string{"connection refused", "dial tcp"} {
		if strings.Contains(page, leak) {
			t.Errorf("the page tells an unauthenticated caller %q", leak)
		}
	}
	// The address tried appears at most as part of the client's own id, never on its
	// own (as "dial tcp 127.0.0.1:port" would).
	addr := strings.TrimSuffix(strings.TrimPrefix(closed, "http://"), "/client.json")
	if strings.Count(page, addr) != strings.Count(page, closed) {
		t.Errorf("the page names the address %s outside the client id", addr)
	}
	testenv.WaitFor(t, 5*time.Second, "the detail in Caddy's log", func() bool {
		logs, _ := os.ReadFile(filepath.Join(s.Storage, "caddy.log"))
		return strings.Contains(string(logs), "connection refused")
	})
}

// TestSignInPageSpoofing (items 7 and 13): names with bidi controls and hosts that could
// inject into the page's CSP are refused at registration; a look-alike host shows in
// punycode on the sign-in page.
func TestSignInPageSpoofing(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	for _, name := range []string{"Claude \u202Eexe.gnp", "Claude\u2066 (official)\u2069", "Cla\u200Bude"} {
		if _, status, body := registerThroughCaddy(t, s.URL, map[string]any{"client_name": name, "redirect_uris": []string{"https://app.example/cb"}}); status != http.StatusBadRequest {
			t.Errorf("client_name %q: %d %s", name, status, body)
		}
	}
	for _, uri := range []string{"https://a;b/cb", "https://app.example;script-src/cb", "https://a'b/cb", `https://a"b/cb`} {
		if _, status, body := registerThroughCaddy(t, s.URL, map[string]any{"redirect_uris": []string{uri}}); status != http.StatusBadRequest || !strings.Contains(body, "invalid_redirect_uri") {
			t.Errorf("redirect URI %q: %d %s", uri, status, body)
		}
	}
	lookalike := "https://claude.\u0430i/api/mcp/auth_callback"
	clientID, status, body := registerThroughCaddy(t, s.URL, map[string]any{"client_name": "Claude", "redirect_uris": []string{lookalike}})
	if status != http.StatusCreated {
		t.Fatalf("register: %d %s", status, body)
	}
	u, _ := authorizeURL(s.URL, clientID, lookalike, nil)
	resp, page := getNoFollow(t, u, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `<span id="redirect-host">claude.xn--i-7sb</span>`) {
		t.Fatalf("sign-in page %d does not show the host in punycode:\n%s", resp.StatusCode, page)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' https://claude.xn--i-7sb;") {
		t.Fatalf("CSP %q", csp)
	}
}

// TestTokenMadeUpCodeTakesNoLock (item 10): /token with an unregistered https client_id
// and a made-up code answers at once, even while another instance holds that code's
// storage lock: it never asks for the lock.
func TestTokenMadeUpCodeTakesNoLock(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	code := oauth2.GenerateVerifier()[:43]
	sum := sha256.Sum256([]byte(code))
	lock := "mcp_sandbox/oauth/" + oauth.KeyFingerprint(s.Key) + "/codes/" + hex.EncodeToString(sum[:])
	other := &certmagic.FileStorage{Path: s.Storage}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := other.Lock(ctx, lock); err != nil {
		t.Fatal(err)
	}
	defer other.Unlock(context.Background(), lock)

	form := url.Values{"grant_type": {"authorization_code"}, "client_id": {"https://unregistered.example/client.json"},
		"code": {code}, "code_verifier": {oauth2.GenerateVerifier()}, "redirect_uri": {"https://unregistered.example/cb"}}
	c := &http.Client{Timeout: 5 * time.Second}
	start := time.Now()
	resp, err := c.PostForm(s.URL+"/token", form)
	if err != nil {
		t.Fatalf("/token waited for a lock on a made-up code: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "invalid_grant") {
		t.Fatalf("/token: %d %s", resp.StatusCode, b)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("/token took %v", d)
	}
}

// TestOriginRebinding (item 14): on a catch-all site without public_url, a page on a
// name the attacker rebinds to this server sends Origin equal to Host; it is refused.
// Loopback tools still pass, and so does the site's origin once public_url names it.
func TestOriginRebinding(t *testing.T) {
	s := testsite.Start(t, testsite.Options{CatchAll: true})
	hostport := "rebind.attacker.example:" + strconv.Itoa(s.Port)
	mcpPost := func(host, origin string) int {
		return initializeStatus(t, s.URL, host, map[string]string{"Origin": origin, "Authorization": "Bearer " + s.Key})
	}
	if st := mcpPost(hostport, "http://"+hostport); st != http.StatusForbidden {
		t.Fatalf("rebinding origin equal to Host: %d, want 403", st)
	}
	if st := mcpPost("127.0.0.1:"+strconv.Itoa(s.Port), "http://localhost:6274"); st != http.StatusOK {
		t.Fatalf("loopback tool origin: %d, want 200", st)
	}
	s.Load(testsite.Options{CatchAll: true, Directive: []string{"public_url http://" + hostport}})
	if st := mcpPost(hostport, "http://"+hostport); st != http.StatusOK {
		t.Fatalf("the public_url origin: %d, want 200", st)
	}
}

// TestExampleLogHidesCodes (item 4): with the access log block of examples/Caddyfile, a
// sign-in leaves no authorization code in the log; the same log without the filter would
// hold it (in the Location header of the sign-in's redirect).
func TestExampleLogHidesCodes(t *testing.T) {
	example, err := os.ReadFile("../examples/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)\n\tlog \{\n.*?\n\t\}\n`).Find(example)
	if block == nil || !strings.Contains(string(block), "resp_headers>Location delete") {
		t.Fatalf("examples/Caddyfile has no log block with the Location filter:\n%s", block)
	}
	signInCode := func(logBlock string) (string, string) {
		logFile := filepath.Join(t.TempDir(), "access.log")
		logBlock = strings.Replace(logBlock, "/var/log/caddy/sandbox.example.com.log", logFile, 1)
		s := testsite.Start(t, testsite.Options{Site: []string{logBlock}})
		redirect := "http://127.0.0.1:45678/callback"
		clientID, status, body := registerThroughCaddy(t, s.URL, map[string]any{"redirect_uris": []string{redirect}})
		if status != http.StatusCreated {
			t.Fatalf("register: %d %s", status, body)
		}
		authURL, _ := authorizeURL(s.URL, clientID, redirect, nil)
		code := testsite.SignIn(t, authURL, s.Key).Get("code")
		var logs []byte
		testenv.WaitFor(t, 5*time.Second, "the sign-in in the access log", func() bool {
			logs, _ = os.ReadFile(logFile)
			return strings.Contains(string(logs), `"method":"POST"`) && strings.Contains(string(logs), `"uri":"/authorize"`)
		})
		_ = caddy.Stop()
		return code, string(logs)
	}

	code, logs := signInCode(string(block))
	if code == "" || strings.Contains(logs, code) {
		t.Fatalf("the access log holds the authorization code:\n%s", logs)
	}
	if !strings.Contains(logs, `"status":303`) {
		t.Fatalf("the sign-in's redirect is not logged:\n%s", logs)
	}
	unfiltered := regexp.MustCompile(`(?s)\n\t\tformat filter \{.*?\n\t\t\}`).ReplaceAllString(string(block), "")
	if code, logs := signInCode(unfiltered); !strings.Contains(logs, code) {
		t.Fatalf("without the filter the code is not logged either, so this test shows nothing:\n%s", logs)
	}
}

// TestStorageOverride: `storage` in the mcp_sandbox block puts OAuth state there
// instead of Caddy's storage.
func TestStorageOverride(t *testing.T) {
	own := t.TempDir()
	s := testsite.Start(t, testsite.Options{Directive: []string{"storage file_system " + own}})
	clientID, status, body := registerThroughCaddy(t, s.URL, map[string]any{"redirect_uris": []string{"https://app.example/cb"}})
	if status != http.StatusCreated {
		t.Fatalf("register: %d %s", status, body)
	}
	rel := filepath.Join("mcp_sandbox", "oauth", oauth.KeyFingerprint(s.Key), "clients", clientID)
	if _, err := os.Stat(filepath.Join(own, rel)); err != nil {
		t.Fatalf("the client is not in the configured storage: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Storage, rel)); err == nil {
		t.Fatal("the client is in Caddy's storage")
	}
}

// initializeStatus posts an MCP initialize to base+"/mcp" with the headers (and Host,
// unless empty) and returns the HTTP status.
func initializeStatus(t *testing.T, base, host string, header map[string]string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
