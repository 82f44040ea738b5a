package preview

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// countingStorage counts the reads of a storage, and fails every operation while
// broken is set.
type countingStorage struct {
	certmagic.Storage
	loads, lists atomic.Int64
	broken       atomic.Bool
	// partial makes a listing fail with fs.ErrNotExist having found nothing, as
	// FileStorage's does when a write renames its temporary file away during the
	// walk; hidden makes listings leave the records out without an error, as a
	// storage whose listings lag its writes may.
	partial, hidden atomic.Bool
	// failIndex makes writes of an owner's previews fail.
	failIndex atomic.Bool
	// listGate and loadGate, when set, hold every List or Load until closed.
	listGate, loadGate atomic.Pointer[chan struct{}]
	mu                 sync.Mutex
	loaded             map[string]int // reads per key
}

var errBroken = errors.New("storage unreachable")

func (s *countingStorage) Load(ctx context.Context, key string) ([]byte, error) {
	s.loads.Add(1)
	s.mu.Lock()
	if s.loaded == nil {
		s.loaded = map[string]int{}
	}
	s.loaded[key]++
	s.mu.Unlock()
	if g := s.loadGate.Load(); g != nil {
		<-*g
	}
	if s.broken.Load() {
		return nil, errBroken
	}
	return s.Storage.Load(ctx, key)
}

// reads is how many times key was read.
func (s *countingStorage) reads(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded[key]
}

func (s *countingStorage) List(ctx context.Context, prefix string, recursive bool) ([]string, error) {
	s.lists.Add(1)
	if g := s.listGate.Load(); g != nil {
		<-*g
	}
	if s.broken.Load() {
		return nil, errBroken
	}
	keys, err := s.Storage.List(ctx, prefix, recursive)
	if err == nil && s.partial.Load() {
		return nil, &fs.PathError{Op: "lstat", Path: prefix + "/2719512373", Err: fs.ErrNotExist}
	}
	if err == nil && s.hidden.Load() {
		return nil, nil
	}
	return keys, err
}

func (s *countingStorage) Store(ctx context.Context, key string, value []byte) error {
	if s.broken.Load() || s.failIndex.Load() && strings.HasPrefix(key, ownerPrefix) {
		return errBroken
	}
	return s.Storage.Store(ctx, key, value)
}

func (s *countingStorage) Lock(ctx context.Context, name string) error {
	if s.broken.Load() {
		return errBroken
	}
	return s.Storage.Lock(ctx, name)
}

// inBubble runs f in a synctest bubble, then lets the storage's lock keepers (a
// goroutine per lock taken, which looks at its lock file every 5 s) see their locks
// gone and return, as the bubble requires.
func inBubble(t *testing.T, f func(t *testing.T)) {
	synctest.Test(t, func(t *testing.T) {
		defer func() { // after a failed test too
			time.Sleep(10 * time.Second)
			synctest.Wait()
		}()
		f(t)
	})
}

// twoInstances returns two registries over one file storage, as two Caddy instances
// sharing a storage directory see it, and the storage as b reads it.
func twoInstances(t *testing.T) (a, b *Registry, bst *countingStorage) {
	dir := t.TempDir()
	a, b = NewRegistry(), NewRegistry()
	a.UseStorage(&certmagic.FileStorage{Path: dir}, nil)
	bst = &countingStorage{Storage: &certmagic.FileStorage{Path: dir}}
	b.UseStorage(bst, nil)
	return a, b, bst
}

