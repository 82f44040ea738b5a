package mcpsandbox

import (
	"net/http"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestSessionIDs: an id minted for a person belongs to that person only, under the
// key it was minted with; anything else (another person, the operator, another key,
// mcp-go's own form, a changed character) belongs to no one.
func TestSessionIDs(t *testing.T) {
	ids := newSessionIDs("the-api-key-0123456789")
	alice := ids.mint("alice")
	changed := alice[:len(alice)-1] + "0"
	if changed == alice {
		changed = alice[:len(alice)-1] + "1"
	}
	if !ids.belongs(alice, "alice") {
		t.Fatalf("%q is not alice's", alice)
	}
	if ids.mint("alice") == alice {
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
		if ids.belongs(tc.id, tc.person) {
			t.Errorf("%q belongs to %q", tc.id, tc.person)
		}
	}
	if newSessionIDs("another-api-key-0123456789").belongs(alice, "alice") {
		t.Error("an id belongs under another api_key")
	}
	// mcp-go asks the manager of the request's person.
	r, _ := http.NewRequest("POST", "/mcp", nil)
	r = r.WithContext(mcptools.WithCaller(r.Context(), mcptools.Caller{Person: "bob"}))
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

// TestPersonOfContainer: a container is a person's sandbox of the site when it is
// named <container>-<person> and labelled with that person; made before the label, on
// the volume <volume>-<person>, only while that person is configured (it could be
// another server's sandbox named that way). The operator's and other sites' are not.
func TestPersonOfContainer(t *testing.T) {
	base := sandbox.Config{Container: "sb", Volume: "sb-data"}
	configured := func(p string) bool { return p == "alice" }
	for _, tc := range []struct {
		c    sandbox.Container
		want string
		ok   bool
	}{
		{sandbox.Container{Name: "sb-carol", Volume: "sb-data-carol", Person: "carol"}, "carol", true},
		{sandbox.Container{Name: "sb-alice", Volume: "sb-data-alice"}, "alice", true},
		{sandbox.Container{Name: "sb-carol", Volume: "sb-data-carol"}, "", false},
		{sandbox.Container{Name: "sb-alice", Volume: "other"}, "", false},
		{sandbox.Container{Name: "sb-carol", Volume: "sb-data-carol", Person: "dave"}, "", false},
		{sandbox.Container{Name: "sb", Volume: "sb-data"}, "", false},
		{sandbox.Container{Name: "sbx-carol", Volume: "sb-data-carol", Person: "carol"}, "", false},
		{sandbox.Container{Name: "sb-Carol!", Volume: "sb-data-Carol!", Person: "Carol!"}, "", false},
	} {
		got, ok := personOfContainer(base, tc.c, configured)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%+v: %q %v, want %q %v", tc.c, got, ok, tc.want, tc.ok)
		}
	}
}
