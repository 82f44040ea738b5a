// Command caddy is Caddy with the standard modules and the mcp_sandbox plugin, for
// building without xcaddy: go build -o caddy ./cmd/caddy
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/mcp-sandbox/caddy-mcp-sandbox"
)

func main() {
	caddycmd.Main()
}
