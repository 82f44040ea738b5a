package mcphttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// personKey carries a request's person in these tests, as the caller does in the site.
type personKey struct{}

func personOf(ctx context.Context) string { s, _ := ctx.Value(personKey{}).(string); return s }

// TestSessionIDs: an id minted for a person belongs to that person only, under the
// key it was minted with; anything else (another person, the operator, another key,
// mcp-go's own form, a changed character) belongs to no one.
func TestSessionIDs(t *testing.T) {
	ids := NewSessionIDs("the-api-key-0123456789", personOf)
	alice := ids.Mint("alice", Declared{})
	changed := alice[:len(alice)-1] + "0"
	if changed == alice {
		changed = alice[:len(alice)-1] + "1"
	}
	if !ids.Belongs(alice, "alice") {
		t.Fatalf("%q is not alice's", alice)
	}
	if ids.Mint("alice", Declared{}) == alice {
		t.Fatal("two sessions got the same id")
	}
	for _, tc := range []struct{ id, person string }{
		{alice, "bob"},
		{alice, ""},
		{changed, "alice"},
		{"mcp-session-00000000-0000-4000-8000-000000000000", "alice"},
		{"", "alice"},
		{"mcp-session-", ""},
	} {
		if ids.Belongs(tc.id, tc.person) {
			t.Errorf("%q belongs to %q", tc.id, tc.person)
		}
	}
	if NewSessionIDs("another-api-key-0123456789", personOf).Belongs(alice, "alice") {
		t.Error("an id belongs under another api_key")
	}
	// mcp-go asks the manager of the request's person.
	r, _ := http.NewRequest("POST", "/mcp", nil)
	r = r.WithContext(context.WithValue(r.Context(), personKey{}, "bob"))
	m := ids.ResolveSessionIdManager(r)
	if _, err := m.Validate(alice); err == nil {
		t.Error("bob's manager validates alice's id")
	}
	if _, err := m.Terminate(alice); err == nil {
		t.Error("bob's manager ends alice's session")
	}
	if _, err := m.Validate(m.Generate()); err != nil {
		t.Errorf("bob's own id: %v", err)
	}
}

// TestSessionIDsArePinned pins the construction: ids handed out before an upgrade must
// keep belonging to their person after it. The MAC was computed with openssl (key:
// printf 'mcp_sandbox session ids\0k3y' | openssl dgst -sha256; MAC: printf
// '<nonce>\0alice' | openssl dgst -sha256 -mac HMAC -macopt hexkey:<key>, first 16
// bytes), independently of this code.
func TestSessionIDsArePinned(t *testing.T) {
	id := "mcp-session-00112233445566778899aabbccddeeff-b9703cce0f2e5c379bba211f0f6d6e4d"
	if !NewSessionIDs("k3y", personOf).Belongs(id, "alice") {
		t.Errorf("%s no longer belongs to alice under the same key", id)
	}
}

// TestAdmit: a request carrying another person's session id is answered 404, as
// mcp-go answers an unknown session; one without an id or with its own goes on.
func TestAdmit(t *testing.T) {
	ids := NewSessionIDs("k3y", personOf)
	for _, tc := range []struct {
		name, sid, person string
		want              bool
	}{
		{"no id", "", "bob", true},
		{"own id", ids.Mint("bob", Declared{}), "bob", true},
		{"another's id", ids.Mint("alice", Declared{}), "bob", false},
		{"the operator's id", ids.Mint("", Declared{}), "bob", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/mcp", nil)
			if tc.sid != "" {
				r.Header.Set("Mcp-Session-Id", tc.sid)
			}
			rec := httptest.NewRecorder()
			if got := ids.Admit(rec, r, tc.person); got != tc.want {
				t.Fatalf("Admit = %v, want %v", got, tc.want)
			}
			if !tc.want && rec.Code != http.StatusNotFound {
				t.Errorf("status %d, want 404", rec.Code)
			}
		})
	}
}
