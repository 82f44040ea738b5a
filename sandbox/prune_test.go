package sandbox

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestPruneWaitsForQuiet: a pass that is due runs once the sandbox has had no result
// for pruneQuiet, not in the middle of a burst of calls; a sandbox never that quiet
// runs it at a result once it is pruneEvery late; a closed one runs none.
func TestPruneWaitsForQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var passes atomic.Int32
		s := &jobRunner{part: part{sb: &Sandbox{life: &lifecycle{}}}, prunePass: func() { passes.Add(1) }}
		s.jobSeen("j1", false)
		// The first pass is due within pruneEvery; calls every second keep it waiting.
		s.lastPrune = time.Now().Add(-pruneEvery) // due now
		for range 10 {
			s.jobSeen("j2", false)
			time.Sleep(time.Second)
			synctest.Wait()
		}
		if n := passes.Load(); n != 0 {
			t.Fatalf("%d passes during calls a second apart, want none", n)
		}
		time.Sleep(pruneQuiet)
		synctest.Wait()
		if n := passes.Load(); n != 1 {
			t.Fatalf("%d passes after %v quiet, want 1", n, pruneQuiet)
		}
		// The next is not due for pruneEvery, quiet or not.
		s.jobSeen("j3", false)
		time.Sleep(pruneEvery - 3*time.Second)
		synctest.Wait()
		if n := passes.Load(); n != 1 {
			t.Fatalf("%d passes before the next was due, want 1", n)
		}
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if n := passes.Load(); n != 2 {
			t.Fatalf("%d passes once the next was due and the sandbox quiet, want 2", n)
		}
		// Never quiet: the pass runs at a result once it is pruneEvery late.
		s.jobsMu.Lock()
		s.lastPrune = time.Now().Add(-2*pruneEvery + time.Second)
		s.jobsMu.Unlock()
		s.jobSeen("j4", false)
		time.Sleep(time.Second)
		s.jobSeen("j5", false)
		synctest.Wait()
		if n := passes.Load(); n != 3 {
			t.Fatalf("%d passes for a sandbox never quiet and a whole period late, want 3", n)
		}
		// Closed: a pass waiting for quiet does not run.
		s.jobsMu.Lock()
		s.lastPrune = time.Now().Add(-pruneEvery)
		s.jobsMu.Unlock()
		s.jobSeen("j6", false)
		s.sb.mu.Lock()
		s.sb.life.closed = true
		s.sb.mu.Unlock()
		time.Sleep(2 * pruneQuiet)
		synctest.Wait()
		if n := passes.Load(); n != 3 {
			t.Fatalf("%d passes, want none more once the sandbox is closed", n)
		}
	})
}
