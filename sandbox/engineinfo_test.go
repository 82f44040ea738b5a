package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// infoCounter is an engine whose EngineInfo takes a moment and is counted; nothing else of
// it is called.
type infoCounter struct {
	API
	calls atomic.Int64
	fail  atomic.Bool
}

func (c *infoCounter) DaemonHost() string { return fmt.Sprintf("fake://%p", c) }

func (c *infoCounter) EngineInfo(context.Context) (boxapi.EngineInfo, error) {
	c.calls.Add(1)
	time.Sleep(50 * time.Millisecond)
	if c.fail.Load() {
		return boxapi.EngineInfo{}, errors.New("engine down")
	}
	return boxapi.EngineInfo{CPUs: 2}, nil
}

// infoByValue is an engine client that tells no address.
type infoByValue struct {
	API
	calls *atomic.Int64
}

func (c infoByValue) DaemonHost() string { return "" }

func (c infoByValue) EngineInfo(context.Context) (boxapi.EngineInfo, error) {
	c.calls.Add(1)
	return boxapi.EngineInfo{CPUs: 4}, nil
}

// TestEngineInfoShared: the sandboxes on one engine ask it for Info once per
// infoTrust between them, concurrent callers sharing one request; a failed request is
// not kept; forgetEngineInfo makes the next call ask; a client that tells no address
// is asked every time.
func TestEngineInfoShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cli := &infoCounter{}
		defer forgetEngineInfo(cli)
		ask := func(n int) {
			t.Helper()
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					info, err := engineInfo(t.Context(), cli)
					if err != nil || info.CPUs != 2 {
						t.Errorf("engineInfo: %+v %v", info.CPUs, err)
					}
				})
			}
			wg.Wait()
		}
		ask(50)
		if n := cli.calls.Load(); n != 1 {
			t.Fatalf("50 sandboxes at once asked the engine %d times, want 1", n)
		}
		time.Sleep(infoTrust - time.Second)
		ask(5)
		if n := cli.calls.Load(); n != 1 {
			t.Fatalf("within %v the engine was asked again (%d requests)", infoTrust, n)
		}
		time.Sleep(2 * time.Second)
		ask(5)
		if n := cli.calls.Load(); n != 2 {
			t.Fatalf("after %v: %d requests, want 2", infoTrust, n)
		}
		forgetEngineInfo(cli)
		ask(1)
		if n := cli.calls.Load(); n != 3 {
			t.Fatalf("after forgetEngineInfo: %d requests, want 3", n)
		}

		// A failure is the caller's, and the next call asks again.
		forgetEngineInfo(cli)
		cli.fail.Store(true)
		if _, err := engineInfo(t.Context(), cli); err == nil {
			t.Fatal("a failed Info was not reported")
		}
		cli.fail.Store(false)
		ask(1)
		if n := cli.calls.Load(); n != 5 {
			t.Fatalf("after a failure: %d requests, want 5", n)
		}

		// A caller that gives up does not wait for the request.
		forgetEngineInfo(cli)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := engineInfo(ctx, cli); !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled caller got %v", err)
		}
		// The request goes on without it, and is kept.
		time.Sleep(time.Second)
		ask(1)
		if n := cli.calls.Load(); n != 6 {
			t.Fatalf("after a cancelled caller: %d requests, want 6", n)
		}
	})

	var calls atomic.Int64
	byValue := infoByValue{calls: &calls}
	for range 3 {
		if info, err := engineInfo(t.Context(), byValue); err != nil || info.CPUs != 4 {
			t.Fatalf("engineInfo of a client by value: %+v %v", info.CPUs, err)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("a client without an address was asked %d times in 3 calls, want 3", n)
	}
}

// TestEngineInfoLast: the queue of commands takes the engine's last Info past
// infoTrust and asks for a new one in the background, once for many callers; without
// any answer yet, it waits for one.
func TestEngineInfoLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cli := &infoCounter{}
		defer forgetEngineInfo(cli)
		start := time.Now()
		if info, err := engineInfoLast(t.Context(), cli); err != nil || info.CPUs != 2 {
			t.Fatalf("first: %+v %v", info.CPUs, err)
		}
		if waited := time.Since(start); waited != 50*time.Millisecond {
			t.Fatalf("the first caller waited %v, want the Info's 50ms", waited)
		}
		time.Sleep(infoTrust + time.Second)
		start = time.Now()
		for range 50 {
			if info, err := engineInfoLast(t.Context(), cli); err != nil || info.CPUs != 2 {
				t.Fatalf("past infoTrust: %+v %v", info.CPUs, err)
			}
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("50 callers past infoTrust waited %v for the engine, want none", waited)
		}
		synctest.Wait()
		time.Sleep(time.Second)
		if n := cli.calls.Load(); n != 2 {
			t.Fatalf("past infoTrust the engine was asked %d times in all, want 2", n)
		}
		// The new answer is kept: within infoTrust nothing is asked.
		if _, err := engineInfoLast(t.Context(), cli); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := cli.calls.Load(); n != 2 {
			t.Fatalf("after the refresh: %d requests, want 2", n)
		}
	})
}
