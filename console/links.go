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

// Link kinds: share_file's downloads, upload_link's pages and expose_port's previews.
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
	Target  string `json:"target"`
	URL     string `json:"url,omitempty"` // without its secret part when it has one
	Creator string `json:"creator"`
	// Person is whose sandbox the link opens; "" for the operator's.
	Person    string    `json:"person"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Revoked   bool      `json:"revoked,omitempty"`
	// PersonRemoved: the configuration no longer names Person, so the link no longer
	// opens anything (set by the console when it lists links).
	PersonRemoved bool `json:"person_removed,omitempty"`
}

// links lists the links, marking those of people the configuration no longer names.
func (c *Console) links(ctx context.Context) ([]Link, error) {
	list, err := c.opts.Links.Links(ctx)
	if c.opts.Sandboxes != nil {
		people := c.opts.Sandboxes.People()
		for i := range list {
			list[i].PersonRemoved = list[i].Person != "" && !slices.Contains(people, list[i].Person)
		}
	}
	return list, err
}

// linkIDPattern is what may become a storage key component.
var linkIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{8,64}$`)

// Bounds of the link registry.
const (
	// MaxLinks bounds the links remembered that are not revoked; beyond it the one
	// closest to expiry is forgotten (it still works until it expires, but no longer
	// shows or revokes). Revoked links are never forgotten before they expire: a
	// forgotten revocation would make the link work again.
	MaxLinks = 10000
	// MaxRevoked bounds the revoked links remembered, counted apart from MaxLinks.
	// When as many revoked links have not expired yet, Revoke refuses with
	// [ErrTooManyRevoked] rather than forget one.
	MaxRevoked = 10000
	// linkSync is how often the registry rereads storage, to see links and
	// revocations made by other instances sharing it, and prunes expired entries.
	linkSync = 30 * time.Second
	// linkFresh is how long a link's check serves before its entry is read from
	// storage again: a revocation made by another instance takes effect within it.
	linkFresh = 2 * time.Second
	// maxChecked bounds the links whose last check is remembered.
	maxChecked = 4096
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
	links    map[string]Link // revoked ones included
	revoked  int             // how many of links are revoked, expired ones included
	onRevoke map[string]func(context.Context, Link) error
	// maxRevoked is MaxRevoked; tests lower it.
	maxRevoked int

	checked recheck // when a link's entry was last read from storage

	stop chan struct{}
	done chan struct{}
}

// NewLinkRegistry returns a registry over storage under prefix. Call Load, then Start.
func NewLinkRegistry(storage certmagic.Storage, prefix string, logger *zap.Logger) *LinkRegistry {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &LinkRegistry{storage: storage, prefix: path.Join(prefix, "links"), log: logger, now: time.Now,
		links: make(map[string]Link), onRevoke: make(map[string]func(context.Context, Link) error), maxRevoked: MaxRevoked,
		checked: recheck{every: linkFresh, max: maxChecked}}
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
	l.Revoked = false // only Revoke revokes
	g.mu.Lock()
	old, known := g.links[l.ID]
	if known && old.Revoked {
		l.Revoked = true // the same link signed again stays revoked
	}
	if !known && len(g.links)-g.revoked >= MaxLinks {
		if victim := evictable(g.links); victim != "" {
			delete(g.links, victim)
			go g.delete(context.WithoutCancel(ctx), victim)
		}
	}
	g.links[l.ID] = l
	g.mu.Unlock()
	return g.save(ctx, l)
}

