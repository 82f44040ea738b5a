package oauth

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestGuessesShared: the server counts in the Guesses it is given, so attempts made
// elsewhere with the same value (the host's preview sign-in) block the key here, and a
// server made anew with the same value (a config reload) still knows them.
func TestGuessesShared(t *testing.T) {
	clock := newTestClock()
	shared := NewGuessLimiter(clock.Now)
	e := newTestEnv(t, func(o *Options) { o.APIKeyBearer = true; o.Guesses = shared; o.Now = clock.Now })
	e.clock = clock
	for range signinSlowAfter {
		if got := e.callMCP("guess-" + randomToken()); got != http.StatusUnauthorized {
			t.Fatalf("guess: %d, want 401", got)
		}
	}
	e.restart(e.opts) // what a reload does: a new Server, the same Guesses
	for i := signinSlowAfter; i < signinBlockAfter; i++ {
		if n, retry := shared.Guess("127.0.0.1"); n != i+1 || retry != 0 {
			t.Fatalf("attempt %d elsewhere: n=%d retry=%v; want the server's guesses counted in the same place", i+1, n, retry)
		}
	}
	if got := e.callMCP(testKey); got != http.StatusTooManyRequests {
		t.Fatalf("the key after ten attempts, five of them elsewhere: %d, want 429", got)
	}
	if d := shared.Blocked("127.0.0.1"); d <= 0 || d > signinWindow {
		t.Fatalf("Blocked = %v", d)
	}
	clock.Advance(signinWindow)
	if got := e.callMCP(testKey); got != http.StatusOK {
		t.Fatalf("the key after the window: %d", got)
	}
	// Forget (the preview sign-in's right key) clears the address everywhere.
	for range 3 {
		shared.Guess("127.0.0.1")
	}
	shared.Forget("127.0.0.1")
	if n, _ := shared.Guess("127.0.0.1"); n != 1 {
		t.Fatalf("after Forget the count goes on at %d, want 1", n)
	}
}

// TestBlockedAddressWaits: a blocked address may try one new key after 10 s, then
// after a wait that doubles with each wrong key up to two minutes; a known wrong key
// is answered at once and never counted again, and the right key succeeds at the
// first try it gets.
func TestBlockedAddressWaits(t *testing.T) {
	clock := newTestClock()
	g := NewGuessLimiter(clock.Now)
	right := func() bool { return false }
	for i := range signinBlockAfter {
		if ok, n, retry := g.Try("192.0.2.1", fmt.Sprint("wrong ", i), right); ok || n != i+1 || retry != 0 {
			t.Fatalf("wrong key %d: %v %d %v", i+1, ok, n, retry)
		}
	}
	if ok, n, retry := g.Try("192.0.2.1", "wrong 0", right); ok || n != signinBlockAfter || retry != 0 {
		t.Fatalf("a known wrong key from the blocked address: %v %d %v, want an answer at once, not counted", ok, n, retry)
	}
	called := false
	if _, _, retry := g.Try("192.0.2.1", "the key", func() bool { called = true; return true }); retry != blockedFirstWait || called {
		t.Fatalf("a new key right after the block: retry %v, looked at %v", retry, called)
	}
	if _, _, retry := g.Try("198.51.100.1", "x", right); retry != 0 {
		t.Fatal("another address is blocked")
	}
	var waits []time.Duration
	for range 6 {
		clock.Advance(g.Blocked("192.0.2.1"))
		g.Try("192.0.2.1", "new "+randomToken(), right)
		waits = append(waits, g.Blocked("192.0.2.1"))
	}
	if fmt.Sprint(waits) != "[20s 40s 1m20s 2m0s 2m0s 2m0s]" {
		t.Fatalf("waits between new keys: %v", waits)
	}
	clock.Advance(g.Blocked("192.0.2.1"))
	if ok, _, retry := g.Try("192.0.2.1", "the key", func() bool { return true }); !ok || retry != 0 {
		t.Fatalf("the right key once the wait is over: %v %v", ok, retry)
	}
	clock.Advance(signinWindow)
	if d := g.Blocked("192.0.2.1"); d != 0 {
		t.Fatalf("blocked %v after the window", d)
	}
}

