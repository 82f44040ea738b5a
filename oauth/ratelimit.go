package oauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Sign-in attempts (see [Guesses]) count distinct wrong keys per address: a client
// retrying one wrong key (a typo, a key the operator replaced) makes one guess however
// often it retries, and guessing takes a new key each time. After signinSlowAfter
// distinct wrong keys within signinWindow each further one is answered only after a
// growing delay, and after signinBlockAfter the address is blocked until its oldest
// wrong key leaves the window. A blocked address is not shut out: a key it has not
// tried yet is still looked at once per blockedWait, which starts at blockedFirstWait
// and doubles with each wrong key looked at, up to blockedMaxWait. A valid key behind
// the address of a guesser therefore waits a few seconds to two minutes, while the
// guesser gets about one key in every two minutes: fewer than the ten per quarter hour
// an unblocked address has.
const (
	signinWindow     = 15 * time.Minute
	signinSlowAfter  = 5
	signinBlockAfter = 10
	signinMaxDelay   = 5 * time.Second
	blockedFirstWait = 10 * time.Second
	blockedMaxWait   = 2 * time.Minute

	// Registrations per address, so one address cannot use up the global client cap.
	registerWindow       = 10 * time.Minute
	registerMaxPerWindow = 30

	// maxLimiterEntries bounds the memory of each limiter.
	maxLimiterEntries = 10000
)

// Guesses counts attempts at the keys per client address, wherever a key is typed or
// sent: the sign-in page, bearer tokens on the protected resource (see
// [Server.Authenticate]), [Server.CheckAPIKey], and whatever else the host wires to the
// same value (the preview sign-in). A host that runs several servers for one key, or
// replaces servers on a configuration reload, passes them one Guesses so that a guess
// counts the same wherever it is made and is not forgotten on reload.
type Guesses interface {
	// Try looks at key from addr with valid, unless addr is blocked and may not try a
	// new key yet (retryAfter > 0; valid is not called). A wrong key counts once per
	// address however often it is tried; failures is the number of distinct wrong
	// keys in the window, this one included. valid must be quick: it may run under a
	// lock.
	Try(addr, key string, valid func() bool) (ok bool, failures int, retryAfter time.Duration)
	// Guess counts one attempt of an unseen key from addr, for a page that looks at
	// the key itself, and returns the attempts in the window, this one included. When
	// addr is blocked and may not try yet it counts nothing and returns how long until
	// it may.
	Guess(addr string) (n int, retryAfter time.Duration)
	// Blocked returns how long until addr may try a new key, 0 when it may now.
	Blocked(addr string) time.Duration
	// Forget clears addr once it proved it knows the key.
	Forget(addr string)
}

// GuessLimiter is the in-memory [Guesses] a [Server] uses when Options.Guesses is nil.
// It keeps, per address, the time and a fingerprint of each distinct wrong key in the
// window: an HMAC under a secret of this process only, never the key. IPv6 addresses
// count by their /64, so one host cannot rotate through its own subnet, and at most
// 10,000 addresses are remembered.
type GuessLimiter struct {
	mu      sync.Mutex
	now     func() time.Time
	secret  []byte
	max     int
	entries map[string]*addrGuesses
	anon    uint64 // numbers the attempts Guess counts, each a key of its own
}

// addrGuesses is what one address tried.
type addrGuesses struct {
	wrong []wrongKey // oldest first
	// While blocked: when the address may next try a new key, and the wait after that.
	next time.Time
	wait time.Duration
}

type wrongKey struct {
	at time.Time
	fp [16]byte
}

// NewGuessLimiter returns an empty GuessLimiter; now is the clock (nil: time.Now).
func NewGuessLimiter(now func() time.Time) *GuessLimiter {
	if now == nil {
		now = time.Now
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	return &GuessLimiter{now: now, secret: secret, max: maxLimiterEntries, entries: make(map[string]*addrGuesses)}
}

func (g *GuessLimiter) fingerprint(key string) (fp [16]byte) {
	m := hmac.New(sha256.New, g.secret)
	m.Write([]byte(key))
	copy(fp[:], m.Sum(nil))
	return fp
}

// Try implements [Guesses].
func (g *GuessLimiter) Try(addr, key string, valid func() bool) (bool, int, time.Duration) {
	fp := g.fingerprint(key)
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	a := g.live(limiterKey(addr), now)
	known := a != nil && a.tried(fp)
	if !known {
		if retry := a.take(now); retry > 0 {
			return false, len(a.wrong), retry
		}
	}
	if valid() {
		return true, 0, 0
	}
	if known {
		return false, len(a.wrong), 0
	}
	a = g.add(limiterKey(addr), a, fp, now)
	return false, len(a.wrong), 0
}

// take lets a blocked address try one new key once its wait is over, and holds the
// next try back for the same wait until the key is known wrong (see add); it returns
// how long the address must still wait, 0 when it may try.
func (a *addrGuesses) take(now time.Time) time.Duration {
	if a == nil || len(a.wrong) < signinBlockAfter {
		return 0
	}
	if now.Before(a.next) {
		return a.next.Sub(now)
	}
	a.next = now.Add(a.wait)
	return 0
}

// Guess implements [Guesses].
func (g *GuessLimiter) Guess(addr string) (int, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	a := g.live(limiterKey(addr), now)
	if retry := a.take(now); retry > 0 {
		return len(a.wrong), retry
	}
	g.anon++
	var fp [16]byte
	// Eight zero bytes, then a count: no HMAC of a key looks like that but once in 2^64.
	binary.BigEndian.PutUint64(fp[8:], g.anon)
	a = g.add(limiterKey(addr), a, fp, now)
	return len(a.wrong), 0
}

// Blocked implements [Guesses].
func (g *GuessLimiter) Blocked(addr string) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	a := g.live(limiterKey(addr), now)
	if a == nil || len(a.wrong) < signinBlockAfter || !now.Before(a.next) {
		return 0
	}
	return a.next.Sub(now)
}

