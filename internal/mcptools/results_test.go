package mcptools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// grepBox answers every command with 30 KB of grep-like output.
type grepBox struct{ fakeBox }

func (b *grepBox) Exec(context.Context, string, boxapi.ExecOptions) (*boxapi.ExecResult, error) {
	out := strings.Repeat("src/main.go:42:\tif err != nil { return err }\n", 700)
	return &boxapi.ExecResult{JobID: "j000000000002", Stdout: out, StdoutBytes: int64(len(out)),
		StdoutFile: "/f/out", StderrFile: "/f/err", ExitCode: 0}, nil
}

// TestResultSizePerClient: a 30 KB output is sent twice (text and structuredContent)
// only to clients whose reading is unknown or text; a client known to give its model
// structuredContent alone (Claude Code) gets a short text instead, and the result
// shrinks to about half, with the output and the note whole in structuredContent.
func TestResultSizePerClient(t *testing.T) {
	sizes := map[string]int{}
	for _, client := range []string{"claude-ai", "Claude Code", "claude-code", "openai-mcp"} {
		h := newToolsHarness(t, func(o *Options) { o.Boxes = oneBox{&grepBox{}} })
		h.client = client
		r := h.rpc("tools/call", map[string]any{"name": "execute", "arguments": map[string]any{"command": "grep -rn err src"}})
		b, _ := json.Marshal(r)
		sizes[client] = len(b)
		var text string
		for _, c := range r["content"].([]any) {
			text += c.(map[string]any)["text"].(string)
		}
		st := r["structuredContent"].(map[string]any)
		if out, _ := st["stdout"].(string); len(out) < 30000 || !strings.Contains(st["note"].(string), "exit code 0") {
			t.Errorf("%s: structured stdout %d bytes, note %q", client, len(out), st["note"])
		}
		switch client {
		case "claude-ai":
			if !strings.HasPrefix(text, "src/main.go:42:") || !strings.Contains(text, "[exit code 0") {
				t.Errorf("%s: text %.200q, want the output whole", client, text)
			}
		case "Claude Code", "claude-code":
			if len(text) > 300 || !strings.Contains(text, "The output (stdout 30.8 KiB, stderr 0 B)") || !strings.Contains(text, "is in structuredContent.\n[exit code 0") {
				t.Errorf("%s: text %q, want a short summary with the note", client, text)
			}
		}
	}
	t.Logf("result sizes: %v", sizes)
	if full, short := sizes["claude-ai"], sizes["claude-code"]; full < 60000 || short > full/2+2000 {
		t.Errorf("result of 30 KB of output: %d bytes for a text reader, %d for Claude Code; want about half", full, short)
	}
}
