package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestResultShapePerClient: a client whose model reads text and structuredContent
// together (ChatGPT) gets the output once, in structuredContent; one whose model reads
// structuredContent alone (Claude Code) gets a long output there and a summary as text;
// any other client gets it in the text as well.
func TestResultShapePerClient(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name             string
		pointer, summary bool
	}{{"openai-mcp", true, false}, {"claude-code", false, true}, {"claude-ai", false, false}} {
		c, err := mcpclient.NewStreamableHttpClient(s.URL+"/mcp",
			transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + s.Key}))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		init := mcp.InitializeRequest{}
		init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
		init.Params.ClientInfo = mcp.Implementation{Name: tc.name, Version: "1"}
		if _, err := c.Initialize(ctx, init); err != nil {
			t.Fatal(err)
		}
		res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo shaped-output; seq 1 2000"})
		c.Close()
		text := testsite.ResultText(res)
		st := testsite.Structured(t, res)
		if out, _ := st["stdout"].(string); !strings.HasPrefix(out, "shaped-output\n1\n") || !strings.HasSuffix(out, "\n2000\n") {
			t.Errorf("%s: structured stdout = %v", tc.name, st["stdout"])
		}
		// The footer is in structuredContent too: some clients give the model nothing else.
		if note, _ := st["note"].(string); !strings.Contains(note, "exit code 0") {
			t.Errorf("%s: structured note = %q", tc.name, note)
		}
		if tc.pointer && text != mcptools.PointerText {
			t.Errorf("%s: text = %q, want the pointer only", tc.name, text)
		}
		if tc.summary && (strings.Contains(text, "shaped-output") || !strings.Contains(text, "is in structuredContent.\n[exit code 0")) {
			t.Errorf("%s: text = %q, want a summary with the note", tc.name, text)
		}
		if !tc.pointer && !tc.summary && !strings.HasPrefix(text, "shaped-output\n") {
			t.Errorf("%s: text = %q, want the output", tc.name, text)
		}
	}
}
