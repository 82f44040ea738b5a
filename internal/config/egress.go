package config

import (
	"encoding/base64"

	"github.com/caddyserver/caddy/v2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
)

// With an `egress` block the sandbox has no network of its own (network none) and
// reaches the outside only through Caddy's proxy, which the agent serves inside the
// container on EgressPort; commands find it in their environment.
const (
	// EgressPort is where the proxy listens inside the container.
	EgressPort = 3128
	// EgressBundle is the CA bundle commands are pointed at: the image's roots plus the
	// egress CA's.
	EgressBundle = "/var/lib/mcp-sandbox/egress/ca-bundle.pem"
)

// EgressConfig is the `egress` block: what the sandbox may reach, through Caddy.
type EgressConfig struct {
	// Allow lists the reachable hosts: example.com, *.example.com (subdomains),
	// example.com:8443 (that port; without one, 80 and 443), or * (every public host;
	// a name Hosts maps to a private or local address needs an entry of its own).
	Allow []string `json:"allow,omitempty"`
	// Deny lists hosts refused even when allowed, in the same forms.
	Deny []string `json:"deny,omitempty"`
	// Hosts maps names to addresses instead of DNS; the only way to reach a private or
	// loopback address.
	Hosts map[string]string `json:"hosts,omitempty"`
	// Credentials are added by Caddy to requests whose URL starts with their prefix;
	// the values never enter the sandbox. One applies per request: the longest prefix
	// that matches. A prefix with a path is matched on the decoded path, and requests
	// with dot segments or encoded slashes, backslashes, dots or % in their path are
	// refused there; TRACE and TRACK are refused to credential hosts. An upstream
	// that echoes request headers back shows the credential to the sandbox: give
	// credentials only for hosts that do not.
	Credentials []EgressCredential `json:"credentials,omitempty"`
	// Ask puts hosts outside Allow (and Deny) to the person, by elicitation, when
	// their client supports it; nil: as the site's block says (off there).
	Ask *bool `json:"ask,omitempty"`
	// TrustCA lists PEM files of extra roots that upstream TLS of intercepted hosts is
	// verified with, on top of the system's.
	TrustCA []string `json:"trust_ca,omitempty"`
}

// EgressCredential is one `credential` line: a header (Header and Value) or Basic
// credentials (User and Password) for a URL prefix. Values may hold placeholders such
// as {env.GITHUB_TOKEN}.
type EgressCredential struct {
	Prefix   string `json:"prefix"`
	Header   string `json:"header,omitempty"`
	Value    string `json:"value,omitempty"`
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
}

// Rules are the block's rules with placeholders resolved.
func (c *EgressConfig) Rules() egress.Rules {
	repl := caddy.NewReplacer()
	r := egress.Rules{Allow: c.Allow, Deny: c.Deny, Hosts: c.Hosts}
	for _, cr := range c.Credentials {
		ec := egress.Credential{Prefix: cr.Prefix, Header: cr.Header, Value: repl.ReplaceAll(cr.Value, "")}
		if cr.User != "" || cr.Password != "" {
			user, pass := repl.ReplaceAll(cr.User, ""), repl.ReplaceAll(cr.Password, "")
			ec.Header, ec.Value = "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
		}
		r.Credentials = append(r.Credentials, ec)
	}
	return r
}
