package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"golang.org/x/oauth2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

func mcpWithToken(ctx context.Context, t *testing.T, base, token string) (*mcpclient.Client, error) {
	return testsite.Dial(ctx, t, base, token)
}

// TestOAuthThroughCaddy runs the whole sign-in with golang.org/x/oauth2 against a real
// Caddy: discovery from the 401, registration, sign-in, code exchange with PKCE, an
// MCP call with the token, the token still valid after Caddy restarts, refresh with
// rotation, revocation, and every token invalid once the API key changes.
func TestOAuthThroughCaddy(t *testing.T) {
	s := testsite.Start(t, testsite.Options{Directive: []string{"api_key_bearer off"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Discovery from the 401.
	resp, err := http.Post(s.URL+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	m := regexp.MustCompile(`resource_metadata="([^"]+)"`).FindStringSubmatch(resp.Header.Get("WWW-Authenticate"))
	if resp.StatusCode != 401 || m == nil {
		t.Fatalf("401 without resource_metadata: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	getJSON(t, m[1], &prm)
	if prm.Resource != s.URL+"/mcp" || len(prm.AuthorizationServers) != 1 {
		t.Fatalf("protected resource metadata: %+v", prm)
	}
	var asm struct {
		Issuer                string `json:"issuer"`
		AuthorizationEndpoint string `json:"authorization_endpoint"`
		TokenEndpoint         string `json:"token_endpoint"`
		RegistrationEndpoint  string `json:"registration_endpoint"`
		RevocationEndpoint    string `json:"revocation_endpoint"`
	}
	getJSON(t, prm.AuthorizationServers[0]+"/.well-known/oauth-authorization-server", &asm)
	if asm.Issuer != s.URL || asm.TokenEndpoint != s.URL+"/token" {
		t.Fatalf("authorization server metadata: %+v", asm)
	}

	// Dynamic registration.
	redirect := "http://127.0.0.1:45678/callback"
	regBody, _ := json.Marshal(map[string]any{"client_name": "Go e2e", "redirect_uris": []string{redirect}, "token_endpoint_auth_method": "none"})
	resp, err = http.Post(asm.RegistrationEndpoint, "application/json", strings.NewReader(string(regBody)))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	if resp.StatusCode != 201 || reg.ClientID == "" {
		t.Fatalf("registration: %d %+v", resp.StatusCode, reg)
	}

	conf := &oauth2.Config{
		ClientID:    reg.ClientID,
		RedirectURL: redirect,
		Endpoint:    oauth2.Endpoint{AuthURL: asm.AuthorizationEndpoint, TokenURL: asm.TokenEndpoint, AuthStyle: oauth2.AuthStyleInParams},
	}
	verifier := oauth2.GenerateVerifier()
	resource := oauth2.SetAuthURLParam("resource", s.URL+"/mcp")
	authURL := conf.AuthCodeURL("state-123", oauth2.S256ChallengeOption(verifier), resource)
	q := testsite.SignIn(t, authURL, s.Key)
	if q.Get("state") != "state-123" || q.Get("iss") != s.URL || q.Get("code") == "" {
		t.Fatalf("redirect query: %v", q)
	}
	tok, err := conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier), resource)
	if err != nil {
		t.Fatal(err)
	}

	c, err := mcpWithToken(ctx, t, s.URL, tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if got := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo signed-in"}))["stdout"]; got != "signed-in\n" {
		t.Fatalf("execute with token: %q", got)
	}

	// Restart Caddy: the token still works (state is in Caddy's storage).
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	s.Load(testsite.Options{Directive: []string{"api_key_bearer off"}})
	c, err = mcpWithToken(ctx, t, s.URL, tok.AccessToken)
	if err != nil {
		t.Fatalf("token after restart: %v", err)
	}
	if got := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo after-restart"}))["stdout"]; got != "after-restart\n" {
		t.Fatalf("execute after restart: %q", got)
	}

	// Refresh rotates the refresh token; the old one is then refused.
	old := *tok
	old.Expiry = time.Now().Add(-time.Minute)
	fresh, err := conf.TokenSource(ctx, &old).Token()
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if fresh.RefreshToken == "" || fresh.RefreshToken == tok.RefreshToken || fresh.AccessToken == tok.AccessToken {
		t.Fatal("refresh did not rotate the tokens")
	}
	if _, err := mcpWithToken(ctx, t, s.URL, fresh.AccessToken); err != nil {
		t.Fatalf("refreshed token: %v", err)
	}

	// Revocation: the refreshed access token stops working.
	form := url.Values{"token": {fresh.RefreshToken}, "client_id": {reg.ClientID}}
	resp, err = http.PostForm(asm.RevocationEndpoint, form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	if code := statusWithToken(t, s.URL, fresh.AccessToken); code != 401 {
		t.Fatalf("revoked grant's access token: %d, want 401", code)
	}

	// A new API key invalidates every token and every link.
	tok2, err := conf.Exchange(ctx, testsite.SignIn(t, conf.AuthCodeURL("s2", oauth2.S256ChallengeOption(verifier), resource), s.Key).Get("code"), oauth2.VerifierOption(verifier), resource)
	if err != nil {
		t.Fatal(err)
	}
	if code := statusWithToken(t, s.URL, tok2.AccessToken); code != 200 {
		t.Fatalf("new token: %d", code)
	}
	s.Key = "rotated-key-" + testenv.RandomHex(16)
	s.Load(testsite.Options{Directive: []string{"api_key_bearer off"}})
	if code := statusWithToken(t, s.URL, tok2.AccessToken); code != 401 {
		t.Fatalf("token after key rotation: %d, want 401", code)
	}
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// statusWithToken sends an initialize with the token and returns the HTTP status.
func statusWithToken(t *testing.T, base, token string) int {
	t.Helper()
	return initializeStatus(t, base, "", map[string]string{"Authorization": "Bearer " + token})
}
