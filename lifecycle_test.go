package mcpsandbox

import (
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

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
