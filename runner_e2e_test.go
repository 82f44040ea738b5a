package mcpsandbox

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunnerCommandLinesShort: the job runner's processes, which live as long as their
// jobs, carry short command lines: with a job running, every process's arguments
// together are under 2 KB (the runner script itself is over 10 KB).
func TestRunnerCommandLinesShort(t *testing.T) {
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client(ctx)
	st := structured(t, call(ctx, t, c, "execute", map[string]any{"command": "sleep 30", "wait": 1}))
	if st["running"] != true {
		t.Fatalf("job not running: %v", st)
	}
	args := s.containerExec("ps -eo args")
	if !strings.Contains(args, "mcpjob run") || !strings.Contains(args, "sleep 30") {
		t.Fatalf("ps shows no runner:\n%s", args)
	}
	if len(args) >= 2000 {
		t.Errorf("ps -eo args is %d bytes with a job running, want under 2000:\n%.3000s", len(args), args)
	}
	t.Logf("ps -eo args: %d bytes", len(args))
	call(ctx, t, c, "job_kill", map[string]any{"job_id": st["job_id"]})
}
