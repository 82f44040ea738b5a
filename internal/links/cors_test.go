package links

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
	"go.uber.org/zap"
)

// nopAudit drops what it is given.
type nopAudit struct{}

func (nopAudit) Record(audit.Entry) {}

// An MCP App's upload view runs at an opaque origin ("null"): a preflight for a PUT to
// a valid upload link is allowed without credentials, and nothing else is.
func TestUploadPreflight(t *testing.T) {
	signer := NewSigner("a-long-enough-test-key-0123456789")
	revoked := signer.Upload("/sandbox/other", time.Now().Add(time.Hour))
	s := New(Options{
		Signer: signer, MaxUpload: 1 << 20, Revoked: func(id string) bool { return id == revoked.ID },
		Audit: nopAudit{}, Logger: zap.NewNop(),
		Origin: func(*http.Request) string { return "https://sandbox.example" }, ClientIP: func(*http.Request) string { return "127.0.0.1" },
	})
	live := signer.Upload("/sandbox/uploads", time.Now().Add(time.Hour)).Path
	expired := signer.Upload("/sandbox/uploads", time.Now().Add(-time.Second)).Path
	tampered := strings.Replace(live, "/sandbox/uploads", "/sandbox/upload5", 1)
	if tampered == live {
		t.Fatalf("could not tamper with %s", live)
	}

	preflight := func(path, method string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodOptions, path, nil)
		r.Header.Set("Origin", "null")
		r.Header.Set("Access-Control-Request-Method", method)
		r.Header.Set("Access-Control-Request-Headers", "content-type")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w
	}
	w := preflight(live+"data.csv", http.MethodPut)
	if w.Code != http.StatusNoContent || w.Header().Get("Access-Control-Allow-Origin") != "*" ||
		w.Header().Get("Access-Control-Allow-Methods") != "PUT" || !strings.Contains(w.Header().Get("Access-Control-Allow-Headers"), "Content-Type") {
		t.Fatalf("preflight of a PUT to a valid link: %d %v", w.Code, w.Header())
	}
	if w.Header().Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("credentials allowed: %v", w.Header())
	}
	for name, tc := range map[string]struct {
		path, method string
		status       int
	}{
		"expired":      {expired + "data.csv", http.MethodPut, http.StatusGone},
		"tampered":     {tampered + "data.csv", http.MethodPut, http.StatusForbidden},
		"revoked":      {revoked.Path + "data.csv", http.MethodPut, http.StatusGone},
		"not a PUT":    {live + "data.csv", http.MethodDelete, http.StatusForbidden},
		"the page":     {live, http.MethodGet, http.StatusForbidden},
		"no file name": {live, http.MethodPut, http.StatusForbidden},
		"garbage":      {UploadsPrefix + "nonsense/data.csv", http.MethodPut, http.StatusForbidden},
	} {
		w := preflight(tc.path, tc.method)
		if w.Code != tc.status || w.Header().Get("Access-Control-Allow-Origin") != "" || w.Header().Get("Access-Control-Allow-Methods") != "" {
			t.Errorf("%s: preflight answered %d %v; want %d without CORS headers", name, w.Code, w.Header(), tc.status)
		}
	}
}
