package sandbox

import "github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"

// The rules for file names live in package boxapi, which the links layer shares.

func isBidiOrInvisible(r rune) bool   { return boxapi.IsBidiOrInvisible(r) }
func validName(name string) bool      { return boxapi.ValidName(name) }
func candidates(name string) []string { return boxapi.Candidates(name, newExecID()[:8]) }
