package mcptools

import (
	"context"
	"fmt"
	"strings"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// What each client hands its model of a tool result (see docs/clients.md): Claude Code
// gives the model structuredContent alone when it is present; claude.ai, Claude
// Desktop and Cursor give the text content; ChatGPT gives both. MCP has no capability
// that says which, so every result carries everything in both forms, except for the
// clients known by name: for those that pass both, the text shrinks to a pointer so the
// model does not read the same output twice; for those that pass structuredContent
// alone, a long text shrinks to a summary, since it would only double the result's size
// on the wire and in the client's limits (a 30 KB grep made a 61 KB result).

// bothReaderHints name the clients known to give the model the text and the
// structured result together, matched in the OAuth client's name or ID and in the MCP
// clientInfo name.
var bothReaderHints = []string{"chatgpt", "openai"}

// structuredReaderHints name the clients known to give the model structuredContent
// alone when a result has it, matched as bothReaderHints are (spaces and underscores
// read as hyphens, so "Claude Code" matches too).
var structuredReaderHints = []string{"claude-code"}

// readerKind is what of a result a caller's model reads.
type readerKind int

const (
	readsText       readerKind = iota // text, or both and unknown: send both whole
	readsBoth                         // both: the text is a pointer
	readsStructured                   // structuredContent alone: a long text is summed up
)

// readerOf says what the caller's model reads of a result, by the names the client
// gave.
func readerOf(ctx context.Context) readerKind {
	id := CallerFrom(ctx)
	names := []string{id.ClientName, id.ClientID}
	if s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo); ok {
		names = append(names, s.GetClientInfo().Name)
	}
	norm := strings.NewReplacer(" ", "-", "_", "-")
	for _, n := range names {
		n = norm.Replace(strings.ToLower(n))
		for _, h := range bothReaderHints {
			if strings.Contains(n, h) {
				return readsBoth
			}
		}
		for _, h := range structuredReaderHints {
			if strings.Contains(n, h) {
				return readsStructured
			}
		}
	}
	return readsText
}

// PointerText replaces the text of a structured result for clients that read both.
const PointerText = "The result is in structuredContent."

// summaryOver is the length of text past which a structured result's text is summed up
// for clients that read structuredContent alone; shorter texts cost little and help
// the client's own display.
const summaryOver = 1024

// shapeResult removes the duplicate of a structured result's text for clients whose
// model reads both, and sums up a long one for clients whose model reads
// structuredContent alone. Images and other content stay; errors are left whole.
func shapeResult(ctx context.Context, res *mcp.CallToolResult) *mcp.CallToolResult {
	if res == nil || res.IsError || res.StructuredContent == nil {
		return res
	}
	switch readerOf(ctx) {
	case readsBoth:
		for i, c := range res.Content {
			if _, ok := c.(mcp.TextContent); ok {
				res.Content[i] = mcp.NewTextContent(PointerText)
			}
		}
	case readsStructured:
		for i, c := range res.Content {
			if t, ok := c.(mcp.TextContent); ok && len(t.Text) > summaryOver {
				res.Content[i] = mcp.NewTextContent(summary(res.StructuredContent, len(t.Text)))
			}
		}
	}
	return res
}

// summary is the text of a long structured result for a client that reads
// structuredContent alone: what is there, and a command's note.
func summary(st any, n int) string {
	if o, ok := st.(ExecuteOutput); ok {
		return fmt.Sprintf("The output (stdout %s, stderr %s) is in structuredContent.\n%s",
			human.Size(int64(len(o.Stdout))), human.Size(int64(len(o.Stderr))), o.Note)
	}
	return fmt.Sprintf("The result (%s of text) is in structuredContent.", human.Size(int64(n)))
}
