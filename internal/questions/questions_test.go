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
