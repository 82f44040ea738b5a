package sandbox

import "github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"

// The rules for file names live in package boxapi, which the links layer shares.

// MaxNameBytes is the longest file name Linux accepts, in bytes.
const MaxNameBytes = boxapi.MaxNameBytes

// SanitizeName turns a name sent by a browser into one safe to create ([boxapi.SanitizeName]).
func SanitizeName(name string) (clean string, changed bool) { return boxapi.SanitizeName(name) }

func isBidiOrInvisible(r rune) bool   { return boxapi.IsBidiOrInvisible(r) }
func validName(name string) bool      { return boxapi.ValidName(name) }
func candidates(name string) []string { return boxapi.Candidates(name, newExecID()[:8]) }
