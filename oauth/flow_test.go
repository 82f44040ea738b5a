package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

var resourceMetadataParam = regexp.MustCompile(`resource_metadata="([^"]+)"`)

// flowClient is what an MCP client knows after discovery and registration.
type flowClient struct {
	cfg      *oauth2.Config
	resource string
	ctx      context.Context
}

// discoverAndRegister does what an MCP client does on its first 401: discovery from the
// challenge, both metadata documents, dynamic registration.
func discoverAndRegister(t *testing.T, e *testEnv, redirectURL string) *flowClient {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url("/mcp"), nil)
	resp, _ := e.do(req)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/mcp without a token: %d, want 401", resp.StatusCode)
	}
	m := resourceMetadataParam.FindStringSubmatch(resp.Header.Get("WWW-Authenticate"))
	if m == nil {
		t.Fatalf("no resource_metadata in %q", resp.Header.Get("WWW-Authenticate"))
	}
	resp, body := e.get(m[1])
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", m[1], resp.StatusCode)
	}
	var prm ProtectedResourceMetadata
	if err := json.Unmarshal(body, &prm); err != nil {
		t.Fatal(err)
	}
	if len(prm.AuthorizationServers) != 1 {
		t.Fatalf("authorization_servers = %v", prm.AuthorizationServers)
	}
	resp, body = e.get(prm.AuthorizationServers[0] + "/.well-known/oauth-authorization-server")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("AS metadata: %d", resp.StatusCode)
	}
	var asm AuthorizationServerMetadata
	if err := json.Unmarshal(body, &asm); err != nil {
		t.Fatal(err)
	}
	reg := e.register(map[string]any{
		"redirect_uris":              []string{"http://127.0.0.1/callback"},
		"token_endpoint_auth_method": "none",
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"client_name":                "Flow Test Client",
	})
	cfg := &oauth2.Config{
		ClientID: reg.ClientID,
		Endpoint: oauth2.Endpoint{
			AuthURL:   asm.AuthorizationEndpoint,
			TokenURL:  asm.TokenEndpoint,
			AuthStyle: oauth2.AuthStyleInParams,
		},
		RedirectURL: redirectURL,
		Scopes:      prm.ScopesSupported,
	}
	return &flowClient{
		cfg:      cfg,
		resource: prm.Resource,
		ctx:      context.WithValue(t.Context(), oauth2.HTTPClient, e.ts.Client()),
	}
}

// authorize runs the browser part: sign-in page, key, redirect; and exchanges the code.
func (c *flowClient) authorize(t *testing.T, e *testEnv) *oauth2.Token {
	t.Helper()
	return c.authorizeWith(t, e, testKey)
}

// authorizeWith is authorize with the key typed on the sign-in page.
func (c *flowClient) authorizeWith(t *testing.T, e *testEnv, key string) *oauth2.Token {
	t.Helper()
	verifier := oauth2.GenerateVerifier()
	state := "state-" + randomID()
	authURL := c.cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier),
		oauth2.SetAuthURLParam("resource", c.resource))
	loc := e.signIn(authURL, key)
	q := loc.Query()
	if got := loc.Scheme + "://" + loc.Host + loc.Path; got != c.cfg.RedirectURL {
		t.Fatalf("redirected to %s, want %s", got, c.cfg.RedirectURL)
	}
	if q.Get("state") != state || q.Get("iss") != e.origin || q.Get("code") == "" {
		t.Fatalf("redirect query %v: want code, state %q, iss %q", q, state, e.origin)
	}
	tok, err := c.cfg.Exchange(c.ctx, q.Get("code"), oauth2.VerifierOption(verifier),
		oauth2.SetAuthURLParam("resource", c.resource))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	if tok.TokenType != "Bearer" || tok.RefreshToken == "" || tok.Extra("scope") != Scope {
		t.Fatalf("token response: type %q refresh %t scope %v", tok.TokenType, tok.RefreshToken != "", tok.Extra("scope"))
	}
	if d := time.Until(tok.Expiry); d < 55*time.Minute || d > 61*time.Minute {
		t.Fatalf("access token expires in %v, want about 1h", d)
	}
	return tok
}

// refresh uses a refresh token once.
func (c *flowClient) refresh(refreshToken string) (*oauth2.Token, error) {
	return c.cfg.TokenSource(c.ctx, &oauth2.Token{RefreshToken: refreshToken, Expiry: time.Now().Add(-time.Hour)}).Token()
}

func wantInvalidGrant(t *testing.T, err error) {
	t.Helper()
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.ErrorCode != "invalid_grant" {
		t.Fatalf("got %v, want invalid_grant", err)
	}
}

