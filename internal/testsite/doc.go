// Package testsite runs a real Caddy with the mcp_sandbox handler for end-to-end tests,
// as caddytest does for Caddy itself: a Caddyfile loaded in this process on a free
// loopback port, a real Docker engine, real MCP clients over HTTP.
//
// It does not import the plugin, so that the plugin's own package can use it in its
// tests: a test package registers the module by importing the plugin, usually blank:
//
//	import _ "github.com/mcp-sandbox/caddy-mcp-sandbox"
//
// A test starts a site with [Start] and talks to it with an MCP client:
//
//	func TestEcho(t *testing.T) {
//		s := testsite.Start(t, testsite.Options{Directive: []string{"yield_after 10s"}})
//		ctx := context.Background()
//		res := testsite.Call(ctx, t, s.Client(ctx), "execute", map[string]any{"command": "echo hi"})
//		if testsite.Structured(t, res)["stdout"] != "hi\n" {
//			t.Fatal(testsite.ResultText(res))
//		}
//	}
//
// Sites share one Caddy (caddy.Load replaces the running config), so tests that start
// sites do not run in parallel. The container and volume get unique names and are
// removed when the test ends; [Site.Exec] observes the container through the Docker
// API, independently of the plugin. Tests that start sites call [Main] from TestMain,
// which gives the agent's direct channel a data directory of its own.
//
// Without a Docker engine, under -short, [Start] skips the test; in a full run it
// fails (see testengine.DockerClient).
package testsite
