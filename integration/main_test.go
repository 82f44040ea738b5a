package integration

import (
	"flag"
	"fmt"
	"os"
	"testing"

	mcpsandbox "github.com/mcp-sandbox/caddy-mcp-sandbox"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// go test -short ./... stays free of Docker: every test here drives a real Caddy
		// over a real engine.
		fmt.Println("-short: the end-to-end suite needs a Docker engine, a real Caddy and real clients; skipped")
		os.Exit(0)
	}
	testsite.Main(m)
}

// The plugin's Caddy module, registered by importing the package.
var _ = mcpsandbox.Handler{}
