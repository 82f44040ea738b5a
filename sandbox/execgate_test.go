package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestCheckpointWithExecsStarting: checkpoints taken while Docker execs start in the
// container one after another never pause it with one starting (on cgroup v1 such an
// exec stays frozen in `runc init`, and with it the container in Docker: inspect,
// unpause and remove hang). Every command and every checkpoint ends, and the container
// runs afterwards.
func TestCheckpointWithExecsStarting(t *testing.T) {
	cli, cfg, sb, ctx := noAgentSandbox(t, 5*time.Minute)
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	info, err := cli.ContainerInspect(ctx, cfg.Container)
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var execs atomic.Int64
	failed := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ectx, cancel := context.WithTimeout(ctx, time.Minute)
				_, err := sb.Exec(ectx, "true", boxapi.ExecOptions{})
				cancel()
				if err != nil {
					failed <- err
					return
				}
				execs.Add(1)
			}
		})
	}
	const checkpoints = 6
	for i := 0; i < checkpoints && err == nil; i++ {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		var res CheckpointResult
		res, err = sb.Checkpoint(cctx, "", 0)
		cancel()
		if err == nil {
			t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID) })
		}
		select {
		case err = <-failed:
		default:
		}
	}
	close(stop)
	if err != nil {
		thawFrozen(t, id)
		t.Fatalf("checkpoints beside starting commands: %v", err)
	}
	wg.Wait()
	select {
	case err := <-failed:
		thawFrozen(t, id)
		t.Fatalf("a command beside the checkpoints: %v", err)
	default:
	}
	if execs.Load() < checkpoints {
		t.Fatalf("only %d commands ran beside %d checkpoints: the test tested nothing", execs.Load(), checkpoints)
	}
	t.Logf("%d checkpoints beside %d commands, each its own Docker exec", checkpoints, execs.Load())
	info, err = cli.ContainerInspect(ctx, cfg.Container)
	if err != nil || !info.State.Running || info.State.Paused {
		t.Fatalf("after the checkpoints: %+v %v", info.State, err)
	}
}

// thawFrozen thaws the container (by its ID)'s cgroup v1 freezer by hand, when there is one, so that
// a failure of the test does not leave the engine's container hung for the tests after.
func thawFrozen(t *testing.T, id string) {
	f := filepath.Join("/sys/fs/cgroup/freezer/docker", id, "freezer.state")
	if b, err := os.ReadFile(f); err == nil {
		t.Logf("the container's freezer: %s", b)
		_ = os.WriteFile(f, []byte("THAWED"), 0)
	}
}
