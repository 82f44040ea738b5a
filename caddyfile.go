package mcpsandbox

import (
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/config"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("mcp_sandbox", parseCaddyfile)
	// Early in the chain: the handler claims only its own paths and passes every other
	// request on, so it combines with file_server, reverse_proxy and the rest.
	httpcaddyfile.RegisterDirectiveOrder("mcp_sandbox", httpcaddyfile.Before, "handle")
	httpcaddyfile.RegisterGlobalOption("mcp_sandbox", parseGlobalOption)
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens; the syntax is
// config.Settings.UnmarshalCaddyfile's.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return h.Settings.UnmarshalCaddyfile(d)
}

// parseGlobalOption parses the global block:
//
//	{
//		mcp_sandbox {
//			docker_host <address>   # default: DOCKER_HOST, else the local socket
//		}
//	}
func parseGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	d.Next()
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "docker_host":
			if app.DockerHost != "" {
				return nil, d.Err("duplicate subdirective docker_host")
			}
			if err := config.OneValue(d, &app.DockerHost); err != nil {
				return nil, err
			}
		default:
			return nil, d.Errf("unrecognized subdirective %s", d.Val())
		}
	}
	return httpcaddyfile.App{Name: "mcp_sandbox", Value: caddyconfig.JSON(app, nil)}, nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Handler)(nil)
