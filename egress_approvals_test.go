package mcpsandbox

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
)

// TestApprovalsAcrossInstances: two instances sharing a storage directory (each with
// its own ApprovalStore over Caddy's file storage, as two Caddy processes have): an
// allow always answered on one is seen by the other within seconds without a restart,
// a revoke too, and approvals made on both at once are all kept (the storage's lock
// serializes the read-modify-write).
func TestApprovalsAcrossInstances(t *testing.T) {
	dir := t.TempDir()
	const key = "mcp_sandbox/egress_approvals.json"
	a := egress.NewApprovalStore(storageKV{&certmagic.FileStorage{Path: dir}}, key, nil)
	b := egress.NewApprovalStore(storageKV{&certmagic.FileStorage{Path: dir}}, key, nil)
	ctx := context.Background()

	if b.Approved("alice", "pkg.test", 443) {
		t.Fatal("approved before anyone answered")
	}
	if err := a.Approve(ctx, "alice", "pkg.test", 443); err != nil {
		t.Fatal(err)
	}
	seen := func(want bool) time.Duration {
		t.Helper()
		begin := time.Now()
		for time.Since(begin) < 10*time.Second {
			if b.Approved("alice", "pkg.test", 443) == want {
				return time.Since(begin)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("the other instance did not see approved=%v within 10 s", want)
		return 0
	}
	if d := seen(true); d > 3*time.Second {
		t.Errorf("the other instance saw the approval after %v, want within 3 s", d)
	}
	list, err := b.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("%+v %v", list, err)
	}
	if ok, err := a.Revoke(ctx, list[0].ID); !ok || err != nil {
		t.Fatalf("revoke: %v %v", ok, err)
	}
	if d := seen(false); d > 3*time.Second {
		t.Errorf("the other instance saw the revoke after %v, want within 3 s", d)
	}

	// Both instances approving at once: none is lost.
	var wg sync.WaitGroup
	hosts := []string{"h0.test", "h1.test", "h2.test", "h3.test", "h4.test", "h5.test"}
	for i, h := range hosts {
		wg.Go(func() {
			s := a
			if i%2 == 1 {
				s = b
			}
			if err := s.Approve(ctx, "bob", h, 443); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	fresh := egress.NewApprovalStore(storageKV{&certmagic.FileStorage{Path: dir}}, key, nil)
	list, err = fresh.List(ctx)
	if err != nil || len(list) != len(hosts) {
		t.Fatalf("after approvals on both instances at once: %d kept (%+v) %v, want %d", len(list), list, err, len(hosts))
	}
}
