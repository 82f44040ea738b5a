package sandbox

import (
	"github.com/docker/docker/client"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// EngineDown reports whether err means the Docker engine did not answer: it could not
// be reached, or the connection to it broke. Trying again later may work; nothing is
// wrong with the command or the path.
func EngineDown(err error) bool {
	return client.IsErrConnectionFailed(err) || boxapi.EngineDown(err)
}
