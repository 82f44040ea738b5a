// Package preview serves live previews: a port inside the sandbox, exposed by the model,
// opened by the person at an origin of its own, `<label>.<previews domain>`, where the
// label is a random, unguessable capability (128 bits).
//
// [Registry] remembers which labels are live (port, owner, expiry); it is process-wide
// so that previews survive config reloads and so that the on-demand TLS permission
// module ([Permission], `tls.permission.mcp_sandbox`) can approve exactly the live
// labels. Given Caddy's storage ([Registry.UseStorage]), it keeps them there too, so
// that every Caddy instance sharing the storage serves them (see storage.go). [Server]
// is the HTTP side: it answers requests for a label with Caddy's own reverse proxy,
// whose upstream connections are made by a dialer the caller provides (the root
// package relays them into the container through the Docker API).
package preview

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// labelLen is the length of a label: 16 random bytes in unpadded base32, 26 characters.
const labelLen = 26

var labelEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newLabel returns a fresh random label: 128 bits, lowercase letters and digits 2-7,
// a valid DNS label.
func newLabel() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return labelEncoding.EncodeToString(b[:])
}

// validLabel reports whether s has the shape of a label we make.
func validLabel(s string) bool {
	if len(s) != labelLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// Preview is one live preview.
type Preview struct {
	Label   string    // the host name's first label
	Domain  string    // the previews domain it lives under
	Owner   string    // which sandbox it belongs to
	Port    int       // the port inside the sandbox
	Expires time.Time // after this it is gone

	ctx context.Context // done when the preview ends (unexposed or expired)
}

// Done is closed when the preview ends, so that its open streams (WebSockets, SSE)
// end with it.
func (p Preview) Done() <-chan struct{} {
	if p.ctx == nil {
		return nil
	}
	return p.ctx.Done()
}

// entry is a live preview and what ends it.
type entry struct {
	Preview
	cancel context.CancelFunc
	timer  *time.Timer
	// stored is when storage was last known to hold the preview; zero when it is this
	// process's own (no storage, or storage failed when it was made).
	stored time.Time
}

// Host is the preview's host name, without a port.
func (p Preview) Host() string { return p.Label + "." + p.Domain }

// Registry is the set of live previews. It is safe for concurrent use. Expired
// previews are dropped on the next change and never returned.
type Registry struct {
	mu      sync.Mutex
	byLabel map[string]*entry
	now     func() time.Time
	st      Storage     // nil: previews live in this process only
	recheck *time.Timer // armed while previews kept in storage are held
	// ended are labels of previews that ended here: labels are never made again, so
	// a request for one answers 404 without asking storage.
	ended map[string]bool

	log     atomic.Pointer[zap.Logger]
	failing atomic.Bool // the last storage operation failed, and that was logged

	// The latest listing of the labels in storage, shared by the lookups of labels
	// this process does not hold and by the re-check of those it holds.
	lmu     sync.Mutex
	listed  time.Time       // when it started; zero before the first
	labels  map[string]bool // what it found
	listErr error           // or how it failed
	listing chan struct{}   // closed when the listing under way ends; nil when none

	// Sweeps of the expired records in storage (see sweep).
	swept    time.Time            // when the latest ended; first, when storage was first used
	sweeping bool                 // one is under way
	seen     map[string]time.Time // when to read again the records of labels read
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	r := &Registry{byLabel: make(map[string]*entry), ended: make(map[string]bool), now: time.Now}
	r.log.Store(zap.NewNop())
	return r
}

// shared is the process-wide registry: it outlives config reloads (a reload provisions
// the new handlers before the old ones are cleaned up, and both see the same labels),
// and the TLS permission module, provisioned by the tls app independently of any
// handler, consults the same one.
var shared = NewRegistry()

// Shared returns the process-wide registry.
func Shared() *Registry { return shared }

// Expose makes port of owner live under domain until now+ttl. Exposing a port that is
// already live keeps its label (a tab the person has open goes on working) and renews
// its expiry. With storage, the preview is kept there, and a port made live through
// another instance keeps its label too; when storage fails, the preview is this
// process's own.
func (r *Registry) Expose(owner, domain string, port int, ttl time.Duration) Preview {
	if st := r.storage(); st != nil {
		ctx, cancel := context.WithTimeout(context.Background(), storageTimeout)
		defer cancel()
		p, err := r.exposeStored(ctx, st, owner, domain, port, ttl)
		if err == nil {
			r.succeeded()
			return p
		}
		r.failed("keeping a preview in storage; it opens on this instance only", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.prune(now)
	for _, e := range r.byLabel {
		if e.Owner == owner && e.Domain == domain && e.Port == port {
			e.Expires = now.Add(ttl)
			e.timer.Reset(ttl)
			return e.Preview
		}
	}
	label := newLabel()
	for r.byLabel[label] != nil { // 128 random bits do not collide, but be exact
		label = newLabel()
	}
	return r.holdLocked(label, record{Owner: owner, Domain: domain, Port: port, Expires: now.Add(ttl)}, time.Time{})
}

// holdLocked puts the preview label, as rec says, in the process's view, or updates
// the one there (its expiry, and when storage last held it); the caller holds mu.
func (r *Registry) holdLocked(label string, rec record, stored time.Time) Preview {
	ttl := rec.Expires.Sub(r.now())
	if e := r.byLabel[label]; e != nil {
		e.Expires = rec.Expires
		e.timer.Reset(ttl)
		if stored.After(e.stored) {
			e.stored = stored
			r.armRecheckLocked()
		}
		return e.Preview
	}
	e := &entry{Preview: Preview{Label: label, Domain: rec.Domain, Owner: rec.Owner, Port: rec.Port, Expires: rec.Expires}, stored: stored}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.timer = time.AfterFunc(ttl, func() { r.expire(label) })
	r.byLabel[label] = e
	if !stored.IsZero() {
		r.armRecheckLocked()
	}
	return e.Preview
}

// expire ends the preview with label when its time is up. A renewal moved the timer,
// but the clock decides; and a preview kept in storage may have been renewed through
// another instance, which storage tells.
func (r *Registry) expire(label string) {
	r.mu.Lock()
	e, st := r.byLabel[label], r.st
	now := r.now()
	if e == nil || now.Before(e.Expires) {
		r.mu.Unlock()
		return
	}
	if st == nil || e.stored.IsZero() {
		r.prune(now)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), storageTimeout)
	defer cancel()
	rec, err := loadRecord(ctx, st, label)
	if err != nil && !isNotExist(err) {
		r.failed("reading a preview from storage", err)
	}
	r.mu.Lock()
	now = r.now()
	if err == nil && now.Before(rec.Expires) && r.byLabel[label] == e {
		r.holdLocked(label, rec, now)
		r.mu.Unlock()
		return
	}
	if r.byLabel[label] == e && !now.Before(e.Expires) {
		r.end(label, e)
	}
	if err != nil && !isNotExist(err) {
		delete(r.ended, label) // storage, once it answers, may know it renewed
	}
	r.mu.Unlock()
	if err == nil {
		// Gone for good: take its record and the owner's note of it out of storage.
		if err := r.removeExpired(ctx, st, rec.Owner, label); err != nil {
			r.failed("removing an expired preview from storage", err)
		}
	}
}

// Unexpose ends the previews of port of owner, under any domain, here and (with
// storage) on every instance. It reports whether one was live.
func (r *Registry) Unexpose(owner string, port int) bool {
	found := false
	if st := r.storage(); st != nil {
		ctx, cancel := context.WithTimeout(context.Background(), storageTimeout)
		defer cancel()
		ok, err := r.removeStored(ctx, st, owner, func(p indexed) bool { return p.Port == port })
		if err != nil {
			r.failed("ending a preview in storage; it ends on this instance only", err)
		} else {
			r.succeeded()
		}
		found = ok
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(r.now())
	for l, e := range r.byLabel {
		if e.Owner == owner && e.Port == port {
			r.end(l, e)
			found = true
		}
	}
	return found
}

// Lookup returns the live preview with label. A label this process does not hold is
// looked for in storage, when there is one: it waits for a listing of the labels
// there that started after it came (listings start at most once per listEvery,
// however many lookups wait), and only a listed label's preview is read.
func (r *Registry) Lookup(ctx context.Context, label string) (Preview, bool) {
	r.mu.Lock()
	e, st, ended := r.byLabel[label], r.st, r.ended[label]
	if e != nil && r.now().Before(e.Expires) {
		p := e.Preview
		r.mu.Unlock()
		return p, true
	}
	r.mu.Unlock()
	if st == nil || ended || !validLabel(label) {
		return Preview{}, false
	}
	return r.lookupStored(ctx, st, label)
}

// List returns the live previews of owner: with storage, those made through every
// instance.
func (r *Registry) List(owner string) []Preview {
	r.mu.Lock()
	r.prune(r.now())
	var local []Preview
	for _, e := range r.byLabel {
		if e.Owner == owner {
			local = append(local, e.Preview)
		}
	}
	st := r.st
	r.mu.Unlock()
	if st == nil {
		return local
	}
	ctx, cancel := context.WithTimeout(context.Background(), storageTimeout)
	defer cancel()
	idx, err := loadIndex(ctx, st, ownerKey(owner))
	if err != nil {
		r.failed("reading previews from storage", err)
		return local
	}
	r.succeeded()
	var out []Preview
	in := map[string]bool{}
	now := r.now()
	for _, p := range idx.Previews {
		if now.Before(p.Expires) {
			in[p.Label] = true
			out = append(out, Preview{Label: p.Label, Domain: p.Domain, Owner: owner, Port: p.Port, Expires: p.Expires})
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range out { // the ones held here end with this process's view of them
		if e := r.byLabel[p.Label]; e != nil {
			out[i].ctx = e.ctx
		}
	}
	for _, p := range local { // made while storage failed
		if e := r.byLabel[p.Label]; e != nil && e.stored.IsZero() && !in[p.Label] {
			out = append(out, p)
		}
	}
	return out
}

// Live counts the live previews this process holds: those made through it, and,
// with storage, those made through other instances that it has served, each checked
// against storage every couple of seconds. It reads no storage.
func (r *Registry) Live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(r.now())
	return len(r.byLabel)
}

// AllowsHost reports whether name (a host name as in a TLS ClientHello) is the host of
// a live preview.
func (r *Registry) AllowsHost(ctx context.Context, name string) bool {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	label, domain, ok := strings.Cut(name, ".")
	if !ok || !validLabel(label) {
		return false
	}
	p, ok := r.Lookup(ctx, label)
	return ok && p.Domain == domain
}

// prune ends the previews whose time is up, but those kept in storage: another
// instance may have renewed one, and expire reads storage before it ends it. The
// caller holds mu.
func (r *Registry) prune(now time.Time) {
	for l, e := range r.byLabel {
		if !now.Before(e.Expires) && (e.stored.IsZero() || r.st == nil) {
			r.end(l, e)
		}
	}
}

// endedMax bounds the labels remembered as ended; past it they are forgotten, and
// asked for, storage answers.
const endedMax = 4096

// end removes a preview and ends its open streams.
func (r *Registry) end(label string, e *entry) {
	delete(r.byLabel, label)
	if len(r.ended) >= endedMax {
		clear(r.ended)
	}
	r.ended[label] = true
	e.timer.Stop()
	e.cancel()
}
