package console

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
)

// TestAuditLogFollowsOtherInstances: two instances' logs over one storage: what one
// records shows in the other's after a flush and a follow, in time order among its
// own, each entry once, across a sealed chunk and a restart; an instance does not read
// its own chunks back; a storage that cannot list is logged once and changes nothing.
func TestAuditLogFollowsOtherInstances(t *testing.T) {
	ctx := context.Background()
	st := &certmagic.FileStorage{Path: t.TempDir()}
	a := NewAuditLog(st, "console", 1000, nil)
	b := NewAuditLog(st, "console", 1000, nil)
	for _, l := range []*AuditLog{a, b} {
		if err := l.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().Add(-time.Hour)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	a.Record(audit.Entry{Time: at(1), Tool: "a1"})
	b.Record(audit.Entry{Time: at(2), Tool: "b2"})
	a.Record(audit.Entry{Time: at(3), Tool: "a3"})
	sync := func() {
		t.Helper()
		for _, l := range []*AuditLog{a, b} {
			if err := l.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for _, l := range []*AuditLog{a, b} {
			if err := l.follow(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	tools := func(l *AuditLog) string {
		s := ""
		for _, e := range l.Query(Filter{}) {
			s += e.Tool + " "
		}
		return s
	}
	sync()
	for name, l := range map[string]*AuditLog{"a": a, "b": b} {
		if got := tools(l); got != "a3 b2 a1 " {
			t.Errorf("%s's log, newest first: %q, want a3 b2 a1", name, got)
		}
	}
	// Followed again with nothing new: nothing twice.
	sync()
	if got := tools(b); got != "a3 b2 a1 " {
		t.Errorf("b's log after a second follow: %q", got)
	}
	// Past a sealed chunk of a's: every entry once.
	for i := range auditChunk + 10 {
		a.Record(audit.Entry{Time: at(10 + i), Tool: fmt.Sprintf("n%d", i)})
	}
	sync()
	if n := len(b.Query(Filter{})); n != 3+auditChunk+10 {
		t.Errorf("b holds %d entries, want %d", n, 3+auditChunk+10)
	}
	if n := len(a.Query(Filter{})); n != 3+auditChunk+10 {
		t.Errorf("a holds %d entries, want %d (its own chunks are not read back)", n, 3+auditChunk+10)
	}
	// A third instance started now reads everything once, and follows from there.
	c := NewAuditLog(st, "console", 1000, nil)
	if err := c.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.follow(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(c.Query(Filter{})); n != 3+auditChunk+10 {
		t.Errorf("a new instance holds %d entries after a follow, want %d", n, 3+auditChunk+10)
	}
	b.Record(audit.Entry{Time: time.Now(), Tool: "late", Subject: "s1"})
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.follow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.Query(Filter{Limit: 1}); len(got) != 1 || got[0].Tool != "late" || c.LastSeen("s1").IsZero() {
		t.Errorf("the new instance's newest entry: %v, want b's late one (and its subject seen)", got)
	}

	// A storage that cannot list: the log stays as it is.
	bad := NewAuditLog(&failingLister{FileStorage: st}, "console", 1000, nil)
	if err := bad.follow(ctx); err != nil || !bad.followErr || bad.Len() != 0 {
		t.Errorf("follow over a failing storage: %v, followErr %v, %d entries", err, bad.followErr, bad.Len())
	}
}

// failingLister is a storage whose List fails.
type failingLister struct{ *certmagic.FileStorage }

func (failingLister) List(context.Context, string, bool) ([]string, error) {
	return nil, fmt.Errorf("storage offline")
}

// partialLister is a storage whose List, while partial is set, returns no key and an
// error that wraps fs.ErrNotExist, as a file storage's walk does when a file is
// renamed away under it.
type partialLister struct {
	*certmagic.FileStorage
	partial bool
}

func (p *partialLister) List(ctx context.Context, prefix string, recursive bool) ([]string, error) {
	if p.partial {
		return nil, fmt.Errorf("walking %s: %w", prefix, fs.ErrNotExist)
	}
	return p.FileStorage.List(ctx, prefix, recursive)
}

// TestAuditLogFollowEdges: a listing cut short is no listing (no entry lost or merged
// twice after it); a storage's temporary file beside the chunks is not read as one;
// and a chunk too old for Load to read (a quiet instance's open one) is followed from
// its length on.
func TestAuditLogFollowEdges(t *testing.T) {
	ctx := context.Background()
	fsys := &certmagic.FileStorage{Path: t.TempDir()}
	st := &partialLister{FileStorage: fsys}
	a := NewAuditLog(fsys, "console", 3, nil)
	t0 := time.Now().Add(-time.Hour)
	a.Record(audit.Entry{Time: t0, Tool: "quiet-1"})
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	other := NewAuditLog(fsys, "console", 3, nil)
	for i := range 3 {
		other.Record(audit.Entry{Time: t0.Add(time.Duration(i+1) * time.Minute), Tool: fmt.Sprintf("busy-%d", i)})
	}
	if err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// b's Load reads the newest three entries: a's chunk, older, is not read.
	b := NewAuditLog(st, "console", 3, nil)
	if err := b.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.follow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(b.Query(Filter{Tool: "quiet-1"})); got != 0 {
		t.Errorf("an entry older than the newest three was merged: %d", got)
	}
	a.Record(audit.Entry{Time: time.Now(), Tool: "quiet-2"})
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st.partial = true
	if err := b.follow(ctx); err != nil {
		t.Fatal(err)
	}
	st.partial = false
	if err := os.WriteFile(filepath.Join(fsys.Path, "console", "audit", "1234567890.tmp"), []byte(`{"time":"`+time.Now().Format(time.RFC3339Nano)+`","tool":"temporary"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.follow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	count := map[string]int{}
	for _, e := range b.Query(Filter{}) {
		count[e.Tool]++
	}
	if count["quiet-2"] != 1 || count["temporary"] != 0 || count["busy-2"] != 1 {
		t.Errorf("b's entries after a cut listing, a temporary file and two follows: %v, want quiet-2 and busy-2 once, no temporary", count)
	}
}
