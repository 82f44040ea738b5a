// Package preview serves live previews: a port inside the sandbox, exposed by the model,
// opened by the person at an origin of its own, `<label>.<previews domain>`, where the
// label is a random, unguessable capability (128 bits).
//
// [Registry] remembers which labels are live (port, owner, expiry); it is process-wide
// so that previews survive config reloads and so that the on-demand TLS permission
// module ([Permission], `tls.permission.mcp_sandbox`) can approve exactly the live
// labels. [Server] is the HTTP side: it answers requests for a label with Caddy's own
// reverse proxy, whose upstream connections are made by a dialer the caller provides
// (the root package relays them into the container through the Docker API).
package preview

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"strings"
	"sync"
	"time"
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
}

// Host is the preview's host name, without a port.
func (p Preview) Host() string { return p.Label + "." + p.Domain }

// Registry is the set of live previews. It is safe for concurrent use. Expired
// previews are dropped on the next change and never returned.
type Registry struct {
	mu      sync.Mutex
	byLabel map[string]*entry
	now     func() time.Time
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byLabel: make(map[string]*entry), now: time.Now}
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
// its expiry.
func (r *Registry) Expose(owner, domain string, port int, ttl time.Duration) Preview {
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
	e := &entry{Preview: Preview{Label: newLabel(), Domain: domain, Owner: owner, Port: port, Expires: now.Add(ttl)}}
	for r.byLabel[e.Label] != nil { // 128 random bits do not collide, but be exact
		e.Label = newLabel()
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	label := e.Label
	e.timer = time.AfterFunc(ttl, func() { r.expire(label) })
	r.byLabel[e.Label] = e
	return e.Preview
}

// expire ends the preview with label when its time is up (a renewal moved the
// timer, but the clock decides).
func (r *Registry) expire(label string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(r.now())
}

// Unexpose ends the previews of port of owner, under any domain. It reports whether
// one was live.
func (r *Registry) Unexpose(owner string, port int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(r.now())
	found := false
	for l, e := range r.byLabel {
		if e.Owner == owner && e.Port == port {
			r.end(l, e)
			found = true
		}
	}
	return found
}

// Lookup returns the live preview with label.
func (r *Registry) Lookup(label string) (Preview, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.byLabel[label]
	if e == nil || !r.now().Before(e.Expires) {
		return Preview{}, false
	}
	return e.Preview, true
}

// List returns the live previews of owner.
func (r *Registry) List(owner string) []Preview {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(r.now())
	var out []Preview
	for _, e := range r.byLabel {
		if e.Owner == owner {
			out = append(out, e.Preview)
		}
	}
	return out
}

// Live counts the live previews.
func (r *Registry) Live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(r.now())
	return len(r.byLabel)
}

// AllowsHost reports whether name (a host name as in a TLS ClientHello) is the host of
// a live preview.
func (r *Registry) AllowsHost(name string) bool {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	label, domain, ok := strings.Cut(name, ".")
	if !ok || !validLabel(label) {
		return false
	}
	p, ok := r.Lookup(label)
	return ok && p.Domain == domain
}

func (r *Registry) prune(now time.Time) {
	for l, e := range r.byLabel {
		if !now.Before(e.Expires) {
			r.end(l, e)
		}
	}
}

// end removes a preview and ends its open streams.
func (r *Registry) end(label string, e *entry) {
	delete(r.byLabel, label)
	e.timer.Stop()
	e.cancel()
}