// TestGuessLimiterIPv6: the addresses of one /64 count together, written any way.
func TestGuessLimiterIPv6(t *testing.T) {
	g := NewGuessLimiter(nil)
	for i := range signinBlockAfter {
		addr := []string{"2001:db8::1", "2001:db8::2:3", "2001:DB8:0:0:ffff::1"}[i%3]
		if _, retry := g.Guess(addr); retry != 0 {
			t.Fatalf("attempt %d refused", i+1)
		}
	}
	if g.Blocked("2001:db8::99") == 0 {
		t.Fatal("another address of the /64 is not blocked")
	}
	if g.Blocked("2001:db8:0:1::1") != 0 || g.Blocked("192.0.2.1") != 0 {
		t.Fatal("an address outside the /64 is blocked")
	}
	g.Forget("2001:db8::abcd")
	if g.Blocked("2001:db8::1") != 0 {
		t.Fatal("Forget did not clear the /64")
	}
}

// TestStaleTokensAreNoGuesses: access tokens this server issued that expired (and were
// pruned) or were revoked are refused but never count as guesses at the key, however
// often a client retries with them; tokens it never issued do, including ones shaped
// like its own with a wrong mark or another key's mark.
func TestStaleTokensAreNoGuesses(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.APIKeyBearer = true })
	reg := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})
	token := func() string {
		_, tok, _ := e.tokenCall(e.newCode(reg.ClientID, httpsRedirect).form())
		if e.callMCP(tok.AccessToken) != http.StatusOK {
			t.Fatal("a fresh token does not work")
		}
		if len(tok.AccessToken) != accessTokenLen || !e.server().issuedHere(tok.AccessToken) {
			t.Fatalf("token %d characters, marked %v", len(tok.AccessToken), e.server().issuedHere(tok.AccessToken))
		}
		return tok.AccessToken
	}
	revoked := token()
	if resp, _ := e.postForm("/revoke", url.Values{"token": {revoked}, "client_id": {reg.ClientID}}); resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	expired := token()
	e.clock.Advance(DefaultAccessTokenTTL + time.Minute)
	if err := e.server().Prune(e.ctx()); err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"revoked": revoked, "expired and pruned": expired} {
		for i := range 2 * signinBlockAfter {
			if got := e.callMCP(tok); got != http.StatusUnauthorized {
				t.Fatalf("%s token, try %d: %d, want 401 (it must not count as a guess)", name, i+1, got)
			}
		}
	}
	if got := e.callMCP(testKey); got != http.StatusOK {
		t.Fatalf("the key after stale tokens: %d, want 200", got)
	}

	// Never issued: a random string, a forged mark, and the mark of another key.
	b, _ := base64.RawURLEncoding.DecodeString(expired)
	b[len(b)-1] ^= 1
	forged := base64.RawURLEncoding.EncodeToString(b)
	other, err := New(Options{APIKey: testKey + " other", Storage: e.storage})
	if err != nil {
		t.Fatal(err)
	}
	foreign := other.newAccessToken()
	guesses := []string{"guess-" + randomToken(), forged, foreign, strings.Repeat("A", accessTokenLen)}
	for len(guesses) < signinBlockAfter {
		guesses = append(guesses, "guess-"+randomToken())
	}
	for i, g := range guesses {
		if got := e.callMCP(g); got != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i+1, got)
		}
	}
	b[len(b)-1] ^= 2
	if got := e.callMCP(base64.RawURLEncoding.EncodeToString(b)); got != http.StatusTooManyRequests {
		t.Fatalf("another forged mark after ten guesses: %d, want 429", got)
	}
}
