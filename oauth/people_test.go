package oauth

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

const (
	aliceKey = "alice's key, long enough"
	bobKey   = "bob's key, also long enough"
)

// identity calls the protected resource with token and returns who it acts for, or
// the status when refused.
func (e *testEnv) identity(token string) (Identity, int) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url("/mcp"), strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, body := e.do(req)
	var id Identity
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &id); err != nil {
			e.t.Fatal(err)
		}
	}
	return id, resp.StatusCode
}

// TestPeopleSignIn: each person signs in with their own key, on the sign-in page and as
// a bearer; grants, tokens and refreshes carry the person; a person removed from the
// configuration, or given a new key, loses every sign-in at once, while the operator
// and the others keep theirs.
func TestPeopleSignIn(t *testing.T) {
	e := newTestEnv(t, func(o *Options) {
		o.APIKeyBearer = true
		o.People = map[string]string{"alice": aliceKey, "bob": bobKey}
	})
	c := discoverAndRegister(t, e, "http://127.0.0.1/callback")
	aliceTok := c.authorizeWith(t, e, aliceKey)
	bobTok := c.authorizeWith(t, e, bobKey)
	opTok := c.authorize(t, e)

	for _, tc := range []struct {
		token, person, method string
	}{
		{aliceTok.AccessToken, "alice", MethodOAuth},
		{bobTok.AccessToken, "bob", MethodOAuth},
		{opTok.AccessToken, "", MethodOAuth},
		{aliceKey, "alice", MethodPersonKey},
		{bobKey, "bob", MethodPersonKey},
		{testKey, "", MethodAPIKey},
	} {
		id, status := e.identity(tc.token)
		if status != http.StatusOK || id.Person != tc.person || id.Method != tc.method {
			t.Errorf("token of %q: %d %+v, want person %q by %s", tc.person, status, id, tc.person, tc.method)
		}
	}
	if _, status := e.identity(aliceKey + "x"); status != http.StatusUnauthorized {
		t.Errorf("a wrong key as bearer: %d", status)
	}
	refreshed, err := c.refresh(aliceTok.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := e.identity(refreshed.AccessToken); id.Person != "alice" {
		t.Errorf("refreshed token acts for %q, want alice", id.Person)
	}
	grants, err := e.server().Grants(context.Background())
	if err != nil || len(grants) != 3 {
		t.Fatalf("grants %+v %v", grants, err)
	}

	// alice is removed, bob gets a new key.
	opts := e.opts
	opts.People = map[string]string{"bob": bobKey + " (new)"}
	e.restart(opts)
	for _, tok := range []string{refreshed.AccessToken, bobTok.AccessToken, aliceKey, bobKey} {
		if _, status := e.identity(tok); status != http.StatusUnauthorized {
			t.Errorf("after the change, a sign-in of a removed person or an old key: %d, want 401", status)
		}
	}
	_, err = c.refresh(refreshed.RefreshToken)
	wantInvalidGrant(t, err)
	_, err = c.refresh(bobTok.RefreshToken)
	wantInvalidGrant(t, err)
	if id, status := e.identity(opTok.AccessToken); status != http.StatusOK || id.Person != "" {
		t.Errorf("the operator's sign-in after the change: %d %+v", status, id)
	}
	if id, _ := e.identity(bobKey + " (new)"); id.Person != "bob" {
		t.Errorf("bob's new key acts for %q", id.Person)
	}
	grants, _ = e.server().Grants(context.Background())
	if len(grants) != 1 || grants[0].Person != "" {
		t.Errorf("grants after the change: %+v, want only the operator's", grants)
	}
}

// TestPeopleKeysMustDiffer: two people, or a person and the operator, with one key are a
// configuration error.
func TestPeopleKeysMustDiffer(t *testing.T) {
	for _, ppl := range []map[string]string{
		{"alice": aliceKey, "bob": aliceKey},
		{"alice": testKey},
		{"alice": ""},
	} {
		if _, err := New(Options{APIKey: testKey, Storage: newTestEnv(t, nil).storage, People: ppl}); err == nil {
			t.Errorf("people %v: no error", ppl)
		}
	}
}
