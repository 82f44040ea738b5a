package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestJobOutputAfterTruncatedFile: a command that empties its own output file between
// two polls makes no poll fail; delivery goes on from the file's new end.
func TestJobOutputAfterTruncatedFile(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	sb := newTestSandbox(t, dockerClient(t), testConfig(t))
	res := mustExec(t, sb, `echo first-line; until [ -e /tmp/cut ]; do sleep 0.1; done; : >/proc/self/fd/1; touch /tmp/was-cut;
		until [ -e /tmp/go-on ]; do sleep 0.1; done; echo after`, boxapi.ExecOptions{Wait: 500 * time.Millisecond})
	if !res.Running || res.Stdout != "first-line\n" {
		t.Fatalf("first delivery: %+v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mustExec(t, sb, "touch /tmp/cut; until [ -e /tmp/was-cut ]; do sleep 0.1; done", boxapi.ExecOptions{Timeout: 30 * time.Second})
	out, err := sb.JobOutput(ctx, res.JobID, 0, nil, 0, nil)
	if err != nil || !out.Running || out.StdoutBytes != 0 {
		t.Fatalf("poll after the file was emptied: %+v, %v", out, err)
	}
	mustExec(t, sb, "touch /tmp/go-on", boxapi.ExecOptions{})
	out, err = sb.JobOutput(ctx, res.JobID, 30*time.Second, nil, 0, nil)
	if err != nil || out.Running || !strings.HasSuffix(out.Stdout, "after\n") {
		t.Fatalf("last poll: %+v, %v", out, err)
	}
}
