package mcptools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestNoCheckpoints: with NoCheckpoints (a Kubernetes engine) checkpoint,
// checkpoint_list and restore are not offered, every other tool is, and the
// instructions carry the reason and what to do instead; without it the three are
// listed and the instructions say nothing of the kind.
func TestNoCheckpoints(t *testing.T) {
	const why = "Checkpoints are not supported on this server (test); share_file an archive instead."
	for _, reason := range []string{why, ""} {
		h := newToolsHarness(t, func(o *Options) { o.NoCheckpoints = reason })
		names := map[string]bool{}
		for _, tool := range h.rpc("tools/list", map[string]any{})["tools"].([]any) {
			names[tool.(map[string]any)["name"].(string)] = true
		}
		for _, n := range []string{"checkpoint", "checkpoint_list", "restore"} {
			if names[n] != (reason == "") {
				t.Errorf("NoCheckpoints %q: %s listed = %v", reason, n, names[n])
			}
		}
		if want := 15 - 3*min(len(reason), 1); len(names) != want || !names["execute"] || !names["share_file"] {
			t.Errorf("NoCheckpoints %q: %d tools %v, want %d with execute and share_file", reason, len(names), names, want)
		}
		init := h.rpc("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "test", "version": "1"}})
		text := init["instructions"].(string)
		if strings.Contains(text, why) != (reason != "") {
			t.Errorf("NoCheckpoints %q: instructions %q", reason, text)
		}
	}
}

// TestNoCheckpointsCall: with NoCheckpoints a call of checkpoint, checkpoint_list or
// restore (a client's tool list from before the configuration changed) is refused as
// an unknown tool, with the server's tools and why it has no checkpoints: the
// sandbox's "not supported on a Kubernetes engine" error cannot reach the model
// through these tools.
func TestNoCheckpointsCall(t *testing.T) {
	h := newToolsHarness(t, func(o *Options) { o.NoCheckpoints = "Checkpoints are not supported on this server (test)." })
	for i, c := range []struct {
		tool string
		args map[string]any
	}{{"checkpoint", map[string]any{"name": "x"}}, {"checkpoint_list", map[string]any{}}, {"restore", map[string]any{"id": "image"}}} {
		msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call",
			"params": map[string]any{"name": c.tool, "arguments": c.args}})
		ctx := WithCaller(context.Background(), Caller{ClientName: "test", Label: "test", Origin: "https://sandbox.example"})
		ctx, done := h.tools.Request(ctx)
		resp := h.tools.MCPServer().HandleMessage(ctx, msg)
		done()
		b, _ := json.Marshal(resp)
		var m struct {
			Result struct {
				IsError bool
				Content []struct{ Text string }
			}
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if !m.Result.IsError || len(m.Result.Content) != 1 || !strings.Contains(m.Result.Content[0].Text, `There is no tool "`+c.tool+`" on this server. Its tools are: edit_file, execute,`) ||
			!strings.Contains(m.Result.Content[0].Text, "Checkpoints are not supported on this server (test).") || strings.Contains(string(b), "did not work") {
			t.Errorf("%s: %s, want an unknown-tool error", c.tool, b)
		}
	}
}
