package oauth

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	loopbackRedirect = "http://127.0.0.1/callback"
	httpsRedirect    = "https://app.example/cb"
)

// authParamsFor is a valid authorization request for the client, with its verifier.
func authParamsFor(e *testEnv, clientID, redirectURI string) (url.Values, string) {
	verifier := randomToken() + randomToken()[:10]
	sum := sha256.Sum256([]byte(verifier))
	return url.Values{
		"client_id":             {clientID},
		"redirect_uri":          {redirectURI},
		"response_type":         {"code"},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
		"state":                 {"s-123"},
		"scope":                 {Scope},
		"resource":              {e.origin + "/mcp"},
	}, verifier
}

// issuedCode is a code from a completed sign-in.
type issuedCode struct {
	code, verifier, redirectURI, clientID string
}

func (e *testEnv) newCode(clientID, redirectURI string) issuedCode {
	e.t.Helper()
	params, verifier := authParamsFor(e, clientID, redirectURI)
	loc := e.signIn("/authorize?"+params.Encode(), testKey)
	code := loc.Query().Get("code")
	if code == "" {
		e.t.Fatalf("no code in %s", loc)
	}
	return issuedCode{code: code, verifier: verifier, redirectURI: redirectURI, clientID: clientID}
}

func (c issuedCode) form() url.Values {
	return url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {c.code},
		"code_verifier": {c.verifier},
		"redirect_uri":  {c.redirectURI},
		"client_id":     {c.clientID},
	}
}

// tokenCall posts to /token and decodes either answer.
func (e *testEnv) tokenCall(form url.Values) (int, tokenResponse, oauthError) {
	e.t.Helper()
	resp, body := e.postForm("/token", form)
	var tr tokenResponse
	var oe oauthError
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &tr); err != nil {
			e.t.Fatalf("token response %s: %v", body, err)
		}
		if resp.Header.Get("Cache-Control") != "no-store" {
			e.t.Fatalf("token response Cache-Control %q", resp.Header.Get("Cache-Control"))
		}
	} else if err := json.Unmarshal(body, &oe); err != nil {
		e.t.Fatalf("token error %d %s: %v", resp.StatusCode, body, err)
	}
	return resp.StatusCode, tr, oe
}

func (e *testEnv) wantTokenError(form url.Values, status int, code string) {
	e.t.Helper()
	got, _, oe := e.tokenCall(form)
	if got != status || oe.Error != code {
		e.t.Fatalf("token: %d %q (%s), want %d %q", got, oe.Error, oe.Description, status, code)
	}
}

// wantPage checks that /authorize answered with an HTML error page and did not redirect.
func wantPage(t *testing.T, resp *http.Response, body []byte, status int, text string) {
	t.Helper()
	if resp.StatusCode != status || resp.Header.Get("Location") != "" {
		t.Fatalf("got %d Location %q, want the %d error page", resp.StatusCode, resp.Header.Get("Location"), status)
	}
	if !strings.Contains(string(body), text) {
		t.Fatalf("page does not say %q:\n%s", text, body)
	}
}

// wantRequestErrorPage checks that a bad authorization request from a known client
// with a registered redirect URI gets the error page, never a redirect: before the
// person signed in, a redirect would make the server an open redirector.
func wantRequestErrorPage(t *testing.T, resp *http.Response, body []byte, code string) {
	t.Helper()
	if loc := resp.Header.Get("Location"); loc != "" {
		t.Fatalf("redirected to %q before sign-in", loc)
	}
	wantPage(t, resp, body, http.StatusBadRequest, code)
}