// A preview made through A opens through B (lookup, certificate, list), keeps its
// label when renewed through either, and once unexposed through one instance ends on
// the other within the re-check, its open streams with it.
func TestStoredPreviewAcrossInstances(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		ctx := context.Background()
		a, b, bst := twoInstances(t)
		p := a.Expose("box", "preview.example.com", 8000, time.Hour)

		got, ok := b.Lookup(ctx, p.Label)
		if !ok || got.Owner != "box" || got.Port != 8000 || got.Domain != p.Domain || !got.Expires.Equal(p.Expires) {
			t.Fatalf("B looks up A's preview: %+v %v", got, ok)
		}
		if !b.AllowsHost(ctx, p.Host()) || b.AllowsHost(ctx, p.Label+".example.com") {
			t.Error("B's certificate permission for A's preview is wrong")
		}
		if l := b.List("box"); len(l) != 1 || l[0].Label != p.Label {
			t.Errorf("B lists %+v", l)
		}
		if b.Live() != 1 {
			t.Errorf("B holds %d previews, want the one it served", b.Live())
		}

		time.Sleep(time.Minute)
		if r := b.Expose("box", "preview.example.com", 8000, time.Hour); r.Label != p.Label || !r.Expires.After(p.Expires) {
			t.Errorf("renewed through B: %s until %v; was %s until %v", r.Label, r.Expires, p.Label, p.Expires)
		}
		if r := a.Expose("box", "preview.example.com", 8000, time.Hour); r.Label != p.Label {
			t.Errorf("renewed through A again: %s, was %s", r.Label, p.Label)
		}
		other := b.Expose("box", "preview.example.com", 9000, time.Hour)
		if other.Label == p.Label {
			t.Error("another port got the same label")
		}
		if l := a.List("box"); len(l) != 2 {
			t.Errorf("A lists %d previews, want 2", len(l))
		}

		// Unexposed through A: B's preview ends within the re-check.
		held, _ := b.Lookup(ctx, p.Label)
		began := time.Now()
		if !a.Unexpose("box", 8000) {
			t.Fatal("A did not find the preview to unexpose")
		}
		select {
		case <-held.Done():
		case <-time.After(recheckEvery + listEvery + time.Second):
			t.Fatal("B's preview still open after the re-check")
		}
		t.Logf("unexposed through A, ended on B %v later", time.Since(began))
		if time.Since(began) > recheckEvery+listEvery {
			t.Errorf("ended on B after %v", time.Since(began))
		}
		lists := bst.lists.Load()
		if _, ok := b.Lookup(ctx, p.Label); ok || b.AllowsHost(ctx, p.Host()) {
			t.Error("B still serves the unexposed preview")
		}
		if bst.lists.Load() != lists {
			t.Error("B asked storage for a preview it saw end")
		}

		// The other way round: made through B, unexposed through B, ends on A.
		onA, ok := a.Lookup(ctx, other.Label)
		if !ok {
			t.Fatal("A does not find B's preview")
		}
		b.Unexpose("box", 9000)
		select {
		case <-onA.Done():
		case <-time.After(recheckEvery + listEvery + time.Second):
			t.Fatal("A's view of B's preview still open after the re-check")
		}
		if a.Live() != 0 || b.Live() != 0 || len(a.List("box")) != 0 {
			t.Errorf("live after both unexposed: A %d, B %d", a.Live(), b.Live())
		}
	})
}

// A preview renewed through A goes on through B past its first expiry, and ends on
// both at its last; storage keeps nothing of it then.
func TestStoredPreviewExpiry(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		ctx := context.Background()
		a, b, bst := twoInstances(t)
		p := a.Expose("box", "localhost", 8000, time.Minute)
		held, ok := b.Lookup(ctx, p.Label)
		if !ok {
			t.Fatal("B does not find A's preview")
		}
		time.Sleep(30 * time.Second)
		a.Expose("box", "localhost", 8000, time.Minute) // until 1m30s
		time.Sleep(45 * time.Second)
		if _, ok := b.Lookup(ctx, p.Label); !ok {
			t.Fatal("B dropped the preview A renewed")
		}
		select {
		case <-held.Done():
			t.Fatal("B ended the renewed preview's streams")
		default:
		}
		time.Sleep(20 * time.Second)
		select {
		case <-held.Done():
		default:
			t.Fatal("B's view of the expired preview is still open")
		}
		if _, ok := a.Lookup(ctx, p.Label); ok || a.Live() != 0 || b.Live() != 0 {
			t.Error("the expired preview is still live")
		}
		synctest.Wait()
		if _, err := bst.Storage.Load(ctx, recordPrefix+p.Label); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the expired preview's record is still in storage: %v", err)
		}
		if _, err := bst.Storage.Load(ctx, ownerKey("box")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the owner's list is still in storage: %v", err)
		}
	})
}

// Host names with random labels, as a scan of the wildcard makes them, read no
// preview from storage, and list it at most once per listEvery, however many come:
// each waits for the next listing instead.
func TestRandomLabelsSpareStorage(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		ctx := context.Background()
		a, b, bst := twoInstances(t)
		p := a.Expose("box", "localhost", 8000, time.Hour)

		var wg sync.WaitGroup
		for range 200 { // at once
			wg.Go(func() {
				if b.AllowsHost(ctx, newLabel()+".localhost") {
					t.Error("random label allowed")
				}
			})
		}
		wg.Wait()
		began := time.Now()
		for range 1000 { // one every 2 ms, over two seconds
			wg.Go(func() {
				if _, ok := b.Lookup(ctx, newLabel()); ok {
					t.Error("random label found")
				}
			})
			time.Sleep(2 * time.Millisecond)
		}
		wg.Wait()
		took := time.Since(began)
		for _, bad := range []string{"", "x", "UPPERCASE", p.Label + "x", "00000000000000000000000000"} {
			if _, ok := b.Lookup(ctx, bad); ok {
				t.Errorf("%q found", bad)
			}
		}
		loads, lists := bst.loads.Load(), bst.lists.Load()
		t.Logf("1200 random labels: %d reads, %d listings; the last answered %v after the first", loads, lists, took)
		if loads != 0 || lists > 6 {
			t.Errorf("1200 random labels cost %d reads and %d listings of storage", loads, lists)
		}
		// The real one is found among them.
		if _, ok := b.Lookup(ctx, p.Label); !ok {
			t.Error("A's preview not found through B after the scan")
		}
	})
}

