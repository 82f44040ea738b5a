package integration

import (
	"testing"

	mcpsandbox "github.com/mcp-sandbox/caddy-mcp-sandbox"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

func TestMain(m *testing.M) { testsite.Main(m) }

// The plugin's Caddy module, registered by importing the package.
var _ = mcpsandbox.Handler{}