// TestRejects runs each bad input and checks the error and that storage did not grow.
func TestRejects(t *testing.T) {
	e := newTestEnv(t, nil)
	pub := e.register(map[string]any{
		"redirect_uris":              []string{loopbackRedirect, httpsRedirect},
		"token_endpoint_auth_method": "none",
		"client_name":                "Public",
	})
	conf := e.register(map[string]any{
		"redirect_uris":              []string{httpsRedirect},
		"token_endpoint_auth_method": "client_secret_basic",
		"client_name":                "Confidential",
	})
	if conf.ClientSecret == "" {
		t.Fatal("confidential client got no secret")
	}

	authorize := func(mutate func(url.Values)) (*http.Response, []byte) {
		params, _ := authParamsFor(e, pub.ClientID, httpsRedirect)
		mutate(params)
		return e.get("/authorize?" + params.Encode())
	}
	register := func(meta map[string]any, status int, code string) func(t *testing.T) {
		return func(t *testing.T) {
			body, _ := json.Marshal(meta)
			resp, out := e.postJSON("/register", body)
			var oe oauthError
			_ = json.Unmarshal(out, &oe)
			if resp.StatusCode != status || oe.Error != code {
				t.Fatalf("register: %d %s, want %d %q", resp.StatusCode, out, status, code)
			}
		}
	}
	hostileRedirect := func(uri string) func(*testing.T) func(*testing.T) {
		return func(*testing.T) func(*testing.T) {
			return register(map[string]any{"redirect_uris": []string{uri}, "token_endpoint_auth_method": "none"},
				http.StatusBadRequest, "invalid_redirect_uri")
		}
	}

	// Each case prepares valid state, then returns the bad action, which must store nothing.
	cases := []struct {
		name    string
		prepare func(t *testing.T) func(t *testing.T)
	}{
		{"unknown client", func(*testing.T) func(*testing.T) {
			return func(t *testing.T) {
				resp, body := authorize(func(v url.Values) { v.Set("client_id", "nosuchclient000000000") })
				wantPage(t, resp, body, http.StatusBadRequest, "Unknown application")
			}
		}},
		{"unknown client with path characters", func(*testing.T) func(*testing.T) {
			return func(t *testing.T) {
				resp, body := authorize(func(v url.Values) { v.Set("client_id", "../../../etc/passwd") })
				wantPage(t, resp, body, http.StatusBadRequest, "Unknown application")
			}
		}},
		{"redirect URI mismatch", func(*testing.T) func(*testing.T) {
			return func(t *testing.T) {
				resp, body := authorize(func(v url.Values) { v.Set("redirect_uri", "https://evil.example/cb") })
				wantPage(t, resp, body, http.StatusBadRequest, "did not register")
			}
		}},
		{"redirect URI differing only in path", func(*testing.T) func(*testing.T) {
			return func(t *testing.T) {
				resp, body := authorize(func(v url.Values) { v.Set("redirect_uri", httpsRedirect+"/../x") })
				wantPage(t, resp, body, http.StatusBadRequest, "did not register")
			}
		}},
		{"missing PKCE", func(*testing.T) func(*testing.T) {
			return func(t *testing.T) {
				resp, body := authorize(func(v url.Values) { v.Del("code_challenge"); v.Del("code_challenge_method") })
				wantRequestErrorPage(t, resp, body, "invalid_request")
			}
		}},
		{"plain PKCE", func(*testing.T) func(*testing.T) {
			return func(t *testing.T) {
				resp, body := authorize(func(v url.Values) {
					v.Set("code_challenge_method", "plain")
					v.Set("code_challenge", strings.Repeat("a", 43))
				})
				wantRequestErrorPage(t, resp, body, "invalid_request")
			}
		}},
		{"malformed challenge", func(*testing.T) func(*testing.T) {
			return func(t *testing.T) {
				resp, body := authorize(func(v url.Values) { v.Set("code_challenge", "short") })
				wantRequestErrorPage(t, resp, body, "invalid_request")
			}
		}},
		{"response type token", func(*testing.T) func(*testing.T) {
			return func(t *testing.T) {
				resp, body := authorize(func(v url.Values) { v.Set("response_type", "token") })
				wantRequestErrorPage(t, resp, body, "unsupported_response_type")
			}
		}},
		{"wrong resource at authorize", func(*testing.T) func(*testing.T) {
			return func(t *testing.T) {
				resp, body := authorize(func(v url.Values) { v.Set("resource", "https://other.example/mcp") })
				wantRequestErrorPage(t, resp, body, "invalid_target")
			}
		}},
		{"tampered sign-in form", func(t *testing.T) func(*testing.T) {
			params, _ := authParamsFor(e, pub.ClientID, httpsRedirect)
			_, page := e.get("/authorize?" + params.Encode())
			form := formFields(t, page)
			return func(t *testing.T) {
				form.Set("redirect_uri", loopbackRedirect) // registered, but not what was shown
				form.Set("api_key", testKey)
				resp, body := e.postForm("/authorize", form)
				wantPage(t, resp, body, http.StatusBadRequest, "expired or was altered")
			}
		}},
		{"expired sign-in form", func(t *testing.T) func(*testing.T) {
			params, _ := authParamsFor(e, pub.ClientID, httpsRedirect)
			_, page := e.get("/authorize?" + params.Encode())
			form := formFields(t, page)
			return func(t *testing.T) {
				e.clock.Advance(signinFormTTL + time.Second)
				form.Set("api_key", testKey)
				resp, body := e.postForm("/authorize", form)
				wantPage(t, resp, body, http.StatusBadRequest, "expired or was altered")
			}
		}},
		{"wrong verifier", func(*testing.T) func(*testing.T) {
			c := e.newCode(pub.ClientID, httpsRedirect)
			return func(*testing.T) {
				f := c.form()
				f.Set("code_verifier", randomToken()+"x")
				e.wantTokenError(f, http.StatusBadRequest, "invalid_grant")
			}
		}},
		{"missing verifier", func(*testing.T) func(*testing.T) {
			c := e.newCode(pub.ClientID, httpsRedirect)
			return func(*testing.T) {
				f := c.form()
				f.Del("code_verifier")
				e.wantTokenError(f, http.StatusBadRequest, "invalid_request")
			}
		}},
		{"expired code", func(*testing.T) func(*testing.T) {
			c := e.newCode(pub.ClientID, httpsRedirect)
			return func(*testing.T) {
				e.clock.Advance(DefaultCodeTTL + time.Second)
				e.wantTokenError(c.form(), http.StatusBadRequest, "invalid_grant")
			}
		}},
		{"redirect URI mismatch at token", func(*testing.T) func(*testing.T) {
			c := e.newCode(pub.ClientID, httpsRedirect)
			return func(*testing.T) {
				f := c.form()
				f.Set("redirect_uri", loopbackRedirect)
				e.wantTokenError(f, http.StatusBadRequest, "invalid_grant")
			}
		}},
		{"wrong resource at token", func(*testing.T) func(*testing.T) {
			c := e.newCode(pub.ClientID, httpsRedirect)
			return func(*testing.T) {
				f := c.form()
				f.Set("resource", "https://other.example/mcp")
				e.wantTokenError(f, http.StatusBadRequest, "invalid_target")
			}
		}},
		{"code of another client", func(*testing.T) func(*testing.T) {
			c := e.newCode(pub.ClientID, httpsRedirect)
			return func(*testing.T) {
				f := c.form()
				f.Del("client_id")
				f.Set("client_id", conf.ClientID)
				f.Set("client_secret", conf.ClientSecret)
				e.wantTokenError(f, http.StatusBadRequest, "invalid_grant")
			}
		}},
		{"unknown client at token", func(*testing.T) func(*testing.T) {
			c := e.newCode(pub.ClientID, httpsRedirect)
			return func(*testing.T) {
				f := c.form()
				f.Set("client_id", "nosuchclient000000000")
				e.wantTokenError(f, http.StatusUnauthorized, "invalid_client")
			}
		}},
		{"wrong client secret (basic)", func(*testing.T) func(*testing.T) {
			c := e.newCode(conf.ClientID, httpsRedirect)
			return func(t *testing.T) {
				f := c.form()
				f.Del("client_id")
				req, _ := http.NewRequest(http.MethodPost, e.url("/token"), strings.NewReader(f.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.SetBasicAuth(conf.ClientID, "wrong")
				resp, body := e.do(req)
				if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `"invalid_client"`) ||
					!strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
					t.Fatalf("got %d %s (WWW-Authenticate %q), want 401 invalid_client with a Basic challenge",
						resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"))
				}
			}
		}},
		{"missing client secret", func(*testing.T) func(*testing.T) {
			c := e.newCode(conf.ClientID, httpsRedirect)
			return func(*testing.T) {
				e.wantTokenError(c.form(), http.StatusUnauthorized, "invalid_client")
			}
		}},
		{"unsupported grant type", func(*testing.T) func(*testing.T) {
			return func(*testing.T) {
				e.wantTokenError(url.Values{"grant_type": {"password"}, "client_id": {pub.ClientID}},
					http.StatusBadRequest, "unsupported_grant_type")
			}
		}},
		{"reused code revokes its tokens", func(t *testing.T) func(*testing.T) {
			c := e.newCode(pub.ClientID, httpsRedirect)
			status, tok, oe := e.tokenCall(c.form())
			if status != http.StatusOK {
				t.Fatalf("first redemption: %d %v", status, oe)
			}
			if e.callMCP(tok.AccessToken) != http.StatusOK {
				t.Fatal("token from the first redemption does not work")
			}
			return func(t *testing.T) {
				e.wantTokenError(c.form(), http.StatusBadRequest, "invalid_grant")
				if got := e.callMCP(tok.AccessToken); got != http.StatusUnauthorized {
					t.Fatalf("access token after code reuse: %d, want 401", got)
				}
				e.wantTokenError(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken},
					"client_id": {pub.ClientID}}, http.StatusBadRequest, "invalid_grant")
			}
		}},
		{"reused refresh token", func(t *testing.T) func(*testing.T) {
			c := e.newCode(pub.ClientID, httpsRedirect)
			_, first, _ := e.tokenCall(c.form())
			refresh := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {first.RefreshToken}, "client_id": {pub.ClientID}}
			status, second, _ := e.tokenCall(refresh)
			if status != http.StatusOK {
				t.Fatalf("refresh: %d", status)
			}
			return func(t *testing.T) {
				e.clock.Advance(refreshRetryWindow)
				e.wantTokenError(refresh, http.StatusBadRequest, "invalid_grant")
				if got := e.callMCP(second.AccessToken); got != http.StatusUnauthorized {
					t.Fatalf("access token after refresh reuse: %d, want 401", got)
				}
			}
		}},
		{"tampered access token", func(t *testing.T) func(*testing.T) {
			c := e.newCode(pub.ClientID, httpsRedirect)
			_, tok, _ := e.tokenCall(c.form())
			return func(t *testing.T) {
				b := []byte(tok.AccessToken)
				b[5] ^= 1
				req, _ := http.NewRequest(http.MethodGet, e.url("/mcp"), nil)
				req.Header.Set("Authorization", "Bearer "+string(b))
				resp, _ := e.do(req)
				if resp.StatusCode != http.StatusUnauthorized ||
					!strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
					t.Fatalf("tampered token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
				}
			}
		}},
		{"token for another resource", func(t *testing.T) func(*testing.T) {
			c := e.newCode(pub.ClientID, httpsRedirect)
			_, tok, _ := e.tokenCall(c.form())
			return func(t *testing.T) {
				// The same server reached under another name is another resource.
				req, _ := http.NewRequest(http.MethodGet, e.url("/mcp"), nil)
				req.Host = "other.example"
				req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
				resp, _ := e.do(req)
				if resp.StatusCode != http.StatusUnauthorized {
					t.Fatalf("token on another origin: %d, want 401", resp.StatusCode)
				}
			}
		}},
		{"oversized registration", func(*testing.T) func(*testing.T) {
			return register(map[string]any{"redirect_uris": []string{httpsRedirect},
				"client_name": "x", "junk": strings.Repeat("a", maxRegistrationBody)},
				http.StatusRequestEntityTooLarge, "invalid_client_metadata")
		}},
		{"too many redirect URIs", func(*testing.T) func(*testing.T) {
			uris := make([]string, maxRedirectURIs+1)
			for i := range uris {
				uris[i] = httpsRedirect + "/" + strings.Repeat("x", i+1)
			}
			return register(map[string]any{"redirect_uris": uris}, http.StatusBadRequest, "invalid_redirect_uri")
		}},
		{"overlong redirect URI", hostileRedirect("https://app.example/" + strings.Repeat("a", maxRedirectURILen))},
		{"overlong client name", func(*testing.T) func(*testing.T) {
			return register(map[string]any{"redirect_uris": []string{httpsRedirect}, "client_name": strings.Repeat("n", maxClientNameLen+1)},
				http.StatusBadRequest, "invalid_client_metadata")
		}},
		{"private_key_jwt registration", func(*testing.T) func(*testing.T) {
			return register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "private_key_jwt"},
				http.StatusBadRequest, "invalid_client_metadata")
		}},
		{"implicit grant registration", func(*testing.T) func(*testing.T) {
			return register(map[string]any{"redirect_uris": []string{httpsRedirect}, "grant_types": []string{"implicit"}},
				http.StatusBadRequest, "invalid_client_metadata")
		}},
		{"no redirect URIs", func(*testing.T) func(*testing.T) {
			return register(map[string]any{"client_name": "x"}, http.StatusBadRequest, "invalid_redirect_uri")
		}},
		{"registration not JSON", func(*testing.T) func(*testing.T) {
			return func(t *testing.T) {
				resp, _ := e.postJSON("/register", []byte("redirect_uris=x"))
				if resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("got %d", resp.StatusCode)
				}
			}
		}},
		{"javascript: redirect", hostileRedirect("javascript:alert(1)")},
		{"JavaScript: redirect, mixed case", hostileRedirect("JavaScript://x/%0aalert(1)")},
		{"data: redirect", hostileRedirect("data:text/html,<script>alert(1)</script>")},
		{"file: redirect", hostileRedirect("file:///etc/passwd")},
		{"vbscript: redirect", hostileRedirect("vbscript:msgbox(1)")},
		{"http non-loopback redirect", hostileRedirect("http://evil.example/cb")},
		{"http look-alike loopback redirect", hostileRedirect("http://127.0.0.1.evil.example/cb")},
		{"redirect with fragment", hostileRedirect("https://app.example/cb#frag")},
		{"redirect with credentials", hostileRedirect("https://user:pass@app.example/cb")},
		{"relative redirect", hostileRedirect("/cb")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := c.prepare(t)
			before := e.keys()
			bad(t)
			after := e.keys()
			for _, k := range after {
				if !slices.Contains(before, k) {
					t.Errorf("storage grew: %s", k)
				}
			}
		})
	}
}