// While storage fails, previews work on the instance that made them, and the failure
// is logged once.
func TestStorageFailureFallsBack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		ctx := context.Background()
		core, logs := observer.New(zap.WarnLevel)
		st := &countingStorage{Storage: &certmagic.FileStorage{Path: t.TempDir()}}
		st.broken.Store(true)
		r := NewRegistry()
		r.UseStorage(st, zap.New(core))
		p := r.Expose("box", "localhost", 8000, time.Hour)
		if got, ok := r.Lookup(ctx, p.Label); !ok || got.Port != 8000 {
			t.Fatal("a preview made while storage fails does not open here")
		}
		if r.Expose("box", "localhost", 8000, time.Hour).Label != p.Label {
			t.Error("renewed while storage fails: new label")
		}
		if l := r.List("box"); len(l) != 1 {
			t.Errorf("listed %d", len(l))
		}
		var wg sync.WaitGroup
		for range 100 { // a scan while storage fails asks it no more often
			wg.Go(func() { r.Lookup(ctx, newLabel()) })
			time.Sleep(10 * time.Millisecond)
		}
		wg.Wait()
		if n := st.lists.Load(); n > 3 {
			t.Errorf("100 random labels over a second listed the failing storage %d times", n)
		}
		if n := logs.Len(); n != 1 {
			t.Errorf("%d log lines for the failing storage, want 1: %v", n, logs.All())
		}
		// Storage back: the next renewal puts the preview there, with its label.
		st.broken.Store(false)
		if r.Expose("box", "localhost", 8000, time.Hour).Label != p.Label {
			t.Error("renewed once storage works: new label")
		}
		if _, err := st.Storage.Load(ctx, recordPrefix+p.Label); err != nil {
			t.Errorf("the preview is not in storage once it works: %v", err)
		}
		if !r.Unexpose("box", 8000) || r.Live() != 0 {
			t.Error("unexpose after storage came back")
		}
	})
}

// A listing that fails having found part of storage (a write renamed its temporary
// file away under it) or that leaves a record out ends nothing: only a record that
// reading it shows gone does. A storage with no previews at all is no failure.
func TestIncompleteListingEndsNothing(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		ctx := context.Background()
		core, logs := observer.New(zap.WarnLevel)
		a, b, bst := twoInstances(t)
		b.UseStorage(bst, zap.New(core))
		p := a.Expose("box", "localhost", 8000, time.Hour)
		held, ok := b.Lookup(ctx, p.Label)
		if !ok {
			t.Fatal("B does not find A's preview")
		}
		bst.partial.Store(true)
		time.Sleep(3 * recheckEvery)
		bst.partial.Store(false)
		bst.hidden.Store(true)
		time.Sleep(3 * recheckEvery)
		select {
		case <-held.Done():
			t.Fatal("B ended a live preview its listing missed")
		default:
		}
		if _, ok := b.Lookup(ctx, p.Label); !ok || b.Live() != 1 {
			t.Error("B no longer serves the live preview its listing missed")
		}
		if logs.Len() == 0 {
			t.Error("the failed listing is not counted as a storage failure")
		}

		// Unexposed through A while B's listings still leave it out: reading the
		// record tells B.
		a.Unexpose("box", 8000)
		select {
		case <-held.Done():
		case <-time.After(recheckEvery + listEvery + time.Second):
			t.Fatal("B's preview still open after it was unexposed")
		}

		core, logs = observer.New(zap.WarnLevel)
		r := NewRegistry()
		r.UseStorage(&certmagic.FileStorage{Path: t.TempDir()}, zap.New(core))
		if _, ok := r.Lookup(ctx, newLabel()); ok || logs.Len() != 0 {
			t.Errorf("a storage with no previews: found %v, logged %v", ok, logs.All())
		}
	})
}

