// Package mcphttp carries MCP's streamable HTTP through Caddy: a response writer that
// can stream and keeps long responses alive, session ids bound to their person that
// carry what the session's client declared, clients' replies handed to the instance
// that asked, and the bounded read of a request body.
package mcphttp

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
)

// MaxRequestBody bounds one MCP message; a command line is far smaller.
const MaxRequestBody = 4 << 20

// ReadBody reads a POST's body, at most [MaxRequestBody] bytes. On failure it answers
// with a JSON-RPC error (413 for a body too large) and reports false.
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBody))
	if err != nil {
		status := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
		}
		WriteError(w, status, mcp.INVALID_REQUEST, "reading request body: "+err.Error())
		return nil, false
	}
	return body, true
}

// WriteError answers with a JSON-RPC error without an id, for a request refused
// before any message of it was read.
func WriteError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0",
		"id":      nil,
		"error":   map[string]any{"code": code, "message": msg},
	})
}
