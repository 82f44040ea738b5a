package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestStatusRestartRecreate reads the facts of a real container (missing, then running
// with live use), and checks that Restart keeps the container and what it wrote outside
// /sandbox, while Recreate makes a new container that keeps only /sandbox.
func TestStatusRestartRecreate(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	sb := newTestSandbox(t, cli, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	st, err := sb.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Exists || st.State != "missing" || st.DiskUsed != -1 {
		t.Fatalf("status before the first command: %+v", st)
	}

	// 2 MiB on the volume, a marker outside it, and a busy loop for the CPU sample.
	mustExec(t, sb, "head -c 2097152 /dev/zero > /sandbox/keep.bin && echo x > /root/outside && (setsid nohup bash -c 'while :; do :; done' >/dev/null 2>&1 &)", boxapi.ExecOptions{})
	st, err = sb.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status: %+v", st)
	if !st.Exists || st.State != "running" || st.ID == "" || st.Image != cfg.Image || st.CreatedAt.IsZero() || st.StartedAt.IsZero() {
		t.Fatalf("status of a running container: %+v", st)
	}
	if st.DiskUsed < 2<<20 || st.DiskUsed > 64<<20 {
		t.Errorf("disk used %d, want about 2 MiB", st.DiskUsed)
	}
	if st.Memory <= 0 || st.MemoryLimit != cfg.Memory || st.PIDs < 2 || st.PIDsLimit != cfg.PidsLimit || st.CPULimit != cfg.CPUs {
		t.Errorf("live use: memory %d/%d pids %d/%d cpus limit %v", st.Memory, st.MemoryLimit, st.PIDs, st.PIDsLimit, st.CPULimit)
	}
	// An idle container shows about 0.00; on a busy shared host the loop may get well
	// under a whole CPU, so only a clear share is asked for.
	if st.CPU < 0.1 {
		t.Errorf("a busy loop shows CPU %.2f, want a clear share of a CPU", st.CPU)
	}
	firstID, firstStart := st.ID, st.StartedAt

	if err := sb.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = sb.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ID != firstID || !st.StartedAt.After(firstStart) || st.State != "running" {
		t.Fatalf("after restart: %+v (was %s started %v)", st, firstID, firstStart)
	}
	if st.CPU > 0.2 {
		t.Errorf("after restart the busy loop should be gone, CPU %.2f", st.CPU)
	}
	if out := mustExec(t, sb, "wc -c < /sandbox/keep.bin; cat /root/outside", boxapi.ExecOptions{}).Stdout; out != "2097152\nx\n" {
		t.Fatalf("after restart: %q", out)
	}

	if err := sb.Recreate(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = sb.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ID == firstID || st.State != "running" {
		t.Fatalf("after recreate: %+v (old id %s)", st, firstID)
	}
	out := mustExec(t, sb, "wc -c < /sandbox/keep.bin; cat /root/outside 2>&1", boxapi.ExecOptions{}).Stdout
	if !strings.HasPrefix(out, "2097152\n") || !strings.Contains(out, "No such file") {
		t.Fatalf("after recreate /sandbox must stay and /root/outside be gone: %q", out)
	}
}
