package console

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
)

// TestRevokedLinkOutlivesEviction: a revoked link stays refused while more than
// MaxLinks newer links are made, also after the registry is read back from storage.
// Eviction used to take the entry closest to expiry, revoked or not. (Storage is
// kept in memory here: file storage syncs every write, and 10,000 take a minute.)
func TestRevokedLinkOutlivesEviction(t *testing.T) {
	st := &memStorage{m: map[string][]byte{}}
	ctx := context.Background()
	g := NewLinkRegistry(st, "p", nil)
	now := time.Now()
	const victim = "revoked-link-0"
	if err := g.Record(ctx, Link{ID: victim, Kind: KindDownload, Target: "/sandbox/secret", ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Revoke(ctx, victim); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range MaxLinks + 1 {
		if err := g.Record(ctx, Link{ID: fmt.Sprintf("newer-link-%05d", i), Kind: KindDownload, Target: "/sandbox/f", ExpiresAt: now.Add(2 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d links recorded in %v", MaxLinks+1, time.Since(start))
	if !g.Revoked(victim) {
		t.Fatalf("the revoked link works again after %d newer links", MaxLinks+1)
	}
	if n := len(g.List()); n != MaxLinks+1 {
		t.Errorf("%d links listed, want %d that are not revoked and the revoked one", n, MaxLinks+1)
	}
	if g.Revoked("newer-link-00000") {
		t.Error("a link that was never revoked is refused")
	}

	g2 := NewLinkRegistry(st, "p", nil)
	if err := g2.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if !g2.Revoked(victim) {
		t.Fatal("the revoked link works again once the registry is read back from storage")
	}
	if n := len(g2.List()); n != MaxLinks+1 {
		t.Errorf("%d links after reading back, want %d", n, MaxLinks+1)
	}
}

// TestRevocationsCapped: past MaxRevoked unexpired revocations, Revoke refuses with an
// error that says what to do, and forgets none; once revoked links expire there is
// room again.
func TestRevocationsCapped(t *testing.T) {
	ctx := context.Background()
	g := NewLinkRegistry(fileStorage(t), "p", nil)
	g.maxRevoked = 3
	clock := time.Now()
	g.now = func() time.Time { return clock }
	for i := range 5 {
		exp := clock.Add(2 * time.Hour)
		if i == 0 {
			exp = clock.Add(time.Hour)
		}
		if err := g.Record(ctx, Link{ID: fmt.Sprintf("link%08d", i), Kind: KindDownload, ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := g.Revoke(ctx, fmt.Sprintf("link%08d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Revoke(ctx, "link00000002"); err != nil {
		t.Fatalf("revoking a revoked link again: %v", err)
	}
	_, err := g.Revoke(ctx, "link00000003")
	if !errors.Is(err, ErrTooManyRevoked) || g.Revoked("link00000003") {
		t.Fatalf("a revocation past the cap: %v", err)
	}
	for i := range 3 {
		if !g.Revoked(fmt.Sprintf("link%08d", i)) {
			t.Fatalf("link%08d works again after a refused revocation", i)
		}
	}
	// The first revoked link expires: its revocation makes room.
	clock = clock.Add(time.Hour + time.Second)
	if _, err := g.Revoke(ctx, "link00000003"); err != nil || !g.Revoked("link00000003") {
		t.Fatalf("revoking once a revoked link expired: %v", err)
	}
	if !g.Revoked("link00000001") || !g.Revoked("link00000002") {
		t.Fatal("an unexpired revocation was forgotten")
	}
}

// TestLoadKeepsRevocations: a revocation that storage lost (a failed write, an entry
// deleted by another instance) is kept when the registry rereads storage, and stored
// again.
func TestLoadKeepsRevocations(t *testing.T) {
	st := fileStorage(t)
	ctx := context.Background()
	g := NewLinkRegistry(st, "p", nil)
	if err := g.Record(ctx, Link{ID: "link00000000", Kind: KindDownload, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Revoke(ctx, "link00000000"); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, path.Join("p", "links", "link00000000")); err != nil {
		t.Fatal(err)
	}
	if err := g.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if !g.Revoked("link00000000") {
		t.Fatal("rereading storage made the revoked link work again")
	}
	g2 := NewLinkRegistry(st, "p", nil)
	if err := g2.Load(ctx); err != nil || !g2.Revoked("link00000000") {
		t.Fatalf("the revocation was not stored again: %v", err)
	}
}

// memStorage is a certmagic.Storage in memory, for tests that write thousands of keys.
type memStorage struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memStorage) Store(_ context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = append([]byte(nil), value...)
	return nil
}

func (s *memStorage) Load(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return append([]byte(nil), v...), nil
}

func (s *memStorage) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; !ok {
		return fs.ErrNotExist
	}
	delete(s.m, key)
	return nil
}

func (s *memStorage) Exists(_ context.Context, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[key]
	return ok
}

// List lists the keys right under prefix (it is used that way only).
func (s *memStorage) List(_ context.Context, prefix string, _ bool) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.m {
		if rest, ok := strings.CutPrefix(k, prefix+"/"); ok && !strings.Contains(rest, "/") {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func (s *memStorage) Stat(_ context.Context, key string) (certmagic.KeyInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return certmagic.KeyInfo{}, fs.ErrNotExist
	}
	return certmagic.KeyInfo{Key: key, Size: int64(len(v)), IsTerminal: true}, nil
}

func (s *memStorage) Lock(context.Context, string) error   { return nil }
func (s *memStorage) Unlock(context.Context, string) error { return nil }

// TestLinkRevokedAcrossInstances: two registries over one storage directory, as two
// Caddy instances sharing it (neither rereading it, as between their 30 s syncs): a
// link made on A is revoked through B's console, and A refuses it within linkFresh;
// a link made on B and revoked on B is refused on A too.
func TestLinkRevokedAcrossInstances(t *testing.T) {
	st := fileStorage(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	a, b := NewLinkRegistry(st, "p", nil), NewLinkRegistry(st, "p", nil)
	a.now, b.now = clock, clock
	l := Link{ID: "made-on-a-0001", Kind: KindDownload, Target: "/sandbox/f", ExpiresAt: now.Add(time.Hour)}
	if err := a.Record(ctx, l); err != nil {
		t.Fatal(err)
	}
	if a.Revoked(l.ID) {
		t.Fatal("revoked before anyone revoked it")
	}
	if _, err := b.Revoke(ctx, l.ID); err != nil {
		t.Fatalf("revoking on B a link made on A: %v", err)
	}
	if !b.Revoked(l.ID) {
		t.Fatal("B does not refuse the link it revoked")
	}
	if a.Revoked(l.ID) {
		t.Fatal("A read storage again within linkFresh of its last check")
	}
	now = now.Add(linkFresh)
	if !a.Revoked(l.ID) {
		t.Fatal("A still serves a link B revoked, past linkFresh")
	}
	now = now.Add(linkFresh)
	if !a.Revoked(l.ID) || len(a.List()) != 1 || !a.List()[0].Revoked {
		t.Fatalf("A forgot the revocation it learned: %+v", a.List())
	}

	// Unknown and malformed ids are refused by nothing here, and cost no storage read
	// beyond one per linkFresh.
	if a.Revoked("no-such-link-01") || a.Revoked("../../etc") {
		t.Fatal("an unknown id counts as revoked")
	}
	if _, err := a.Revoke(ctx, "../../etc"); err != ErrNotFound {
		t.Fatalf("revoking a malformed id: %v", err)
	}
}
