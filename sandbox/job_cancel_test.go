package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestCancelledCallLeavesItsOutput: the output a cancelled call would have returned
// reaches nobody, so it is not counted as delivered: the next JobOutput returns it,
// with the kill and how long the job really ran.
func TestCancelledCallLeavesItsOutput(t *testing.T) {
	withAndWithoutAgent(t, func(t *testing.T, cfg Config) {
		sb := newTestSandbox(t, dockerClient(t), cfg)
		if err := sb.Ensure(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		res, err := sb.Exec(ctx, "echo before; echo warn >&2; sleep 30", boxapi.ExecOptions{Wait: 20 * time.Second})
		if err != nil || !res.Cancelled || res.JobID == "" {
			t.Fatalf("cancelled call: %+v, %v", res, err)
		}
		got, err := sb.JobOutput(context.Background(), res.JobID, 0, nil, 0, nil)
		if err != nil || got.Stdout != "before\n" || got.Stderr != "warn\n" || !got.Cancelled || got.Running || got.ExitCode != 137 {
			t.Fatalf("the output after the cancelled call: %+v, %v", got, err)
		}
		if got.JobDuration < 200*time.Millisecond || got.JobDuration > 15*time.Second {
			t.Errorf("the job ran %v, want until the call was cancelled", got.JobDuration)
		}
		// Delivered now: not again.
		if again, err := sb.JobOutput(context.Background(), res.JobID, 0, nil, 0, nil); err != nil || again.Stdout != "" || again.Stderr != "" {
			t.Errorf("a second poll: %+v, %v", again, err)
		}
	})
}
