package fleet

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestSharedUse: what one instance records of its uses of a sandbox, another reads as
// the newest use made elsewhere (its own records aside); a command under way counts as
// a use now; a record is written again only after a newer use; records a day old are
// removed when read; nothing is read or written without storage.
func TestSharedUse(t *testing.T) {
	ctx := context.Background()
	dc, err := client.NewClientWithOpts(client.WithHost("tcp://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	cli := sandbox.Docker(dc)
	cfg := sandbox.DefaultConfig()
	cfg.Container = "shared-use-test"
	sb, err := sandbox.New(cli, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := &certmagic.FileStorage{Path: t.TempDir()}
	f := &Fleet{o: Options{Storage: st}, logger: zap.NewNop()}
	e := NewEntry(EntryOptions{Sandbox: sb})

	if got := f.sharedUse(ctx, cfg.Container); !got.IsZero() {
		t.Errorf("no instance used it, yet the shared use is %v", got)
	}
	used := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	e.idle.last.Store(used.UnixNano())
	f.publishUse(ctx, e)
	// This process's own record is not another instance's use.
	if got := f.sharedUse(ctx, cfg.Container); !got.IsZero() {
		t.Errorf("this instance's own record is read as another's: %v", got)
	}
	b, err := st.Load(ctx, useKey(cfg.Container))
	if err != nil || string(b) != strconv.FormatInt(used.UnixNano(), 10) {
		t.Fatalf("the record of the use: %q %v", b, err)
	}
	// Another instance's records: the newest counts, a day-old one goes.
	other, old := UsePrefix+cfg.Container+"/00000000000000aa", UsePrefix+cfg.Container+"/00000000000000bb"
	later := used.Add(30 * time.Second)
	for k, at := range map[string]time.Time{other: later, old: time.Now().Add(-2 * useStale)} {
		if err := st.Store(ctx, k, []byte(strconv.FormatInt(at.UnixNano(), 10))); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.sharedUse(ctx, cfg.Container); !got.Equal(later) {
		t.Errorf("the shared use is %v, want the other instance's %v", got, later)
	}
	if st.Exists(ctx, old) {
		t.Error("a day-old record of use is kept")
	}
	e.usedAt(later)
	if !e.LastUse().Equal(later) {
		t.Errorf("after counting another instance's use, the last use is %v, want %v", e.LastUse(), later)
	}
	e.usedAt(used)
	if !e.LastUse().Equal(later) {
		t.Error("an older use moved the last use back")
	}
	// Unchanged: not written again. Under way: written as now.
	if err := st.Delete(ctx, useKey(cfg.Container)); err != nil {
		t.Fatal(err)
	}
	e.published.Store(later.UnixNano())
	f.publishUse(ctx, e)
	if st.Exists(ctx, useKey(cfg.Container)) {
		t.Error("a use already recorded is written again")
	}
	done := e.Begin()
	before := time.Now()
	f.publishUse(ctx, e)
	done()
	b, _ = st.Load(ctx, useKey(cfg.Container))
	if n, _ := strconv.ParseInt(string(b), 10, 64); time.Unix(0, n).Before(before) {
		t.Errorf("a command under way is recorded as a use at %v, before %v", time.Unix(0, n), before)
	}
	// Without storage: nothing.
	none := &Fleet{logger: zap.NewNop()}
	none.publishUse(ctx, e)
	if got := none.sharedUse(ctx, cfg.Container); !got.IsZero() {
		t.Errorf("without storage, a shared use: %v", got)
	}
}