// TestRedirectURIs lists what registration accepts.
func TestRedirectURIs(t *testing.T) {
	for _, uri := range []string{
		"https://claude.ai/api/mcp/auth_callback",
		"https://claude.com/api/mcp/auth_callback",
		"https://chatgpt.com/connector_platform_oauth_redirect",
		"http://127.0.0.1/callback",
		"http://127.0.0.1:33418/callback",
		"http://[::1]:8080/cb",
		"http://localhost:6274/oauth/callback",
		"cursor://anysphere.cursor-retrieval/oauth/user-sandbox/callback",
		"com.example.app:/oauth2redirect",
		"https://app.example/cb?tenant=1",
	} {
		if err := validateRedirectURI(uri); err != nil {
			t.Errorf("%s: %v", uri, err)
		}
	}
	matches := []struct {
		registered, requested string
		want                  bool
	}{
		{"http://127.0.0.1/callback", "http://127.0.0.1:1234/callback", true},
		{"http://127.0.0.1:5000/callback", "http://127.0.0.1:1234/callback", true},
		{"http://[::1]/cb", "http://[::1]:9/cb", true},
		{"http://localhost/cb", "http://localhost:9/cb", true},
		{"http://127.0.0.1/callback", "http://localhost:1234/callback", false},
		{"http://127.0.0.1/callback", "http://127.0.0.1:1234/other", false},
		{"http://127.0.0.1/callback", "http://127.0.0.1:99999/callback", false},
		{"https://app.example/cb", "https://app.example:8443/cb", false},
		{"https://app.example/cb", "https://app.example/cb/", false},
		{"https://app.example/cb", "https://APP.example/cb", false},
		{"cursor://a/cb", "cursor://a/cb", true},
	}
	for _, m := range matches {
		if got := redirectURIMatches(m.registered, m.requested); got != m.want {
			t.Errorf("match(%s, %s) = %t, want %t", m.registered, m.requested, got, m.want)
		}
	}
}

