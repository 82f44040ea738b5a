package preview

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestOwnersKeys: a server that previews several owners' sandboxes opens each preview
// only with its own owner's key, a cookie made for one owner's preview opens no other
// owner's, and owners it does not serve get 404.
func TestOwnersKeys(t *testing.T) {
	reg, _ := testRegistry()
	reg.now = time.Now
	keys := map[string]string{"alice-box": "alice key 0123456789", "bob-box": "bob key 0123456789"}
	var dialed []string
	srv, err := New(Options{
		Domain: "localhost", TTL: time.Hour, Registry: reg, Auth: true,
		Guesses: &countingGuesses{limit: 100, n: map[string]int{}},
		Owners:  func(o string) (string, bool) { k, ok := keys[o]; return k, ok },
		Dial: func(_ context.Context, owner string, _ int) (net.Conn, error) {
			dialed = append(dialed, owner)
			return nil, errors.New("no app in this test")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	alice, bob := srv.Expose("alice-box", 8000), srv.Expose("bob-box", 8000)
	foreign := reg.Expose("carol-box", "localhost", 8000, time.Hour)
	if alice.Label == bob.Label {
		t.Fatal("one label for two owners")
	}
	if w := signinPost(t, srv, alice, keys["bob-box"]); w.Code != http.StatusUnauthorized {
		t.Errorf("bob's key on alice's preview: %d, want 401", w.Code)
	}
	w := signinPost(t, srv, bob, keys["bob-box"])
	if w.Code != http.StatusSeeOther || len(w.Result().Cookies()) != 1 {
		t.Fatalf("bob's key on bob's preview: %d", w.Code)
	}
	bobCookie := w.Result().Cookies()[0]
	get := func(p Preview) int {
		r := httptest.NewRequest(http.MethodGet, "http://"+p.Host()+"/", nil)
		r.AddCookie(bobCookie)
		rec := httptest.NewRecorder()
		_ = srv.ServeHTTP(rec, r)
		return rec.Code
	}
	if code := get(alice); code != http.StatusUnauthorized {
		t.Errorf("bob's cookie on alice's preview: %d, want 401", code)
	}
	if code := get(foreign); code != http.StatusNotFound {
		t.Errorf("an owner the server does not serve: %d, want 404", code)
	}
	if !srv.Unexpose("bob-box", 8000) || srv.Unexpose("bob-box", 8000) {
		t.Error("unexposing bob's port")
	}
	if _, ok := reg.Lookup(context.Background(), alice.Label); !ok {
		t.Error("unexposing bob's port closed alice's")
	}
}
