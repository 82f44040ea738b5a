package preview

import (
	"context"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
)

func init() {
	caddy.RegisterModule(new(Permission))
}

// Permission is the on-demand TLS permission module `tls.permission.mcp_sandbox`: it
// approves a certificate exactly for the host names of live previews, so nobody can
// make Caddy request certificates for arbitrary names under a wildcard DNS record.
//
//	{
//		on_demand_tls {
//			permission mcp_sandbox
//		}
//	}
type Permission struct {
	reg *Registry // nil: the shared registry
}

// CaddyModule returns the Caddy module information.
func (*Permission) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "tls.permission.mcp_sandbox",
		New: func() caddy.Module { return new(Permission) },
	}
}

// UnmarshalCaddyfile accepts `permission mcp_sandbox` with no arguments.
func (p *Permission) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the module name
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("mcp_sandbox permission takes no options, got %s", d.Val())
	}
	return nil
}

// CertificateAllowed approves name when it is the host of a live preview.
func (p *Permission) CertificateAllowed(ctx context.Context, name string) error {
	reg := p.reg
	if reg == nil {
		reg = Shared()
	}
	if reg.AllowsHost(ctx, name) {
		return nil
	}
	return fmt.Errorf("%s is not a live preview: %w", name, caddytls.ErrPermissionDenied)
}

// Interface guards
var (
	_ caddytls.OnDemandPermission = (*Permission)(nil)
	_ caddyfile.Unmarshaler       = (*Permission)(nil)
)
