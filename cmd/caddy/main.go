// Command caddy is Caddy with the standard modules, the mcp_sandbox plugin and its
// Kubernetes engine, for building without xcaddy: go build -o caddy ./cmd/caddy
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/mcp-sandbox/caddy-mcp-sandbox"
	_ "github.com/mcp-sandbox/caddy-mcp-sandbox/engines/kubernetes"
)

func main() {
	caddycmd.Main()
}
