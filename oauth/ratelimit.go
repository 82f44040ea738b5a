package oauth

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Sign-in attempts (see [Guesses]): every attempt counts as a failure until the key
// proves right, so parallel guesses cannot slip past the count. After signinSlowAfter
// failures within signinWindow each further wrong key is answered only after a growing
// delay, and after signinBlockAfter the address is refused (429) until its oldest failure
// leaves the window.
const (
	signinWindow     = 15 * time.Minute
	signinSlowAfter  = 5
	signinBlockAfter = 10
	signinMaxDelay   = 5 * time.Second

	// Registrations per address, so one address cannot use up the global client cap.
	registerWindow       = 10 * time.Minute
	registerMaxPerWindow = 30

	// maxLimiterEntries bounds the memory of each limiter.
	maxLimiterEntries = 10000
)

// Guesses counts attempts at the API key per client address, wherever the key is typed
// or sent: the sign-in page, bearer tokens on the protected resource (see
// [Server.Authenticate]), [Server.CheckAPIKey], and whatever else the host wires to the
// same value (the preview sign-in). Every attempt counts until the key proves right, so
// parallel guesses cannot slip past the count. A host that runs several servers for one
// key, or replaces servers on a configuration reload, passes them one Guesses so that a
// guess counts the same wherever it is made and is not forgotten on reload.
type Guesses interface {
	// Guess counts one attempt from addr and returns the attempts in the window, this
	// one included. When addr is refused it counts nothing and returns how long until
	// addr may try again.
	Guess(addr string) (n int, retryAfter time.Duration)
	// Blocked returns how long addr is still refused, 0 when it may try.
	Blocked(addr string) time.Duration
	// Forget clears addr once it proved it knows the key.
	Forget(addr string)
}

// GuessLimiter is the in-memory [Guesses] a [Server] uses when Options.Guesses is nil.
// After ten attempts within 15 minutes an address is refused until its oldest attempt
// leaves the window. IPv6 addresses count by their /64, so one host cannot rotate
// through its own subnet, and at most 10,000 addresses are remembered.
type GuessLimiter struct{ l *limiter }

// NewGuessLimiter returns an empty GuessLimiter; now is the clock (nil: time.Now).
func NewGuessLimiter(now func() time.Time) *GuessLimiter {
	if now == nil {
		now = time.Now
	}
	return &GuessLimiter{l: newLimiter(signinWindow, signinBlockAfter, maxLimiterEntries, now)}
}

// Guess implements [Guesses].
func (g *GuessLimiter) Guess(addr string) (int, time.Duration) { return g.l.record(limiterKey(addr)) }

// Blocked implements [Guesses].
func (g *GuessLimiter) Blocked(addr string) time.Duration { return g.l.blocked(limiterKey(addr)) }

// Forget implements [Guesses].
func (g *GuessLimiter) Forget(addr string) { g.l.reset(limiterKey(addr)) }

// limiter counts events per address in a sliding window, in memory. Several instances
// each count on their own, which only multiplies the allowance by their number.
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

// blocked returns how long until key may try again, or 0 when it may now. It records
// nothing.
func (l *limiter) blocked(key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	events := l.live(key, now)
	if len(events) < l.limit {
		return 0
	}
	return events[0].Add(l.window).Sub(now)
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
	var oldestKey string
	var oldest time.Time
	for k, events := range l.entries {
		last := events[len(events)-1]
		if now.Sub(last) >= l.window {
			delete(l.entries, k)
			continue
		}
		if oldestKey == "" || last.Before(oldest) {
			oldestKey, oldest = k, last
		}
	}
	if len(l.entries) >= l.max && oldestKey != "" {
		delete(l.entries, oldestKey)
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