// A lookup whose request is cancelled while the listing it started is under way
// fails alone: another lookup waiting for the same listing is answered.
func TestCancelledLookupSharesItsListing(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		a, b, bst := twoInstances(t)
		p := a.Expose("box", "localhost", 8000, time.Hour)
		gate := make(chan struct{})
		bst.listGate.Store(&gate)
		first, cancel := context.WithCancel(context.Background())
		go b.Lookup(first, newLabel())
		synctest.Wait() // its listing is under way
		found := make(chan bool, 1)
		go func() {
			_, ok := b.Lookup(context.Background(), p.Label)
			found <- ok
		}()
		synctest.Wait()
		cancel()
		synctest.Wait()
		bst.listGate.Store(nil)
		close(gate)
		if !<-found {
			t.Error("a lookup failed with the request that started the listing it waited for")
		}
	})
}

// A preview renewed through A stays on B when B's own expiry for it passes: what
// else looks at B's previews meanwhile (the gauge, a listing) leaves it to B's read
// of its record, which shows the renewal.
func TestRenewalElsewhereOutlivesLocalExpiry(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		ctx := context.Background()
		a, b, bst := twoInstances(t)
		p := a.Expose("box", "localhost", 8000, time.Minute)
		held, ok := b.Lookup(ctx, p.Label)
		if !ok {
			t.Fatal("B does not find A's preview")
		}
		time.Sleep(30 * time.Second)
		a.Expose("box", "localhost", 8000, time.Minute) // until 1m30s
		gate := make(chan struct{})
		bst.loadGate.Store(&gate)
		time.Sleep(31 * time.Second) // B's expiry passed; B reads the record
		synctest.Wait()
		b.Live()
		go b.List("box")
		synctest.Wait()
		bst.loadGate.Store(nil)
		close(gate)
		synctest.Wait()
		select {
		case <-held.Done():
			t.Fatal("B ended the preview renewed through A")
		default:
		}
		if got, ok := b.Lookup(ctx, p.Label); !ok || !got.Expires.After(p.Expires) || b.Live() != 1 {
			t.Errorf("B after A's renewal: %+v %v, %d live", got, ok, b.Live())
		}
	})
}

// A preview whose owner's list could not be written leaves no record behind: it
// opens on the instance that made it only.
func TestFailedIndexWriteLeavesNoRecord(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		ctx := context.Background()
		_, b, bst := twoInstances(t)
		bst.failIndex.Store(true)
		p := b.Expose("box", "localhost", 8000, time.Hour)
		if _, ok := b.Lookup(ctx, p.Label); !ok {
			t.Fatal("the preview does not open on the instance that made it")
		}
		if keys, err := bst.Storage.List(ctx, recordPrefix, false); len(keys) != 0 {
			t.Errorf("records in storage that no owner's list names: %v %v", keys, err)
		}
	})
}

// Records nobody holds any more (the instance that made them is gone, their owner
// exposes nothing again) leave storage once expired, when another instance lists the
// labels: it reads each record it does not hold once per expiry, and no file that is
// not a record (a write's temporary file).
func TestExpiredRecordsLeaveStorage(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		ctx := context.Background()
		a, b, bst := twoInstances(t)
		c := NewRegistry()
		c.UseStorage(bst.Storage, nil)
		gone := a.Expose("box", "localhost", 8000, time.Minute)
		a.UseStorage(nil, nil) // A is gone: storage hears no more of it
		live := c.Expose("other", "localhost", 8000, time.Hour)
		tmp := filepath.Join(bst.Storage.(*certmagic.FileStorage).Path, "mcp_sandbox", "previews", "3141592653")
		if err := os.WriteFile(tmp, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}

		for range 5 { // B lists the labels now and then for five minutes
			time.Sleep(time.Minute)
			b.Lookup(ctx, newLabel())
			synctest.Wait()
		}
		if _, err := bst.Storage.Load(ctx, recordPrefix+gone.Label); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the expired record is still in storage: %v", err)
		}
		if _, err := bst.Storage.Load(ctx, ownerKey("box")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the expired preview's owner list is still in storage: %v", err)
		}
		if _, err := bst.Storage.Load(ctx, recordPrefix+live.Label); err != nil {
			t.Errorf("the live record is gone: %v", err)
		}
		if n := bst.reads(recordPrefix + live.Label); n != 1 {
			t.Errorf("B read the live record %d times, want once", n)
		}
		if n := bst.reads(recordPrefix + "3141592653"); n != 0 {
			t.Errorf("B read the temporary file %d times", n)
		}
		if _, ok := c.Lookup(ctx, live.Label); !ok {
			t.Error("the live preview is gone")
		}
	})
}
