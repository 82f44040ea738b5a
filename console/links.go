package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
)

// Link kinds. Downloads exist today; uploads and previews record themselves the same
// way when they are made.
const (
	KindDownload = "download"
	KindUpload   = "upload"
	KindPreview  = "preview"
)

// Link is one signed link handed out: a download, an upload page or a preview.
type Link struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Target is what the link opens: a path in the sandbox, or a port for a preview.
	Target    string    `json:"target"`
	URL       string    `json:"url,omitempty"` // without its secret part when it has one
	Creator   string    `json:"creator"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Revoked   bool      `json:"revoked,omitempty"`
}

// linkIDPattern is what may become a storage key component.
var linkIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{8,64}$`)

// Bounds of the link registry.
const (
	// MaxLinks bounds the links remembered; beyond it the one closest to expiry is
	// forgotten (it still works until it expires, but no longer shows or revokes).
	MaxLinks = 10000
	// linkSync is how often the registry rereads storage, to see links and
	// revocations made by other instances sharing it, and prunes expired entries.
	linkSync = 30 * time.Second
)

// LinkRegistry remembers the links made and the ones revoked, in Caddy's storage under
// <prefix>/links/<id>, each entry deleted once its link expires. Revoked reads only
// memory, so the link check costs a map lookup.
type LinkRegistry struct {
	storage certmagic.Storage
	prefix  string
	log     *zap.Logger
	now     func() time.Time

	mu       sync.RWMutex
	links    map[string]Link
	onRevoke map[string]func(context.Context, Link) error

	stop chan struct{}
	done chan struct{}
}

// NewLinkRegistry returns a registry over storage under prefix. Call Load, then Start.
func NewLinkRegistry(storage certmagic.Storage, prefix string, logger *zap.Logger) *LinkRegistry {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &LinkRegistry{storage: storage, prefix: path.Join(prefix, "links"), log: logger, now: time.Now,
		links: make(map[string]Link), onRevoke: make(map[string]func(context.Context, Link) error)}
}

// OnRevoke sets what else revoking a link of kind does (a preview closes its port).
func (g *LinkRegistry) OnRevoke(kind string, fn func(context.Context, Link) error) {
	g.mu.Lock()
	g.onRevoke[kind] = fn
	g.mu.Unlock()
}

// Record remembers a link until it expires.
func (g *LinkRegistry) Record(ctx context.Context, l Link) error {
	if !linkIDPattern.MatchString(l.ID) {
		return fmt.Errorf("link id %q is not a valid id", l.ID)
	}
	if l.CreatedAt.IsZero() {
		l.CreatedAt = g.now()
	}
	g.mu.Lock()
	if _, ok := g.links[l.ID]; !ok && len(g.links) >= MaxLinks {
		g.evictLocked(ctx)
	}
	if old, ok := g.links[l.ID]; ok && old.Revoked {
		l.Revoked = true // the same link signed again stays revoked
	}
	g.links[l.ID] = l
	g.mu.Unlock()
	return g.save(ctx, l)
}

func (g *LinkRegistry) evictLocked(ctx context.Context) {
	var victim Link
	for _, l := range g.links {
		if victim.ID == "" || l.ExpiresAt.Before(victim.ExpiresAt) {
			victim = l
		}
	}
	delete(g.links, victim.ID)
	go g.delete(context.WithoutCancel(ctx), victim.ID)
}

func (g *LinkRegistry) save(ctx context.Context, l Link) error {
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if err := g.storage.Store(ctx, path.Join(g.prefix, l.ID), data); err != nil {
		return fmt.Errorf("storing link %s: %w", l.ID, err)
	}
	return nil
}

func (g *LinkRegistry) delete(ctx context.Context, id string) {
	if err := g.storage.Delete(ctx, path.Join(g.prefix, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		g.log.Warn("deleting an expired link entry", zap.String("id", id), zap.Error(err))
	}
}

// Revoked reports whether the link id was revoked. It reads memory only.
func (g *LinkRegistry) Revoked(id string) bool {
	g.mu.RLock()
	l, ok := g.links[id]
	g.mu.RUnlock()
	return ok && l.Revoked
}

// ErrNotFound is returned for an unknown or expired id.
var ErrNotFound = errors.New("not found")

// Revoke makes the link stop working. The entry stays (marked) until the link expires,
// which bounds the revocation list by the links' own lifetime.
func (g *LinkRegistry) Revoke(ctx context.Context, id string) (Link, error) {
	g.mu.Lock()
	l, ok := g.links[id]
	if !ok || !g.now().Before(l.ExpiresAt) {
		g.mu.Unlock()
		return Link{}, ErrNotFound
	}
	l.Revoked = true
	g.links[id] = l
	hook := g.onRevoke[l.Kind]
	g.mu.Unlock()
	if err := g.save(ctx, l); err != nil {
		return l, err
	}
	if hook != nil {
		return l, hook(ctx, l)
	}
	return l, nil
}

// List returns the unexpired links, newest first, revoked ones included (marked).
func (g *LinkRegistry) List() []Link {
	now := g.now()
	g.mu.RLock()
	out := make([]Link, 0, len(g.links))
	for _, l := range g.links {
		if now.Before(l.ExpiresAt) {
			out = append(out, l)
		}
	}
	g.mu.RUnlock()
	slices.SortFunc(out, func(a, b Link) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out
}

// Load reads the registry from storage and deletes entries of expired links.
func (g *LinkRegistry) Load(ctx context.Context) error {
	keys, err := g.storage.List(ctx, g.prefix, false)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("listing links: %w", err)
	}
	now := g.now()
	fresh := make(map[string]Link, len(keys))
	for _, k := range keys {
		id := path.Base(k)
		if !linkIDPattern.MatchString(id) {
			continue
		}
		data, err := g.storage.Load(ctx, k)
		if err != nil {
			continue
		}
		var l Link
		if json.Unmarshal(data, &l) != nil || l.ID != id {
			continue
		}
		if !now.Before(l.ExpiresAt) {
			g.delete(ctx, id)
			continue
		}
		fresh[id] = l
	}
	g.mu.Lock()
	for id, l := range g.links {
		// A revocation here that storage does not show yet must not be lost.
		if f, ok := fresh[id]; ok && l.Revoked && !f.Revoked {
			fresh[id] = l
		}
		// Nor a link recorded while storage was being read.
		if _, ok := fresh[id]; !ok && !l.CreatedAt.Before(now) {
			fresh[id] = l
		}
	}
	for len(fresh) > MaxLinks {
		var victim string
		for id, l := range fresh {
			if victim == "" || l.ExpiresAt.Before(fresh[victim].ExpiresAt) {
				victim = id
			}
		}
		delete(fresh, victim)
	}
	g.links = fresh
	g.mu.Unlock()
	return nil
}

// Start rereads storage every 30 s (other instances' links and revocations) and prunes.
func (g *LinkRegistry) Start() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stop != nil {
		return
	}
	stop, done := make(chan struct{}), make(chan struct{})
	g.stop, g.done = stop, done
	go every(g.log, "rereading the link registry", linkSync, stop, done, g.Load)
}

// Close stops the background sync.
func (g *LinkRegistry) Close() {
	g.mu.Lock()
	stop, done := g.stop, g.done
	g.stop = nil
	g.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}
