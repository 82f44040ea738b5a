package oauth

import (
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/origin"
)

// OriginAllowed is the rule for browser origins (raw) on /mcp. An Origin is accepted
// when it is publicOrigin (public_url), one of allowed (allowed_origins, normalised by
// origin.Parse), or a loopback origin (localhost, *.localhost, 127.0.0.0/8, [::1]):
// local developer tools such as the MCP Inspector.
//
// The site's own origin as derived from the request's Host is deliberately not trusted:
// under DNS rebinding the attacker's page and the request share one made-up name that
// resolves to this server, so "Origin equals Host" proves nothing. A page the attacker
// serves can never carry a loopback or a configured origin, which is why this rule holds
// whatever the site's address (a catch-all site included). Pages of the site itself that
// call /mcp need public_url.
func OriginAllowed(raw, publicOrigin string, allowed []string) bool {
	o, err := origin.Parse(raw)
	if err != nil || strings.HasSuffix(raw, "/") {
		return false // includes "null", sent by sandboxed frames and file: pages
	}
	if publicOrigin != "" && o == publicOrigin {
		return true
	}
	if slices.Contains(allowed, o) {
		return true
	}
	u, err := url.Parse(o)
	if err != nil {
		return false
	}
	host := strings.ToLower(u.Hostname())
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
