package testsite

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/oauth2"
)

// hiddenField is a hidden input of the sign-in page, which the form posts back.
var hiddenField = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// SignInForm fetches the sign-in page authURL shows and returns the form that signs in
// with key (its hidden fields filled as the page has them), with the page's status; it
// follows no redirect.
func SignInForm(t testing.TB, authURL, key string) (url.Values, int) {
	t.Helper()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	form := url.Values{"api_key": {key}}
	for _, m := range hiddenField.FindAllStringSubmatch(string(page), -1) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	return form, resp.StatusCode
}

// SignIn plays the person at the sign-in page authURL shows: it posts the form with
// key, follows no redirect, and returns the query of the redirect back to the client
// (code and state).
func SignIn(t testing.TB, authURL, key string) url.Values {
	t.Helper()
	form, status := SignInForm(t, authURL, key)
	if status != 200 {
		t.Fatalf("sign-in page: %d", status)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	u, _ := url.Parse(authURL)
	resp, err := noFollow.PostForm(u.Scheme+"://"+u.Host+"/authorize", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || err != nil {
		t.Fatalf("sign-in answered %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	return loc.Query()
}

// OAuthConfig registers a public OAuth client called name with the site (dynamic
// client registration) and returns its configuration and a PKCE verifier.
func (s *Site) OAuthConfig(t testing.TB, name string) (*oauth2.Config, string) {
	t.Helper()
	redirect := "http://127.0.0.1:45678/callback"
	body, _ := json.Marshal(map[string]any{"client_name": name, "redirect_uris": []string{redirect}, "token_endpoint_auth_method": "none"})
	resp, err := http.Post(s.URL+"/register", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("registration: %d", resp.StatusCode)
	}
	return &oauth2.Config{ClientID: reg.ClientID, RedirectURL: redirect,
		Endpoint: oauth2.Endpoint{AuthURL: s.URL + "/authorize", TokenURL: s.URL + "/token", AuthStyle: oauth2.AuthStyleInParams}}, oauth2.GenerateVerifier()
}

// OAuthToken registers a client called name, signs in with the site's API key and
// returns an access token for the site's /mcp.
func (s *Site) OAuthToken(ctx context.Context, t testing.TB, name string) string {
	t.Helper()
	conf, verifier := s.OAuthConfig(t, name)
	resource := oauth2.SetAuthURLParam("resource", s.URL+"/mcp")
	q := SignIn(t, conf.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier), resource), s.Key)
	tok, err := conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier), resource)
	if err != nil {
		t.Fatal(err)
	}
	return tok.AccessToken
}