// TestWrongKeyRateLimit: distinct wrong keys are slowed after five and block the
// address after ten; one wrong key retried counts once. A blocked address waits before
// any new key (the right one too) is looked at, and the right key works once that wait
// is over. Nothing is stored meanwhile.
func TestWrongKeyRateLimit(t *testing.T) {
	e := newTestEnv(t, nil)
	reg := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})
	params, _ := authParamsFor(e, reg.ClientID, httpsRedirect)
	_, page := e.get("/authorize?" + params.Encode())
	form := formFields(t, page)
	before := e.keys()

	for range 3 * signinBlockAfter {
		form.Set("api_key", "the same wrong key")
		if resp, _ := e.postForm("/authorize", form); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("one wrong key retried: %d, want 403", resp.StatusCode)
		}
	}
	for i := 2; i <= signinBlockAfter; i++ {
		form.Set("api_key", fmt.Sprintf("guess %d", i))
		resp, body := e.postForm("/authorize", form)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "not correct") {
			t.Fatalf("wrong key #%d: %d", i, resp.StatusCode)
		}
		var want int64
		for n := 2; n <= i; n++ {
			want += signinDelay(n).Milliseconds()
		}
		if got := e.sleeps.Load(); got != want {
			t.Fatalf("after wrong key #%d slept %dms in total, want %dms", i, got, want)
		}
	}
	if e.sleeps.Load() == 0 {
		t.Fatal("wrong keys were never slowed")
	}
	form.Set("api_key", testKey)
	resp, body := e.postForm("/authorize", form)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("after %d wrong keys: %d (Retry-After %q), want 429", signinBlockAfter, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if !strings.Contains(string(body), "Too many") {
		t.Fatalf("429 page: %s", body)
	}
	if after := e.keys(); !slices.Equal(before, after) {
		t.Fatalf("storage changed during wrong keys: %v -> %v", before, after)
	}

	e.clock.Advance(blockedFirstWait)
	resp, _ = e.postForm("/authorize", form)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("right key after the first wait of a blocked address: %d, want 303", resp.StatusCode)
	}
}

func TestPageHelpers(t *testing.T) {
	for uri, want := range map[string]string{
		"https://claude.ai/api/mcp/auth_callback": "https://claude.ai",
		"http://127.0.0.1:4567/cb":                "http://127.0.0.1:4567",
		"http://[::1]:4567/cb":                    "http:",
		"cursor://anysphere.cursor-retrieval/cb":  "cursor:",
		"com.example.app:/cb":                     "com.example.app:",
	} {
		if got := cspSource(uri); got != want {
			t.Errorf("cspSource(%s) = %q, want %q", uri, got, want)
		}
	}
	for uri, want := range map[string]string{
		"https://claude.ai/api/mcp/auth_callback": "claude.ai",
		"http://127.0.0.1:4567/cb":                "127.0.0.1:4567 (this computer)",
		"cursor://anysphere.cursor-retrieval/cb":  "cursor://anysphere.cursor-retrieval",
		"com.example.app:/cb":                     "com.example.app: (an app on this computer)",
	} {
		if got := redirectHost(uri); got != want {
			t.Errorf("redirectHost(%s) = %q, want %q", uri, got, want)
		}
	}
}
