package mcptools

import (
	"context"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// What each client hands its model of a tool result (see docs/clients.md): Claude Code
// gives the model structuredContent alone when it is present; claude.ai, Claude
// Desktop and Cursor give the text content; ChatGPT gives both. So every result carries
// everything in both forms, and for clients that pass both, the text shrinks to a
// pointer so the model does not read the same output twice.

// bothReaderHints name the clients known to give the model the text and the
// structured result together, matched in the OAuth client's name or ID and in the MCP
// clientInfo name.
var bothReaderHints = []string{"chatgpt", "openai"}

// readsBoth reports whether the caller's model sees text and structuredContent.
func readsBoth(ctx context.Context) bool {
	id := CallerFrom(ctx)
	names := []string{id.ClientName, id.ClientID}
	if s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo); ok {
		names = append(names, s.GetClientInfo().Name)
	}
	for _, n := range names {
		n = strings.ToLower(n)
		for _, h := range bothReaderHints {
			if strings.Contains(n, h) {
				return true
			}
		}
	}
	return false
}

// PointerText replaces the text of a structured result for clients that read both.
const PointerText = "The result is in structuredContent."

// shapeResult removes the duplicate of a structured result's text for clients whose
// model reads both. Images and other content stay; errors are left whole.
func shapeResult(ctx context.Context, res *mcp.CallToolResult) *mcp.CallToolResult {
	if res == nil || res.IsError || res.StructuredContent == nil || !readsBoth(ctx) {
		return res
	}
	for i, c := range res.Content {
		if _, ok := c.(mcp.TextContent); ok {
			res.Content[i] = mcp.NewTextContent(PointerText)
		}
	}
	return res
}
