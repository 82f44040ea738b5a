package questions

import (
	"context"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
)

// TestRelayAcrossInstances: two instances' relays over one file_system storage. Each
// sees the other's calls following a job, never its own; a question posted by one is
// taken once by the other; a withdrawn question cannot be taken; names that are not
// job ids never become keys; what does not read back strictly is dropped.
func TestRelayAcrossInstances(t *testing.T) {
	st := &certmagic.FileStorage{Path: t.TempDir()}
	a, b := Relay{St: st, Self: "aaaa"}, Relay{St: st, Self: "bbbb"}
	ctx := context.Background()
	if b.FollowedElsewhere(ctx, "j1") {
		t.Fatal("a job nobody follows is followed")
	}
	unfollow := a.Follow(ctx, "j1")
	if !b.FollowedElsewhere(ctx, "j1") || a.FollowedElsewhere(ctx, "j1") || b.FollowedElsewhere(ctx, "j12") {
		t.Fatal("A's call on j1: B must see it, A must not count its own, and j12 is another job")
	}
	unfollow()
	if b.FollowedElsewhere(ctx, "j1") {
		t.Fatal("still followed after the call ended")
	}

	q := mcptools.QuestionState{ID: "0123456789abcdef01234567", Person: "alice", Job: "j1", Host: "once.test", Port: 443,
		Expires: time.Now().Add(time.Minute).Unix()}
	if err := b.Post(ctx, q); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Claim(ctx, "j12"); ok {
		t.Fatal("a question of j1 was taken for j12")
	}
	got, ok := a.Claim(ctx, "j1")
	if !ok || got != q {
		t.Fatalf("claim: %+v %v, want %+v", got, ok, q)
	}
	if _, ok := a.Claim(ctx, "j1"); ok {
		t.Fatal("a question was taken twice")
	}
	if b.Withdraw(ctx, "j1", q.ID) {
		t.Fatal("a question that was taken was withdrawn")
	}

	q.ID = "aaaaaaaaaaaaaaaaaaaaaaaa"
	if err := b.Post(ctx, q); err != nil {
		t.Fatal(err)
	}
	if !b.Withdraw(ctx, "j1", q.ID) {
		t.Fatal("an untaken question was not withdrawn")
	}
	if _, ok := a.Claim(ctx, "j1"); ok {
		t.Fatal("a withdrawn question was taken")
	}

	for _, bad := range []string{"../x", "J1", "j1/x", ""} {
		if err := b.Post(ctx, mcptools.QuestionState{ID: q.ID, Job: bad}); err == nil {
			t.Errorf("posted a question of job %q", bad)
		}
	}
	// Written by a hostile or broken instance: dropped, not asked.
	if err := st.Store(ctx, relayKey("questions", "j1-bbbbbbbbbbbbbbbbbbbbbbbb"), []byte(`{"id":"bbbbbbbbbbbbbbbbbbbbbbbb","job":"j2"}`)); err != nil {
		t.Fatal(err)
	}
	if got, ok := a.Claim(ctx, "j1"); ok {
		t.Fatalf("took a question whose job is another: %+v", got)
	}
}

// TestRepliesStore: a reply put by one instance is taken once by another over one
// file_system storage; names that are not a reply's never become keys; the sweep
// removes what was stored before its time and keeps what came after.
func TestRepliesStore(t *testing.T) {
	st := &certmagic.FileStorage{Path: t.TempDir()}
	a, b := Replies{St: st}, Replies{St: st}
	ctx := context.Background()
	const name = "0123456789abcdef-42"
	if err := a.Put(ctx, name, []byte("sealed")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Take(ctx, name); err != nil || string(got) != "sealed" {
		t.Fatalf("Take = %q, %v", got, err)
	}
	if got, err := b.Take(ctx, name); err != nil || got != nil {
		t.Fatalf("taken twice: %q, %v", got, err)
	}
	for _, bad := range []string{"../x", "0123456789abcdef-42/..", "ABCDEF0123456789-1", ""} {
		if a.Put(ctx, bad, []byte("x")) == nil {
			t.Errorf("%q became a key", bad)
		}
	}
	if err := a.Sweep(ctx, time.Now()); err != nil {
		t.Fatalf("sweeping nothing: %v", err)
	}
	_ = a.Put(ctx, "0123456789abcdef-1", []byte("old"))
	cut := time.Now().Add(time.Second) // file times may be coarse
	if err := a.Sweep(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Take(ctx, "0123456789abcdef-1"); got != nil {
		t.Error("an old entry survived the sweep")
	}
	_ = a.Put(ctx, "0123456789abcdef-2", []byte("new"))
	if err := a.Sweep(ctx, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Take(ctx, "0123456789abcdef-2"); string(got) != "new" {
		t.Error("the sweep removed an entry stored after its time")
	}
}
