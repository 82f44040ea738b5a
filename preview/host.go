package preview

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// NormalizeDomain checks a previews domain (a host name such as preview.example.com or
// localhost: no scheme, port, path or wildcard) and returns it in lowercase without a
// trailing dot.
func NormalizeDomain(d string) (string, error) {
	d = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(d)), ".")
	if d == "" {
		return "", errors.New("previews needs a domain, e.g. preview.example.com, or localhost for local use")
	}
	if strings.Contains(d, "://") || strings.ContainsAny(d, "/:*@ ") {
		return "", fmt.Errorf("previews %q must be a bare domain such as preview.example.com (no scheme, port, path or wildcard)", d)
	}
	if _, err := netip.ParseAddr(d); err == nil {
		return "", fmt.Errorf("previews %q is an IP address; previews need a domain whose subdomains resolve to this server (a wildcard DNS record), or localhost", d)
	}
	// Leave room for "<26-character label>." within DNS's 253 characters.
	if len(d) > 253-labelLen-1 {
		return "", fmt.Errorf("previews %q is too long for a DNS name with a preview label in front", d)
	}
	for _, l := range strings.Split(d, ".") {
		if !dnsLabel(l) {
			return "", fmt.Errorf("previews %q: %q is not a valid DNS label (letters, digits and hyphens, 1-63 characters)", d, l)
		}
	}
	return d, nil
}

func dnsLabel(l string) bool {
	if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// CheckSiteHost refuses a previews domain that would share an origin, or cookies
// scoped to a parent domain, with the site that serves MCP and sign-in: the same host,
// or the site under the previews domain (a preview could then set cookies the site
// receives). localhost as both is allowed for local development: the site at
// http://localhost:8080 and previews at http://<label>.localhost:8080 are different
// origins.
func CheckSiteHost(domain, siteHost string) error {
	h := strings.TrimSuffix(strings.ToLower(siteHost), ".")
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	if h == "" {
		return nil
	}
	switch {
	case h == domain && domain != "localhost":
		return fmt.Errorf("previews %s is the site's own host: previews need their own domain (e.g. preview.%s, or better a separate registrable domain) so that a preview never shares the site's origin", domain, domain)
	case strings.HasSuffix(h, "."+domain):
		return fmt.Errorf("the site %s lies under the previews domain %s: a preview could set cookies the site receives; use a domain for previews that does not contain the site (a separate registrable domain is safest)", h, domain)
	}
	return nil
}

// splitHost returns the label of host (a Host header: any case, optional port and
// trailing dot) when host lies under domain. under reports whether host is a
// subdomain of domain at all; label is "" when it is not one we could have made.
func splitHost(host, domain string) (label string, under bool) {
	if len(host) > 300 {
		// Longer than any DNS name; still ours to refuse if it ends in our domain.
		host = host[len(host)-300:]
	}
	h := strings.ToLower(host)
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	prefix, ok := strings.CutSuffix(h, "."+domain)
	if !ok || prefix == "" {
		return "", false
	}
	if !validLabel(prefix) {
		return "", true
	}
	return prefix, true
}
