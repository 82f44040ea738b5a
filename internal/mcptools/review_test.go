package mcptools

import (
	"strings"
	"testing"
)

// TestJobListRunningAndRetention: job_list's description states what is kept (the
// newest 20 finished and any of the last 10 minutes, so more than 20 may show), and
// running: true lists only the jobs still running.
func TestJobListRunningAndRetention(t *testing.T) {
	h := newToolsHarness(t)
	if d := h.description("job_list"); !strings.Contains(d, "the newest 20, plus any that finished in the last 10 minutes") || !strings.Contains(d, "running: true lists only those still running") {
		t.Errorf("job_list description: %q", d)
	}
	_, all, st := h.call("job_list", map[string]any{})
	if n := len(st.(map[string]any)["jobs"].([]any)); n != 2 || !strings.Contains(all, "exit code 3") {
		t.Errorf("job_list: %d jobs, %q", n, all)
	}
	isErr, running, st := h.call("job_list", map[string]any{"running": true})
	jobs := st.(map[string]any)["jobs"].([]any)
	if isErr || len(jobs) != 1 || jobs[0].(map[string]any)["job_id"] != fakeJob || strings.Contains(running, "exit code 3") {
		t.Errorf("job_list running: %v %q %v", isErr, running, jobs)
	}
}
