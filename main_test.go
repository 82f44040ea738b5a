package mcpsandbox

import (
	"fmt"
	"os"
	"testing"
)

// TestMain gives the tests' Caddy a data directory of its own, removed at the end: each
// test container gets a directory there for the agent's direct channel.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcp-sandbox-data-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test data directory:", err)
		os.Exit(1)
	}
	os.Setenv("XDG_DATA_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
