package fleet

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// bytesSeen records what Options.CheckpointBytes is told.
type bytesSeen struct {
	mu sync.Mutex
	m  map[string]int64
}

func (b *bytesSeen) note(person string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m[person] = n
}

func (b *bytesSeen) get(person string) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.m[person]
	return n, ok
}

// TestCheckpointBytesNoted: a listing tells each person's total; a person whose last
// checkpoint went is told 0 by the next listing of all, and by a listing of their own.
func TestCheckpointBytesNoted(t *testing.T) {
	seen := &bytesSeen{m: map[string]int64{}}
	f, err := New(Options{Base: testBase("bytes-test"), Acquire: newPool(t).acquire, CheckpointBytes: seen.note})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	f.noteCheckpointBytes([]boxapi.Checkpoint{{Person: "alice", SizeBytes: 3}, {Person: "alice", SizeBytes: 4}, {SizeBytes: 5}}, nil, true)
	if a, _ := seen.get("alice"); a != 7 {
		t.Errorf("alice: %d, want 7", a)
	}
	if o, _ := seen.get(""); o != 5 {
		t.Errorf("the operator: %d, want 5", o)
	}
	f.noteCheckpointBytes([]boxapi.Checkpoint{{SizeBytes: 5}}, nil, true)
	if a, ok := seen.get("alice"); !ok || a != 0 {
		t.Errorf("alice after her last checkpoint went: %d %v, want 0", a, ok)
	}
	seen.note("bob", 9)
	f.noteCheckpointBytes(nil, []string{"bob"}, false)
	if b, _ := seen.get("bob"); b != 0 {
		t.Errorf("bob with no checkpoint: %d, want 0", b)
	}
}

// TestCheckpointsRefuseStrangers: seeding a person not configured and killing a job of
// one is not found, before any engine is asked (none answers here).
func TestCheckpointsRefuseStrangers(t *testing.T) {
	f, err := New(Options{Base: testBase("strangers-test"), Acquire: newPool(t).acquire, People: []Person{{Name: "alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := f.SeedCheckpoint(ctx, "x", "mallory", true); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"mallory"`) {
		t.Errorf("seeding mallory: %v, want ErrNotFound naming mallory", err)
	}
	if err := f.KillJob(ctx, "mallory", "j1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("killing mallory's job: %v, want ErrNotFound", err)
	}
	// The engine does not answer: the error names whose sandbox, and lists nothing.
	js, err := f.Jobs(ctx, "alice")
	if err == nil || !strings.Contains(err.Error(), "alice's sandbox") || len(js) != 0 {
		t.Errorf("alice's jobs with no engine: %+v %v", js, err)
	}
	if f.Held("alice") != nil {
		t.Error("looking at jobs placed alice's sandbox")
	}
	if got := f.Container("alice"); got != "strangers-test-alice" {
		t.Errorf("alice's container %q", got)
	}
	if got := WhoseSandbox(""); got != "the operator's sandbox" {
		t.Errorf("WhoseSandbox(\"\") = %q", got)
	}
}

// TestCheckpointsOnDocker: a person's checkpoint is listed, found and told in bytes;
// copying onto a sandbox that exists wants replace; once the person is removed, the
// sweep keeps the checkpoint through the grace period, counted from the first pass,
// and deletes it after; the operator's is never swept.
func TestCheckpointsOnDocker(t *testing.T) {
	acquire, cli := dockerPool(t)
	base := dockerBase()
	st := &certmagic.FileStorage{Path: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seen := &bytesSeen{m: map[string]int64{}}
	before, err := New(Options{Base: base, People: []Person{{Name: "alice"}, {Name: "bob"}}, Acquire: acquire, Storage: st,
		CheckpointBytes: seen.note})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, p := range []string{"", "alice", "bob"} {
		e, err := before.For(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Sandbox().Exec(ctx, "echo "+p+" > /sandbox/who", boxapi.ExecOptions{}); err != nil {
			t.Fatal(err)
		}
		res, err := e.Sandbox().Checkpoint(ctx, "c", 0)
		if err != nil {
			t.Fatal(err)
		}
		ids[p] = res.Checkpoint.ID
		t.Cleanup(func() { _ = sandbox.DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID) })
	}
	all, err := before.Checkpoints(ctx)
	if err != nil || len(all) != 3 {
		t.Fatalf("checkpoints: %+v %v, want 3", all, err)
	}
	if n, _ := seen.get("alice"); n <= 0 {
		t.Errorf("alice's bytes %d", n)
	}
	ck, err := before.FindCheckpoint(ctx, ids["alice"])
	if err != nil || ck.Person != "alice" {
		t.Fatalf("alice's checkpoint: %+v %v", ck, err)
	}
	if _, err := before.FindCheckpoint(ctx, "sha256:0000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an unknown checkpoint: %v, want ErrNotFound", err)
	}
	if err := before.SeedCheckpoint(ctx, ids["alice"], "bob", false); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "bob's sandbox exists already") {
		t.Errorf("copying onto bob's sandbox without replace: %v, want ErrConflict", err)
	}
	if err := before.Close(); err != nil {
		t.Fatal(err)
	}

	after, err := New(Options{Base: base, People: []Person{{Name: "bob"}}, Acquire: acquire, Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = after.Close() })
	if err := after.RestoreCheckpoint(ctx, ids["alice"]); !errors.Is(err, ErrConflict) {
		t.Errorf("restoring removed alice's checkpoint: %v, want ErrConflict", err)
	}
	now := time.Now()
	after.SweepRemovedCheckpoints(ctx, now)
	after.SweepRemovedCheckpoints(ctx, now.Add(CheckpointGrace-time.Hour))
	if _, err := after.FindCheckpoint(ctx, ids["alice"]); err != nil {
		t.Fatalf("alice's checkpoint before the grace period ended: %v", err)
	}
	after.SweepRemovedCheckpoints(ctx, now.Add(CheckpointGrace+time.Minute))
	if _, err := after.FindCheckpoint(ctx, ids["alice"]); !errors.Is(err, ErrNotFound) {
		t.Errorf("alice's checkpoint after the grace period: %v, want it gone", err)
	}
	for _, p := range []string{"", "bob"} {
		if _, err := after.FindCheckpoint(ctx, ids[p]); err != nil {
			t.Errorf("%s's checkpoint was swept: %v", WhoseSandbox(p), err)
		}
	}
}
