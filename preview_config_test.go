package mcpsandbox

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// TestPreviewConfigErrors: malformed preview settings fail when adapting; settings that
// parse but would share an origin (or cookies) with the site fail at provision time,
// without Docker.
func TestPreviewConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"previews without domain", "mcp_sandbox {\n\tpreviews\n}", "previews needs a value"},
		{"bad auth switch", "mcp_sandbox {\n\tpreview_auth maybe\n}", "preview_auth: want on or off"},
		{"bad ttl", "mcp_sandbox {\n\tpreview_ttl soon\n}", `preview_ttl: "soon" is not a duration`},
		{"duplicate previews", "mcp_sandbox {\n\tpreviews a.example\n\tpreviews b.example\n}", "duplicate subdirective previews"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cf := "localhost {\n" + tc.body + "\n}\n"
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	cf := "{\n\ton_demand_tls {\n\t\tpermission mcp_sandbox extra\n\t}\n}\nlocalhost {\n\trespond ok\n}\n"
	if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil); err == nil {
		t.Error("permission mcp_sandbox with an argument was accepted")
	}

	const key = "a-long-enough-test-key-0123456789"
	site := func(lines string) string {
		return "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n" + lines + "\t}\n}"
	}
	for _, tc := range []struct{ name, sites, want string }{
		{"url as domain", site("\t\tpreviews https://p.example.com\n"), "must be a bare domain"},
		{"ip", site("\t\tpreviews 192.0.2.1\n"), "is an IP address"},
		{"wildcard", site("\t\tpreviews *.p.example.com\n"), "must be a bare domain"},
		{"same host as site", site("\t\tpublic_url https://sandbox.example.com\n\t\tpreviews sandbox.example.com\n"), "is the site's own host"},
		{"site under previews", site("\t\tpublic_url https://sandbox.example.com\n\t\tpreviews example.com\n"), "lies under the previews domain"},
		{"duplicate ttl", site("\t\tpreviews p.example.com\n\t\tpreview_ttl 0s\n\t\tpreview_ttl 1s\n"), "duplicate subdirective preview_ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cf := "{\n\tadmin off\n\tstorage file_system " + t.TempDir() + "\n}\n" + tc.sites + "\n"
			cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
			if err == nil {
				err = caddy.Validate(mustConfig(t, cfg))
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// A separate domain, and localhost for local use, are fine.
	for _, lines := range []string{
		"\t\tpublic_url https://sandbox.example.com\n\t\tpreviews sandbox-previews.example.net\n",
		"\t\tpreviews localhost\n",
	} {
		cf := "{\n\tadmin off\n\tstorage file_system " + t.TempDir() + "\n}\n" + site(lines) + "\n"
		cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := caddy.Validate(mustConfig(t, cfg)); err != nil {
			t.Errorf("%q: %v", lines, err)
		}
	}
}
