package oauth

import "testing"

// TestOriginRules: the browser-origin rule of /mcp, without Docker or Caddy. The site's
// own origin counts only through public_url: a rebinding page shares the request's Host.
func TestOriginRules(t *testing.T) {
	const public = "https://sandbox.example.com"
	allowed := []string{"https://inspector.example.org"}
	for _, c := range []struct {
		origin, public string
		want           bool
	}{
		{"https://sandbox.example.com", public, true},
		{"HTTPS://Sandbox.Example.com", public, true},
		{"http://sandbox.example.com", public, false},
		{"https://sandbox.example.com:8443", public, false},
		{"https://inspector.example.org", public, true},
		{"https://inspector.example.org", "", true},
		{"http://localhost:6274", "", true},
		{"http://localhost", public, true},
		{"http://app.localhost:3000", "", true},
		{"http://127.0.0.1:6274", "", true},
		{"http://127.9.9.9", "", true},
		{"http://[::1]:6274", "", true},
		// DNS rebinding: the attacker's name resolves to this server; without public_url
		// the Origin equals the request's Host, and that must not be enough.
		{"http://rebind.attacker.example:8080", "", false},
		{"https://sandbox.example.com", "", false},
		{"http://localhost.attacker.example", "", false},
		{"http://127.0.0.1.nip.io", "", false},
		{"http://[::ffff:127.0.0.1]", "", true},
		{"http://10.0.0.5", "", false},
		{"null", "", false},
		{"", public, false},
		{"file://", "", false},
		{"chrome-extension://abc", "", false},
		{"https://sandbox.example.com/", public, false},
		{"https://sandbox.example.com/path", public, false},
	} {
		if got := OriginAllowed(c.origin, c.public, allowed); got != c.want {
			t.Errorf("OriginAllowed(%q, public_url %q) = %v, want %v", c.origin, c.public, got, c.want)
		}
	}
}