// evictable is the link to forget first: the one closest to expiry among those not
// revoked, or "" when every one is revoked.
func evictable(links map[string]Link) string {
	var victim Link
	for _, l := range links {
		if !l.Revoked && (victim.ID == "" || l.ExpiresAt.Before(victim.ExpiresAt)) {
			victim = l
		}
	}
	return victim.ID
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

// Forget drops a link that ended on its own before its expiry (a preview whose port
// was unexposed): it no longer shows. A revoked link is kept: forgetting its
// revocation could make it work again.
func (g *LinkRegistry) Forget(ctx context.Context, id string) {
	g.mu.Lock()
	l, ok := g.links[id]
	if !ok || l.Revoked {
		g.mu.Unlock()
		return
	}
	delete(g.links, id)
	g.mu.Unlock()
	g.delete(ctx, id)
}

// Revoked reports whether the link id was revoked, here or by another instance
// sharing the storage: a link not revoked in memory has its entry read from storage
// at most every linkFresh (storage failing, memory answers).
func (g *LinkRegistry) Revoked(id string) bool {
	g.mu.RLock()
	l, ok := g.links[id]
	g.mu.RUnlock()
	if ok && l.Revoked {
		return true
	}
	if !linkIDPattern.MatchString(id) || !g.checked.due(id, g.now()) {
		return false
	}
	stored, found := g.read(context.Background(), id)
	return found && stored.Revoked && g.learn(stored).Revoked
}

// read is link id's entry in storage, if there is a valid, unexpired one.
func (g *LinkRegistry) read(ctx context.Context, id string) (Link, bool) {
	data, err := g.storage.Load(ctx, path.Join(g.prefix, id))
	if err != nil {
		return Link{}, false
	}
	var l Link
	if json.Unmarshal(data, &l) != nil || l.ID != id || !g.now().Before(l.ExpiresAt) {
		return Link{}, false
	}
	return l, true
}

// learn takes in an entry another instance stored, keeping a revocation known here,
// and returns the link as known now.
func (g *LinkRegistry) learn(l Link) Link {
	g.mu.Lock()
	defer g.mu.Unlock()
	old, known := g.links[l.ID]
	if known && (old.Revoked || !l.Revoked) {
		return old
	}
	if l.Revoked {
		g.revoked++
	}
	g.links[l.ID] = l
	return l
}

// ErrNotFound is returned for an unknown or expired id.
var ErrNotFound = errors.New("not found")

// ErrTooManyRevoked is returned by Revoke when MaxRevoked revoked links have not
// expired yet.
var ErrTooManyRevoked = fmt.Errorf("%d revoked links have not expired yet, the most the console keeps; "+
	"revoke this one once some have expired, or rotate the API key and reload Caddy to stop every link at once", MaxRevoked)

// Revoke makes the link stop working. The entry stays (marked) until the link expires,
// which bounds the revocation list by the links' own lifetime; at most MaxRevoked
// unexpired revocations are kept, and Revoke refuses more rather than forget one.
func (g *LinkRegistry) Revoke(ctx context.Context, id string) (Link, error) {
	if !linkIDPattern.MatchString(id) {
		return Link{}, ErrNotFound
	}
	g.mu.RLock()
	_, known := g.links[id]
	g.mu.RUnlock()
	if !known {
		// Made by another instance since this one last read storage.
		if stored, found := g.read(ctx, id); found {
			g.learn(stored)
		}
	}
	g.mu.Lock()
	now := g.now()
	l, ok := g.links[id]
	if !ok || !now.Before(l.ExpiresAt) {
		g.mu.Unlock()
		return Link{}, ErrNotFound
	}
	if !l.Revoked {
		if g.revoked >= g.maxRevoked {
			g.pruneRevokedLocked(ctx, now)
		}
		if g.revoked >= g.maxRevoked {
			g.mu.Unlock()
			return Link{}, ErrTooManyRevoked
		}
		g.revoked++
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

// pruneRevokedLocked forgets the revocations of links that have expired: a link past
// its expiry is refused by its signature check anyway.
func (g *LinkRegistry) pruneRevokedLocked(ctx context.Context, now time.Time) {
	for id, l := range g.links {
		if l.Revoked && !now.Before(l.ExpiresAt) {
			delete(g.links, id)
			g.revoked--
			go g.delete(context.WithoutCancel(ctx), id)
		}
	}
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
	var resave []Link
	g.mu.Lock()
	for id, l := range g.links {
		f, stored := fresh[id]
		switch {
		case l.Revoked && now.Before(l.ExpiresAt) && (!stored || !f.Revoked):
			// A revocation here that storage does not show (yet, or any more) must
			// not be lost: that would make the link work again.
			fresh[id] = l
			if !stored {
				resave = append(resave, l)
			}
		case !stored && !l.CreatedAt.Before(now):
			fresh[id] = l // recorded while storage was being read
		}
	}
	revoked := 0
	for _, l := range fresh {
		if l.Revoked {
			revoked++
		}
	}
	// Only links that are not revoked are forgotten to keep within MaxLinks. The
	// revoked ones are kept whatever their number: Revoke keeps them within
	// MaxRevoked, and only instances sharing the storage that revoke at once can
	// exceed it, by little.
	for len(fresh)-revoked > MaxLinks {
		delete(fresh, evictable(fresh))
	}
	if revoked > g.maxRevoked {
		g.log.Warn("more revoked links than the console keeps; all are kept until they expire",
			zap.Int("revoked", revoked), zap.Int("max", g.maxRevoked))
	}
	g.links, g.revoked = fresh, revoked
	g.mu.Unlock()
	for _, l := range resave {
		if err := g.save(ctx, l); err != nil {
			g.log.Warn("storing a revocation again", zap.String("id", l.ID), zap.Error(err))
		}
	}
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