// TestFlow is the whole life of a sign-in with golang.org/x/oauth2 over real HTTP:
// discovery, registration, sign-in, code exchange with PKCE, use, rotation, restart,
// key change, refresh-token reuse and revocation.
func TestFlow(t *testing.T) {
	e := newTestEnv(t, nil)
	// The registered redirect has no port; the request uses one (RFC 8252).
	c := discoverAndRegister(t, e, "http://127.0.0.1:45678/callback")

	t1 := c.authorize(t, e)
	if got := e.callMCP(t1.AccessToken); got != http.StatusOK {
		t.Fatalf("/mcp with the access token: %d", got)
	}

	t2, err := c.refresh(t1.RefreshToken)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if t2.RefreshToken == t1.RefreshToken || t2.AccessToken == t1.AccessToken {
		t.Fatal("refresh did not rotate the tokens")
	}
	if got := e.callMCP(t2.AccessToken); got != http.StatusOK {
		t.Fatalf("/mcp with the refreshed token: %d", got)
	}

	// Restart: a new Server on the same storage and key keeps the sign-in.
	e.restart(e.opts)
	if got := e.callMCP(t2.AccessToken); got != http.StatusOK {
		t.Fatalf("/mcp after restart: %d", got)
	}
	t3, err := c.refresh(t2.RefreshToken)
	if err != nil {
		t.Fatalf("refresh after restart: %v", err)
	}
	if got := e.callMCP(t3.AccessToken); got != http.StatusOK {
		t.Fatalf("/mcp with the token refreshed after restart: %d", got)
	}

	// Another key: every token is refused, and nothing is revoked by trying.
	other := e.opts
	other.APIKey = "a different key"
	e.restart(other)
	if got := e.callMCP(t3.AccessToken); got != http.StatusUnauthorized {
		t.Fatalf("/mcp with another key: %d, want 401", got)
	}
	if _, err := c.refresh(t3.RefreshToken); err == nil {
		t.Fatal("refresh with another key succeeded")
	}
	e.restart(e.opts)
	if got := e.callMCP(t3.AccessToken); got != http.StatusOK {
		t.Fatalf("/mcp back on the right key: %d", got)
	}

	// Reusing a rotated refresh token, after the retry window, revokes the whole sign-in.
	e.clock.Advance(refreshRetryWindow)
	_, err = c.refresh(t2.RefreshToken)
	wantInvalidGrant(t, err)
	if got := e.callMCP(t3.AccessToken); got != http.StatusUnauthorized {
		t.Fatalf("/mcp after refresh-token reuse: %d, want 401", got)
	}
	_, err = c.refresh(t3.RefreshToken)
	wantInvalidGrant(t, err)

	// Revocation: an access token alone, then a refresh token and its whole grant.
	t4 := c.authorize(t, e)
	resp, _ := e.postForm("/revoke", map[string][]string{"token": {t4.AccessToken}, "client_id": {c.cfg.ClientID}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke access token: %d", resp.StatusCode)
	}
	if got := e.callMCP(t4.AccessToken); got != http.StatusUnauthorized {
		t.Fatalf("/mcp with a revoked access token: %d, want 401", got)
	}
	t5, err := c.refresh(t4.RefreshToken)
	if err != nil {
		t.Fatalf("refresh after revoking only the access token: %v", err)
	}
	resp, _ = e.postForm("/revoke", map[string][]string{"token": {t5.RefreshToken}, "token_type_hint": {"refresh_token"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke refresh token: %d", resp.StatusCode)
	}
	if got := e.callMCP(t5.AccessToken); got != http.StatusUnauthorized {
		t.Fatalf("/mcp after revoking the refresh token: %d, want 401", got)
	}
	_, err = c.refresh(t5.RefreshToken)
	wantInvalidGrant(t, err)
	resp, _ = e.postForm("/revoke", map[string][]string{"token": {"no-such-token"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke unknown token: %d, want 200", resp.StatusCode)
	}

	var secrets []string
	for _, tok := range []*oauth2.Token{t1, t2, t3, t4, t5} {
		secrets = append(secrets, tok.AccessToken, tok.RefreshToken)
	}
	e.noSecretsLogged(secrets...)
}

// TestAPIKeyBearer: the key itself is a bearer token only when allowed.
func TestAPIKeyBearer(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.APIKeyBearer = true })
	if got := e.callMCP(testKey); got != http.StatusOK {
		t.Fatalf("API key as bearer: %d", got)
	}
	if got := e.callMCP(testKey + "x"); got != http.StatusUnauthorized {
		t.Fatalf("wrong key as bearer: %d", got)
	}
	opts := e.opts
	opts.APIKeyBearer = false
	e.restart(opts)
	if got := e.callMCP(testKey); got != http.StatusUnauthorized {
		t.Fatalf("API key as bearer when off: %d, want 401", got)
	}
}