// Forget implements [Guesses].
func (g *GuessLimiter) Forget(addr string) {
	g.mu.Lock()
	delete(g.entries, limiterKey(addr))
	g.mu.Unlock()
}

// tried reports whether the address tried the key of fingerprint fp in the window.
func (a *addrGuesses) tried(fp [16]byte) bool {
	for _, w := range a.wrong {
		if w.fp == fp {
			return true
		}
	}
	return false
}

// live returns the address's entry with wrong keys that left the window dropped, nil
// when none is left; the caller holds mu.
func (g *GuessLimiter) live(key string, now time.Time) *addrGuesses {
	a := g.entries[key]
	if a == nil {
		return nil
	}
	i := 0
	for i < len(a.wrong) && now.Sub(a.wrong[i].at) >= signinWindow {
		i++
	}
	if i == len(a.wrong) {
		delete(g.entries, key)
		return nil
	}
	a.wrong = a.wrong[i:]
	if len(a.wrong) < signinBlockAfter {
		a.next, a.wait = time.Time{}, 0
	}
	return a
}

// add records a wrong key; the caller holds mu. A blocked address keeps at most twice
// the limit: enough to stay blocked while it goes on guessing.
func (g *GuessLimiter) add(key string, a *addrGuesses, fp [16]byte, now time.Time) *addrGuesses {
	if a == nil {
		if len(g.entries) >= g.max {
			g.evict(now)
		}
		a = &addrGuesses{}
		g.entries[key] = a
	}
	a.wrong = append(a.wrong, wrongKey{at: now, fp: fp})
	if len(a.wrong) > 2*signinBlockAfter {
		a.wrong = slices.Delete(a.wrong, 0, len(a.wrong)-2*signinBlockAfter)
	}
	if len(a.wrong) >= signinBlockAfter {
		// Blocked from now: the first wait, doubled by each wrong key tried since.
		a.wait = min(max(2*a.wait, blockedFirstWait), blockedMaxWait)
		a.next = now.Add(a.wait)
	}
	return a
}

// evict makes room: first every address whose wrong keys all left the window, else
// the one whose newest wrong key is oldest; the caller holds mu.
func (g *GuessLimiter) evict(now time.Time) {
	evictStale(g.entries, func(a *addrGuesses) time.Time { return a.wrong[len(a.wrong)-1].at }, now, signinWindow, g.max)
}

// limiter counts events per address in a sliding window, in memory (registrations).
// Several instances each count on their own, which only multiplies the allowance by
// their number.
type limiter struct {
	mu      sync.Mutex
	window  time.Duration
	limit   int
	max     int
	now     func() time.Time
	entries map[string][]time.Time // oldest first, at most limit long
}

func newLimiter(window time.Duration, limit, maxEntries int, now func() time.Time) *limiter {
	return &limiter{window: window, limit: limit, max: maxEntries, now: now, entries: make(map[string][]time.Time)}
}

// record counts one event for key unless the key is already at its limit. It returns the
// number of events in the window including this one, or, when refused, how long until
// the key may try again.
func (l *limiter) record(key string) (count int, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	events := l.live(key, now)
	if len(events) >= l.limit {
		return len(events), events[0].Add(l.window).Sub(now)
	}
	if _, ok := l.entries[key]; !ok && len(l.entries) >= l.max {
		l.evict(now)
	}
	events = append(events, now)
	l.entries[key] = events
	return len(events), 0
}

// reset forgets the key, after it proved itself.
func (l *limiter) reset(key string) {
	l.mu.Lock()
	delete(l.entries, key)
	l.mu.Unlock()
}

// live drops the key's events that left the window.
func (l *limiter) live(key string, now time.Time) []time.Time {
	events := l.entries[key]
	i := 0
	for i < len(events) && now.Sub(events[i]) >= l.window {
		i++
	}
	if i == len(events) {
		delete(l.entries, key)
		return nil
	}
	events = events[i:]
	l.entries[key] = events
	return events
}

// evict makes room: first every key whose events all expired, else the key whose latest
// event is oldest.
func (l *limiter) evict(now time.Time) {
	evictStale(l.entries, func(events []time.Time) time.Time { return events[len(events)-1] }, now, l.window, l.max)
}

// evictStale drops the entries whose last event is a window old, and then, if the map
// is still full, the one whose last event is the oldest.
func evictStale[V any](entries map[string]V, last func(V) time.Time, now time.Time, window time.Duration, max int) {
	var oldestKey string
	var oldest time.Time
	for k, v := range entries {
		t := last(v)
		if now.Sub(t) >= window {
			delete(entries, k)
			continue
		}
		if oldestKey == "" || t.Before(oldest) {
			oldestKey, oldest = k, t
		}
	}
	if len(entries) >= max && oldestKey != "" {
		delete(entries, oldestKey)
	}
}

// signinDelay is how long to wait before answering the n-th wrong key in the window.
func signinDelay(n int) time.Duration {
	if n <= signinSlowAfter {
		return 0
	}
	d := time.Duration(n-signinSlowAfter) * time.Second
	return min(d, signinMaxDelay)
}

// sleepContext waits d or until the request is gone.
func sleepContext(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

// RemoteHost is the default Options.ClientIP: the host of the peer address.
func RemoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// clientKey is what the limiters count against: the client address, with IPv6
// addresses reduced to their /64 so one host cannot rotate through its own subnet.
func (s *Server) clientKey(r *http.Request) string {
	return limiterKey(s.opts.ClientIP(r))
}

func limiterKey(host string) string {
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	addr = addr.Unmap()
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}
