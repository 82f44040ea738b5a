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
// together (ChatGPT) gets the output once, in structuredContent; any other client gets
// it in the text as well.
func TestResultShapePerClient(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name    string
		pointer bool
	}{{"openai-mcp", true}, {"claude-code", false}} {
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
		res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo shaped-output"})
		c.Close()
		text := testsite.ResultText(res)
		st := testsite.Structured(t, res)
		if st["stdout"] != "shaped-output\n" {
			t.Errorf("%s: structured stdout = %v", tc.name, st["stdout"])
		}
		// The footer is in structuredContent too: some clients give the model nothing else.
		if note, _ := st["note"].(string); !strings.Contains(note, "exit code 0") {
			t.Errorf("%s: structured note = %q", tc.name, note)
		}
		if tc.pointer && text != mcptools.PointerText {
			t.Errorf("%s: text = %q, want the pointer only", tc.name, text)
		}
		if !tc.pointer && text == mcptools.PointerText {
			t.Errorf("%s: text = %q, want the output", tc.name, text)
		}
	}
}
