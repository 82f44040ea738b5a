package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestSignOutAcrossInstances: two consoles over one storage directory, as two Caddy
// instances sharing it, and a third made afterwards (a restart): a session signed in
// on A works on B; signed out on A, B refuses it within signOutFresh and the restarted
// one at once; a stored sign-out of an expired session is swept at the next sign-out.
func TestSignOutAcrossInstances(t *testing.T) {
	st := fileStorage(t)
	now := time.Now()
	clock := func() time.Time { return now }
	instance := func() *Console {
		c := newTestConsole(t, fullLog(t))
		c.opts.Now = clock
		c.sessions = newSessions(c.opts.SessionKey, clock, st, "console/fp")
		return c
	}
	a, b := instance(), instance()
	ck := signedIn(t, a)
	get := func(c *Console) int {
		req := httptest.NewRequest("GET", "http://console.test/console/links", nil)
		req.AddCookie(ck)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec.Code
	}
	if get(a) != 200 || get(b) != 200 {
		t.Fatal("a session made on A is not accepted on both")
	}
	req := httptest.NewRequest("GET", "http://console.test/console/links", nil)
	req.AddCookie(ck)
	sess, _ := a.sessions.fromRequest(req, cookieHTTP)
	out := httptest.NewRequest("POST", "http://console.test/console/signout", strings.NewReader("csrf="+sess.csrf))
	out.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	out.AddCookie(ck)
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, out)
	if rec.Code != http.StatusSeeOther || get(a) != http.StatusSeeOther {
		t.Fatalf("sign-out on A: %d", rec.Code)
	}
	if get(b) != 200 {
		t.Fatal("B looked storage up again within signOutFresh of its last lookup")
	}
	now = now.Add(signOutFresh)
	if get(b) != http.StatusSeeOther {
		t.Fatal("B accepts a session signed out on A, past signOutFresh")
	}
	if c := instance(); get(c) != http.StatusSeeOther {
		t.Fatal("a restarted instance accepts a signed-out session")
	}
	keys, err := st.List(t.Context(), "console/fp/signed_out", false)
	if err != nil || len(keys) != 1 {
		t.Fatalf("stored sign-outs: %v %v", keys, err)
	}

	// Past the session's expiry, the next sign-out sweeps its entry.
	now = now.Add(sessionTTL + time.Minute)
	ck = signedIn(t, b)
	req = httptest.NewRequest("GET", "http://console.test/console/links", nil)
	req.AddCookie(ck)
	sess, _ = b.sessions.fromRequest(req, cookieHTTP)
	if err := b.sessions.end(t.Context(), sess); err != nil {
		t.Fatal(err)
	}
	keys, _ = st.List(t.Context(), "console/fp/signed_out", false)
	if len(keys) != 1 || get(a) != http.StatusSeeOther {
		t.Fatalf("after the sweep: %v, want the new sign-out alone", keys)
	}
}
