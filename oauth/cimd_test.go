package oauth

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// metadataHost serves client ID metadata documents over TLS on 127.0.0.1.
type metadataHost struct {
	ts      *httptest.Server
	fetches atomic.Int64
}

func newMetadataHost(t *testing.T) *metadataHost {
	h := &metadataHost{}
	h.ts = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fetches.Add(1)
		self := h.ts.URL + r.URL.Path
		doc := map[string]any{
			"client_id":     self,
			"client_name":   "Metadata Client",
			"redirect_uris": []string{httpsRedirect},
			"grant_types":   []string{"authorization_code", "refresh_token"},
		}
		switch r.URL.Path {
		case "/good.json":
			w.Header().Set("Cache-Control", "max-age=600")
		case "/liar.json":
			doc["client_id"] = "https://claude.ai/oauth/client.json"
		case "/jwt.json":
			doc["token_endpoint_auth_method"] = "private_key_jwt"
		case "/secret.json":
			doc["client_secret"] = "s"
		case "/bad-redirect.json":
			doc["redirect_uris"] = []string{"javascript:alert(1)"}
		case "/huge.json":
			doc["client_name"] = strings.Repeat("x", maxMetadataDocument)
		case "/moved.json":
			http.Redirect(w, r, "/good.json", http.StatusFound)
			return
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(h.ts.Close)
	return h
}

// TestMetadataDocumentPrivateAddressRefused: by default a client_id URL on a loopback
// address is refused before any fetch, and the default client's dialer refuses private
// addresses even when a name resolves to them.
func TestMetadataDocumentPrivateAddressRefused(t *testing.T) {
	host := newMetadataHost(t)
	e := newTestEnv(t, nil)
	before := e.keys()
	for _, id := range []string{
		host.ts.URL + "/good.json",
		strings.Replace(host.ts.URL, "127.0.0.1", "localhost", 1) + "/good.json",
		"https://[::1]/good.json",
		"https://10.0.0.1/good.json",
		"https://169.254.169.254/latest/meta-data",
		"http://example.com/client.json", // not https
		"https://example.com",            // no path
		"https://example.com/a/../b.json",
	} {
		params, _ := authParamsFor(e, id, httpsRedirect)
		resp, body := e.get("/authorize?" + params.Encode())
		wantPage(t, resp, body, http.StatusBadRequest, "Application not accepted")
	}
	if n := host.fetches.Load(); n != 0 {
		t.Fatalf("%d fetches of refused URLs", n)
	}
	if after := e.keys(); !slices.Equal(before, after) {
		t.Fatalf("storage changed: %v", after)
	}

	// The dial-time check, which DNS cannot get around.
	client := newMetadataClient(false)
	client.Transport.(*http.Transport).TLSClientConfig = host.ts.Client().Transport.(*http.Transport).TLSClientConfig
	localName := strings.Replace(host.ts.URL, "127.0.0.1", "localhost", 1)
	for _, u := range []string{host.ts.URL + "/good.json", localName + "/good.json"} {
		_, err := client.Get(u)
		if err == nil || !strings.Contains(err.Error(), "non-public") {
			t.Fatalf("GET %s with the default client: %v, want a refusal", u, err)
		}
	}
	if n := host.fetches.Load(); n != 0 {
		t.Fatalf("%d fetches got through the dialer", n)
	}
	// Allowed for development.
	allowed := newMetadataClient(true)
	allowed.Transport.(*http.Transport).TLSClientConfig = client.Transport.(*http.Transport).TLSClientConfig
	resp, err := allowed.Get(host.ts.URL + "/good.json")
	if err != nil {
		t.Fatalf("GET with private addresses allowed: %v", err)
	}
	resp.Body.Close()
}

// TestMetadataDocumentClient: with private addresses allowed (development) and the test
// server's TLS client, a good document signs in and gets tokens without registration;
// lying or unacceptable documents are refused and nothing is stored.
func TestMetadataDocumentClient(t *testing.T) {
	host := newMetadataHost(t)
	e := newTestEnv(t, func(o *Options) {
		o.AllowPrivateClientMetadataURLs = true
		o.HTTPClient = host.ts.Client()
	})
	good := host.ts.URL + "/good.json"

	params, _ := authParamsFor(e, good, httpsRedirect)
	resp, page := e.get("/authorize?" + params.Encode())
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign-in page for a metadata document client: %d %s", resp.StatusCode, page)
	}
	for _, want := range []string{"Metadata Client", strings.TrimPrefix(host.ts.URL, "https://"), "app.example"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("sign-in page does not show %q", want)
		}
	}
	c := e.newCode(good, httpsRedirect)
	status, tok, oe := e.tokenCall(c.form())
	if status != http.StatusOK {
		t.Fatalf("token for a metadata document client: %d %v", status, oe)
	}
	if got := e.callMCP(tok.AccessToken); got != http.StatusOK {
		t.Fatalf("/mcp: %d", got)
	}
	if n := host.fetches.Load(); n != 1 {
		t.Fatalf("document fetched %d times, want once (cached)", n)
	}
	for _, k := range e.keys() {
		if strings.Contains(k, "/clients/") {
			t.Fatalf("a metadata document client was stored: %s", k)
		}
	}

	// A redirect URI the document does not list.
	params, _ = authParamsFor(e, good, "https://evil.example/cb")
	resp, body := e.get("/authorize?" + params.Encode())
	wantPage(t, resp, body, http.StatusBadRequest, "did not register")

	before := e.keys()
	for path, why := range map[string]string{
		"/liar.json":         "is not the URL it was fetched from",
		"/jwt.json":          "private_key_jwt is not supported",
		"/secret.json":       "client_secret",
		"/bad-redirect.json": "javascript",
		"/huge.json":         "larger than",
		"/moved.json":        "could not be fetched",
		"/missing.json":      "could not be fetched",
	} {
		params, _ := authParamsFor(e, host.ts.URL+path, httpsRedirect)
		resp, body := e.get("/authorize?" + params.Encode())
		wantPage(t, resp, body, http.StatusBadRequest, "Application not accepted")
		if !strings.Contains(string(body), why) {
			t.Errorf("%s: page does not say %q:\n%s", path, why, body)
		}
		// No code can exist for it, so the token endpoint has nothing to give.
		e.wantTokenError(url.Values{"grant_type": {"authorization_code"}, "client_id": {host.ts.URL + path},
			"code": {"x"}, "code_verifier": {strings.Repeat("v", 43)}}, http.StatusBadRequest, "invalid_grant")
	}
	if after := e.keys(); !slices.Equal(before, after) {
		t.Fatalf("storage changed: %v -> %v", before, after)
	}

	// The token endpoint does not fetch documents: a refresh works while the client's
	// site is down, and a code of one metadata client is useless to another.
	fetches := host.fetches.Load()
	status, _, oe = e.tokenCall(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}, "client_id": {good}})
	if status != http.StatusOK || host.fetches.Load() != fetches {
		t.Fatalf("refresh of a metadata document client: %d %v, %d fetches", status, oe, host.fetches.Load()-fetches)
	}
	c = e.newCode(good, httpsRedirect)
	f := c.form()
	f.Set("client_id", host.ts.URL+"/liar.json")
	e.wantTokenError(f, http.StatusBadRequest, "invalid_grant")
	f.Set("client_id", "http://example.com/good.json") // not https
	e.wantTokenError(f, http.StatusUnauthorized, "invalid_client")
}

func TestMetadataCacheTTL(t *testing.T) {
	for cc, want := range map[string]time.Duration{
		"":                        defaultMetadataCacheTTL,
		"max-age=3600":            time.Hour,
		"public, max-age=5":       minMetadataCacheTTL,
		"max-age=99999999":        maxMetadataCacheTTL,
		"no-store":                minMetadataCacheTTL,
		"max-age=600, no-cache":   minMetadataCacheTTL,
		"max-age=nonsense":        defaultMetadataCacheTTL,
		`max-age="120"`:           2 * time.Minute,
		"private, max-age=0, foo": minMetadataCacheTTL,
	} {
		if got := metadataCacheTTL(cc); got != want {
			t.Errorf("metadataCacheTTL(%q) = %v, want %v", cc, got, want)
		}
	}
}
