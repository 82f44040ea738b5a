package sandbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// cpusEngine is an engine that tells only its host's processors.
type cpusEngine struct {
	API
	cpus int
}

func (e *cpusEngine) EngineInfo(context.Context) (boxapi.EngineInfo, error) {
	return boxapi.EngineInfo{CPUs: e.cpus}, nil
}

// admitted admits on cli and fails the test on an error.
func admitted(t *testing.T, ctx context.Context, cli API) func() {
	t.Helper()
	r, err := admit(ctx, cli)
	if err != nil {
		t.Fatalf("admit: %v", err)
	}
	return r
}

// TestAdmitInOrder: a host of one processor admits two commands at once; the others
// wait, and are admitted in the order they came as places are given back; a place
// given back twice counts once.
func TestAdmitInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cli := &cpusEngine{cpus: 1}
		defer forgetEngineInfo(cli)
		ctx := t.Context()
		first, second := admitted(t, ctx, cli), admitted(t, ctx, cli)
		var mu sync.Mutex
		var order []int
		gives := make(chan func(), 3)
		for i := range 3 {
			go func() {
				r := admitted(t, ctx, cli)
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				gives <- r
			}()
			synctest.Wait() // queued before the next comes
		}
		if waiting, _, _ := AdmissionStats(); waiting != 3 {
			t.Errorf("waiting: %d, want 3", waiting)
		}
		first()
		first() // once only
		synctest.Wait()
		mu.Lock()
		if len(order) != 1 || order[0] != 0 {
			t.Errorf("after one place was given back (twice): admitted %v, want [0]", order)
		}
		mu.Unlock()
		second()
		synctest.Wait()
		(<-gives)()
		synctest.Wait()
		mu.Lock()
		if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
			t.Errorf("admitted in the order %v, want [0 1 2]", order)
		}
		mu.Unlock()
		(<-gives)()
		(<-gives)()
		if waiting, _, _ := AdmissionStats(); waiting != 0 {
			t.Errorf("waiting at the end: %d", waiting)
		}
	})
}

// TestAdmitHold: a command holds its place for admitHold at most, then the next is
// admitted without it being given back; a caller whose context ends while it waits
// gets the context's error and leaves the queue.
func TestAdmitHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cli := &cpusEngine{cpus: 1}
		defer forgetEngineInfo(cli)
		ctx := t.Context()
		admitted(t, ctx, cli)
		admitted(t, ctx, cli)
		_, waitedBefore, _ := AdmissionStats()
		start := time.Now()
		got := make(chan time.Duration, 1)
		go func() {
			r := admitted(t, ctx, cli)
			got <- time.Since(start)
			r()
		}()
		if d := <-got; d != admitHold {
			t.Errorf("admitted after %v, want admitHold (%v)", d, admitHold)
		}
		if _, waited, waitedFor := AdmissionStats(); waited != waitedBefore+1 || waitedFor < admitHold {
			t.Errorf("waited: %d commands, %v in all; want one more, at least %v", waited-waitedBefore, waitedFor, admitHold)
		}

		admitted(t, ctx, cli)
		admitted(t, ctx, cli)
		cctx, cancel := context.WithTimeout(ctx, admitHold/5)
		defer cancel()
		if _, err := admit(cctx, cli); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("admit with a context that ends first: %v", err)
		}
		if waiting, _, _ := AdmissionStats(); waiting != 0 {
			t.Errorf("waiting after the context ended: %d", waiting)
		}
	})
}

// TestAdmitUnknownCPUs: an engine that does not tell its processors (a cluster)
// admits every command at once.
func TestAdmitUnknownCPUs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cli := &cpusEngine{}
		defer forgetEngineInfo(cli)
		for range 100 {
			admitted(t, t.Context(), cli)
		}
		if waiting, _, _ := AdmissionStats(); waiting != 0 {
			t.Errorf("waiting: %d", waiting)
		}
	})
}

// TestAdmitLongCommands: commands that run long hold their places only while they
// start. With as many `sleep 3` running as the engine's host admits at once, a `true`
// is answered long before they end.
func TestAdmitLongCommands(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx := context.Background()
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	info, err := engineInfo(ctx, cli)
	if err != nil || info.CPUs <= 0 {
		t.Fatalf("the engine's processors: %d, %v", info.CPUs, err)
	}
	var wg sync.WaitGroup
	for range admitPerCPU * info.CPUs {
		wg.Go(func() { mustExec(t, sb, "sleep 3", boxapi.ExecOptions{}) })
	}
	t.Cleanup(wg.Wait)
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("`true` beside %d `sleep 3` took %v: the long commands held their places", admitPerCPU*info.CPUs, d)
	} else {
		t.Logf("`true` beside %d `sleep 3`: %v", admitPerCPU*info.CPUs, d)
	}
}
