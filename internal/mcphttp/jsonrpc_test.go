package mcphttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReadBody: a body within the bound is read whole; one over it is refused with 413
// and a JSON-RPC error that says what failed.
func TestReadBody(t *testing.T) {
	rec := httptest.NewRecorder()
	body, ok := ReadBody(rec, httptest.NewRequest("POST", "/mcp", strings.NewReader(`{"jsonrpc":"2.0"}`)))
	if !ok || string(body) != `{"jsonrpc":"2.0"}` {
		t.Fatalf("ReadBody = %q, %v", body, ok)
	}

	rec = httptest.NewRecorder()
	big := strings.NewReader(strings.Repeat("a", MaxRequestBody+1))
	if _, ok := ReadBody(rec, httptest.NewRequest("POST", "/mcp", big)); ok {
		t.Fatal("a body over the bound was read")
	}
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413", rec.Code)
	}
	var msg struct {
		JSONRPC string `json:"jsonrpc"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &msg); err != nil {
		t.Fatalf("not JSON: %v: %s", err, rec.Body)
	}
	if msg.JSONRPC != "2.0" || msg.Error.Code != -32600 || !strings.Contains(msg.Error.Message, "reading request body") {
		t.Errorf("error = %+v", msg)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
}
