package mcptools

import (
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
