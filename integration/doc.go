// Package integration is the end-to-end suite of the plugin: each test runs a real
// Caddy with the mcp_sandbox handler (through internal/testsite), a real Docker engine,
// and real MCP, OAuth, browser and TypeScript clients over loopback HTTP. It holds the
// hostile-container tests, the benchmarks with their raw-Docker baselines and the
// checks of the examples.
//
// The tests see the plugin only as its users do: through HTTP, the console's API, the
// metrics, Caddy's log and Docker. Tests of the plugin's own code live beside it.
//
// Under -short, without a Docker engine, the tests that need one skip; in a full run
// they fail. The tests that restart dockerd run only when MCP_SANDBOX_RESTART_DOCKER=1,
// the one that stops the test cluster's API server only when MCP_SANDBOX_RESTART_KUBE=1.
package integration
