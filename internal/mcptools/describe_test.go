package mcptools

import (
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

func TestDescribeFacts(t *testing.T) {
	for _, tc := range []struct {
		f    *sandbox.Facts
		want string
	}{
		{nil, ""},
		{&sandbox.Facts{Programs: []string{}}, " Installed: only the base system (no python3, node or git)."},
		{&sandbox.Facts{Programs: []string{"python3", "node", "git"}, PythonModules: []string{"numpy", "pandas"}},
			" Installed: python3 (numpy, pandas), node, git."},
		{&sandbox.Facts{Programs: []string{"python3", "jq"}}, " Installed: python3, jq."},
	} {
		if got := describeFacts(tc.f); got != tc.want {
			t.Errorf("describeFacts(%+v) = %q, want %q", tc.f, got, tc.want)
		}
	}
}

// TestDescribeFactsOnlyKnownNames: whatever facts hold, the sentence names only
// programs and modules detection looks for.
func TestDescribeFactsOnlyKnownNames(t *testing.T) {
	f := &sandbox.Facts{
		Programs:      []string{"python3", testenv.PlantedNotice, "git", "git"},
		PythonModules: []string{"numpy", testenv.PlantedNotice},
	}
	if got, want := describeFacts(f), " Installed: python3 (numpy), git."; got != want {
		t.Errorf("describeFacts = %q, want %q", got, want)
	}
	if got := describeFacts(&sandbox.Facts{Programs: []string{testenv.PlantedNotice}}); got != " Installed: only the base system (no python3, node or git)." {
		t.Errorf("describeFacts of nothing known = %q", got)
	}
}
