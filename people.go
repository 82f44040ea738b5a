package mcpsandbox

import (
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// sandboxConfigFor is the sandbox configuration of a person ("" is the operator,
// whose sandbox keeps today's names): container <container>-<person> and volume
// <volume>-<person>.
func (h *Handler) sandboxConfigFor(person string) (sandbox.Config, error) {
	cfg, err := h.sandboxConfig()
	if err != nil || person == "" {
		return cfg, err
	}
	cfg.Container += "-" + person
	cfg.Volume += "-" + person
	return cfg, cfg.Validate()
}
