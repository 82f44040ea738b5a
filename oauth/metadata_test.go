package oauth

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/certmagic"
)

// TestMetadataDocuments checks the discovery documents field by field against what
// Claude and ChatGPT rely on: issuer = origin exactly (no trailing slash), endpoints at
// the root, S256, "none" among the auth methods together with
// client_id_metadata_document_supported (Claude uses metadata documents only then),
// the resource exactly the MCP URL, and the path-suffixed resource metadata.
func TestMetadataDocuments(t *testing.T) {
	e := newTestEnv(t, nil)
	o := e.origin

	wantPRM := map[string]any{
		"resource":                 o + "/mcp",
		"authorization_servers":    []any{o},
		"scopes_supported":         []any{Scope},
		"bearer_methods_supported": []any{"header"},
		"resource_name":            "MCP Sandbox",
	}
	wantASM := map[string]any{
		"issuer":                                         o,
		"authorization_endpoint":                         o + "/authorize",
		"token_endpoint":                                 o + "/token",
		"registration_endpoint":                          o + "/register",
		"revocation_endpoint":                            o + "/revoke",
		"scopes_supported":                               []any{Scope},
		"response_types_supported":                       []any{"code"},
		"response_modes_supported":                       []any{"query"},
		"grant_types_supported":                          []any{"authorization_code", "refresh_token"},
		"token_endpoint_auth_methods_supported":          []any{"none", "client_secret_post", "client_secret_basic"},
		"revocation_endpoint_auth_methods_supported":     []any{"none", "client_secret_post", "client_secret_basic"},
		"code_challenge_methods_supported":               []any{"S256"},
		"client_id_metadata_document_supported":          true,
		"authorization_response_iss_parameter_supported": true,
	}
	for path, want := range map[string]map[string]any{
		"/.well-known/oauth-protected-resource":       wantPRM,
		"/.well-known/oauth-protected-resource/mcp":   wantPRM,
		"/.well-known/oauth-authorization-server":     wantASM,
		"/.well-known/oauth-authorization-server/mcp": wantASM,
	} {
		resp, body := e.get(path)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if resp.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("GET %s: no CORS", path)
		}
		var got map[string]any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if !reflect.DeepEqual(got[k], v) {
				t.Errorf("%s: %s = %#v, want %#v", path, k, got[k], v)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: unexpected field %s", path, k)
			}
		}
	}
	if strings.HasSuffix(wantASM["issuer"].(string), "/") {
		t.Fatal("issuer ends with a slash")
	}

	// The 401 of the resource points at the path-suffixed document.
	resp, _ := e.get("/mcp")
	want := `Bearer resource_metadata="` + o + `/.well-known/oauth-protected-resource/mcp"`
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != want {
		t.Fatalf("401: %d %q, want %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), want)
	}
	req, _ := http.NewRequest(http.MethodGet, e.url("/mcp"), nil)
	req.Header.Set("Authorization", "Bearer nope")
	resp, _ = e.do(req)
	if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, want+`, error="invalid_token"`) {
		t.Fatalf("401 for a bad token: %q", got)
	}
}

// TestCORS: browser-based clients can preflight and call the JSON endpoints.
func TestCORS(t *testing.T) {
	e := newTestEnv(t, nil)
	for _, path := range []string{"/register", "/token", "/revoke", "/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource/mcp"} {
		req, _ := http.NewRequest(http.MethodOptions, e.url(path), nil)
		req.Header.Set("Origin", "http://localhost:6274")
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type, authorization")
		resp, _ := e.do(req)
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" ||
			!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
			t.Errorf("preflight %s: %d %v", path, resp.StatusCode, resp.Header)
		}
	}
	resp, _ := e.postForm("/token", nil)
	if resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Error("/token errors lack CORS")
	}
	resp, _ = e.get("/token")
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /token: %d", resp.StatusCode)
	}
}

func TestHandles(t *testing.T) {
	srv, err := New(Options{APIKey: "k", Storage: &certmagic.FileStorage{Path: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	ours := []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp",
		"/.well-known/oauth-authorization-server", "/.well-known/oauth-authorization-server/mcp",
		"/register", "/authorize", "/token", "/revoke"}
	theirs := []string{"/", "/mcp", "/files/x", "/.well-known/openid-configuration", "/token/", "/authorize/x",
		"/.well-known/oauth-protected-resource/other"}
	for _, p := range append(slices.Clone(ours), theirs...) {
		r := httptest.NewRequest(http.MethodGet, p, nil)
		if got, want := srv.Handles(r), slices.Contains(ours, p); got != want {
			t.Errorf("Handles(%s) = %t, want %t", p, got, want)
		}
	}
}

func TestOrigin(t *testing.T) {
	st := &certmagic.FileStorage{Path: t.TempDir()}
	derived, _ := New(Options{APIKey: "k", Storage: st})
	fixed, _ := New(Options{APIKey: "k", Storage: st, PublicURL: "https://Sandbox.Example.com/"})
	r := httptest.NewRequest(http.MethodGet, "/mcp", nil)
	r.Host = "Host.Example:8443"
	if got := derived.Origin(r); got != "http://host.example:8443" {
		t.Errorf("derived origin %q", got)
	}
	r.TLS = &tls.ConnectionState{}
	if got := derived.Origin(r); got != "https://host.example:8443" {
		t.Errorf("derived TLS origin %q", got)
	}
	if got := fixed.Origin(r); got != "https://sandbox.example.com" {
		t.Errorf("fixed origin %q", got)
	}
}

func TestNewValidates(t *testing.T) {
	st := &certmagic.FileStorage{Path: t.TempDir()}
	for name, o := range map[string]Options{
		"no key":             {Storage: st},
		"no storage":         {APIKey: "k"},
		"public URL path":    {APIKey: "k", Storage: st, PublicURL: "https://h/x"},
		"public URL scheme":  {APIKey: "k", Storage: st, PublicURL: "ftp://h"},
		"public URL query":   {APIKey: "k", Storage: st, PublicURL: "https://h?x=1"},
		"resource path":      {APIKey: "k", Storage: st, ResourcePath: "mcp"},
		"resource path root": {APIKey: "k", Storage: st, ResourcePath: "/"},
		"negative TTL":       {APIKey: "k", Storage: st, CodeTTL: -1},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
	if KeyFingerprint("a") == KeyFingerprint("b") || len(KeyFingerprint("a")) != 16 {
		t.Error("key fingerprints")
	}
}
