package preview

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const testKey = "preview-test-key-0123456789"

// countingGuesses is a Guesses that refuses an address after limit attempts.
type countingGuesses struct {
	mu     sync.Mutex
	limit  int
	n      map[string]int
	forgot []string
}

func (g *countingGuesses) Guess(addr string) (int, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n[addr] >= g.limit {
		return g.n[addr], time.Minute
	}
	g.n[addr]++
	return g.n[addr], 0
}

func (g *countingGuesses) Forget(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.n, addr)
	g.forgot = append(g.forgot, addr)
}

func authServer(t *testing.T, g Guesses) (*Server, Preview) {
	t.Helper()
	reg, _ := testRegistry()
	srv, err := New(Options{
		Domain: "localhost", Owner: "box", TTL: time.Hour, Registry: reg, Auth: true, APIKey: testKey, Guesses: g,
		Dial: func(context.Context, string, int) (net.Conn, error) { return nil, errors.New("no app in this test") },
	})
	if err != nil {
		t.Fatal(err)
	}
	reg.now = time.Now // cookies and previews on the real clock
	return srv, srv.Expose("box", 8000)
}

func signinPost(t *testing.T, srv *Server, p Preview, key string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "http://"+p.Host()+signinPath, strings.NewReader(url.Values{"key": {key}, "next": {"/"}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "192.0.2.7:50000"
	w := httptest.NewRecorder()
	if err := srv.ServeHTTP(w, r); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestSigninCountsInGuesses: every key typed on the preview sign-in counts in the
// Guesses the host passes, a refused address gets 429 without its key being compared,
// and the right key forgets the address.
func TestSigninCountsInGuesses(t *testing.T) {
	g := &countingGuesses{limit: 3, n: map[string]int{}}
	srv, p := authServer(t, g)
	if w := signinPost(t, srv, p, "wrong"); w.Code != http.StatusUnauthorized {
		t.Fatalf("wrong key: %d", w.Code)
	}
	if w := signinPost(t, srv, p, testKey); w.Code != http.StatusSeeOther || len(w.Result().Cookies()) != 1 {
		t.Fatalf("right key: %d", w.Code)
	}
	if len(g.forgot) != 1 || g.forgot[0] != "192.0.2.7" || g.n["192.0.2.7"] != 0 {
		t.Fatalf("the right key did not forget the address: %+v", g)
	}
	// Attempts made elsewhere (bearer tokens, the OAuth sign-in) count here too.
	g.n["192.0.2.7"] = 3
	w := signinPost(t, srv, p, testKey)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || len(w.Result().Cookies()) != 0 {
		t.Fatalf("the right key from a refused address: %d %v, want 429 and no cookie", w.Code, w.Header())
	}
	if _, err := New(Options{Domain: "localhost", TTL: time.Hour, Auth: true, APIKey: testKey,
		Dial: func(context.Context, string, int) (net.Conn, error) { return nil, nil }}); err == nil {
		t.Fatal("preview_auth without a Guesses was accepted")
	}
}

// TestCookieExpiryStrict: the sign-in cookie's expiry is read only as the server writes
// it; the MAC covers the number, so "+exp" or "0exp" used to pass as the same cookie.
func TestCookieExpiryStrict(t *testing.T) {
	srv, p := authServer(t, &countingGuesses{limit: 10, n: map[string]int{}})
	exp := time.Now().Add(time.Hour).Unix()
	mac := srv.cookieMAC(testKey, p.Label, exp)
	e := strconv.FormatInt(exp, 10)
	for value, want := range map[string]bool{
		e + "." + mac:         true,
		"+" + e + "." + mac:   false,
		"0" + e + "." + mac:   false,
		"000" + e + "." + mac: false,
		e + "." + mac + "x":   false,
		strconv.FormatInt(exp-7200, 10) + "." + srv.cookieMAC(testKey, p.Label, exp-7200): false, // expired
	} {
		r := httptest.NewRequest(http.MethodGet, "http://"+p.Host()+"/", nil)
		r.AddCookie(&http.Cookie{Name: cookieName, Value: value})
		if got := srv.authorized(httptest.NewRecorder(), r, p); got != want {
			t.Errorf("cookie %q: authorized %v, want %v", value, got, want)
		}
	}
}
