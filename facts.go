package mcpsandbox

import (
	"context"
	"sync"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/facts"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
)

// What is installed in the sandbox is detected once (internal/facts) and given to the
// tools (Box.Facts) as soon as it is known. Detection starts with the app (warmFacts:
// the container is created or started first), never while provisioning, and
// initialize waits a little for it, so the first session is told what is installed;
// sessions that began before it finished get tools/list_changed.

// warmedContainers are the containers (Docker host and name) warmFacts started.
var warmedContainers sync.Map

// factsDeps is what this configuration brings to a detection in the sandbox of e.
func (h *Handler) factsDeps(e *fleet.Entry) facts.Deps {
	return facts.Deps{
		Source: e.Sandbox(), Store: h.storage, Key: facts.Key(e.Sandbox().Config().Container), Logger: h.logger,
		Changed: func() {
			if h.tools != nil {
				h.tools.DescriptionsChanged()
			}
		},
		Fresh: h.fleet.Warm().Facts,
	}
}

// sandboxFacts returns the facts of the sandbox of e if known, waiting up to wait for
// a detection under way.
func (h *Handler) sandboxFacts(ctx context.Context, e *fleet.Entry, wait time.Duration) *boxapi.Facts {
	return e.Facts().Get(ctx, h.factsDeps(e), wait)
}

// warmFacts starts detection when the app starts, once per container and process: a
// config reload leaves the container alone.
func (h *Handler) warmFacts() {
	e := h.fleet.Operator()
	if _, done := warmedContainers.LoadOrStore(e.Engine().Host+"\x00"+e.Sandbox().Config().Container, true); !done {
		e.Facts().Warm(h.factsDeps(e))
	}
}
