package mcptools

import (
	"fmt"
	"testing"
	"time"
)

// TestTaskOwnership: a task is the person's whose call made it. Another person, with
// no session id (as in protocol 2026-07-28) or with the owner's own session id, can
// neither see it in tasks/list nor get, fetch or cancel it; the owner can.
func TestTaskOwnership(t *testing.T) {
	h := newTaskHarness(t, time.Hour, 100, 1000)
	for _, session := range []string{"", "alice-session"} {
		m := h.sendAs("alice", session, "tools/call", map[string]any{"name": "big", "arguments": map[string]any{"n": 3}, "task": map[string]any{}})
		task, ok := m["result"].(map[string]any)["task"].(map[string]any)
		if !ok {
			t.Fatalf("no task in %v", m)
		}
		id := task["taskId"].(string)
		for _, intruder := range []string{"bob", ""} {
			for _, method := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
				m := h.sendAs(intruder, session, method, map[string]any{"taskId": id})
				if e, ok := m["error"].(map[string]any); !ok || fmt.Sprint(e["message"]) != "task not found" {
					t.Errorf("session %q: %q's %s of alice's task: %v, want task not found", session, intruder, method, m)
				}
			}
			list := h.sendAs(intruder, session, "tasks/list", map[string]any{})
			if tasks, _ := list["result"].(map[string]any)["tasks"].([]any); len(tasks) != 0 {
				t.Errorf("session %q: %q lists alice's tasks: %v", session, intruder, tasks)
			}
		}
		if m := h.sendAs("alice", session, "tasks/get", map[string]any{"taskId": id}); m["error"] != nil {
			t.Errorf("alice's own tasks/get: %v", m)
		}
		list := h.sendAs("alice", session, "tasks/list", map[string]any{})
		if tasks, _ := list["result"].(map[string]any)["tasks"].([]any); len(tasks) == 0 {
			t.Errorf("session %q: alice does not see her task: %v", session, list)
		}
	}
}
