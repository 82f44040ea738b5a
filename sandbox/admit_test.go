package sandbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// cpusEngine (a host of its own for each test run: a queue made in one synctest
// bubble cannot serve another) is a client of an engine that tells only its address and its host's
// processors.
type cpusEngine struct {
	API
	host string
	cpus int
}

func (e *cpusEngine) DaemonHost() string { return e.host }

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

// TestAdmitInOrder: a host of one processor admits two commands at once, whichever
// of the engine's clients (each sandbox has its own) starts them; the others wait, and
// are admitted in the order they came as places are given back; a place given back
// twice counts once.
func TestAdmitInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cli := &cpusEngine{host: "fake://in-order/" + testenv.RandomHex(4), cpus: 1}
		other := &cpusEngine{host: cli.host, cpus: 1}
		defer forgetEngineInfo(cli)
		ctx := t.Context()
		first, second := admitted(t, ctx, cli), admitted(t, ctx, other)
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
		cli := &cpusEngine{host: "fake://hold/" + testenv.RandomHex(4), cpus: 1}
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

// TestAdmitUnknownCPUs: an engine that does not tell its processors (a cluster), or
// a client that tells no address, admits every command at once.
func TestAdmitUnknownCPUs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, cli := range []*cpusEngine{{host: "fake://cluster/" + testenv.RandomHex(4)}, {cpus: 1}} {
			for range 100 {
				admitted(t, t.Context(), cli)
			}
			forgetEngineInfo(cli)
		}
		if waiting, _, _ := AdmissionStats(); waiting != 0 {
			t.Errorf("waiting: %d", waiting)
		}
	})
}

// TestAdmitLongCommands: commands that run long hold their places only while they
// start, and the places are the engine's, whichever sandbox (with a client of its own)
// starts a command. With as many `sleep 3` running in one sandbox as the engine's host
// admits at once, a `true` in another is answered long before they end; while they
// hold their places (a hold made longer), it waits for one.
func TestAdmitLongCommands(t *testing.T) {
	a := newTestSandbox(t, dockerClient(t), testConfig(t))
	b := newTestSandbox(t, dockerClient(t), testConfig(t))
	if a.cli == b.cli {
		t.Fatal("the sandboxes share a client")
	}
	ctx := context.Background()
	mustExec(t, a, "true", boxapi.ExecOptions{})
	mustExec(t, b, "true", boxapi.ExecOptions{})
	info, err := engineInfo(ctx, a.cli)
	if err != nil || info.CPUs <= 0 {
		t.Fatalf("the engine's processors: %d, %v", info.CPUs, err)
	}
	places := admitPerCPU * info.CPUs
	beside := func() time.Duration {
		var wg sync.WaitGroup
		defer wg.Wait()
		for range places {
			wg.Go(func() { mustExec(t, a, "sleep 3", boxapi.ExecOptions{}) })
		}
		time.Sleep(500 * time.Millisecond)
		start := time.Now()
		mustExec(t, b, "true", boxapi.ExecOptions{})
		return time.Since(start)
	}
	if d := beside(); d > 2*time.Second {
		t.Errorf("`true` beside %d `sleep 3` took %v: the long commands held their places", places, d)
	} else {
		t.Logf("`true` beside %d `sleep 3`: %v", places, d)
	}
	defer func(d time.Duration) { admitHold = d }(admitHold)
	admitHold = 1500 * time.Millisecond
	if d := beside(); d < time.Second {
		t.Errorf("with a hold of %v, `true` beside %d `sleep 3` in another sandbox took %v: it did not wait for a place", admitHold, places, d)
	} else {
		t.Logf("with a hold of %v: %v", admitHold, d)
	}
}
