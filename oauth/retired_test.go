package oauth

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
)

// TestRetiredKeys: a key this server accepted and then lost to a new configuration
// (a person removed, a key replaced) is answered as retired wherever it is tried, never
// counted as a guess however often it is retried, and recognised for RetiredKeyTTL;
// storage holds fingerprints, never a key.
func TestRetiredKeys(t *testing.T) {
	const aliceKey, bobKey, bobNewKey = "alice-key-0123456789abcdef", "bob-key-0123456789abcdef", "bob-new-key-0123456789abcdef"
	var history *KeyHistory
	e := newTestEnv(t, func(o *Options) {
		o.APIKeyBearer = true
		o.People = map[string]string{"alice": aliceKey, "bob": bobKey}
		history = NewKeyHistory(o.Storage, "", nil, o.Now)
		o.KeyHistory = history
	})
	if got := e.callMCP(bobKey); got != http.StatusOK {
		t.Fatalf("bob's key: %d", got)
	}
	// The server records its keys in the background once it serves.
	deadline := time.Now().Add(10 * time.Second)
	for history.noteCount() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the server's keys were not recorded: %d", history.noteCount())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A reload gives bob a new key and removes alice.
	opts := e.opts
	opts.People = map[string]string{"bob": bobNewKey}
	e.restart(opts)
	for i := range 3 * signinBlockAfter {
		for _, old := range []string{aliceKey, bobKey} {
			req, _ := http.NewRequest(http.MethodPost, e.url("/mcp"), strings.NewReader("{}"))
			req.Header.Set("Authorization", "Bearer "+old)
			resp, _ := e.do(req)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "this key was retired; ask the operator for your new key") {
				t.Fatalf("an old key, try %d: %d %q", i+1, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
		}
	}
	if d := e.server().guesses.Blocked("127.0.0.1"); d != 0 {
		t.Fatalf("retired keys blocked the address for %v", d)
	}
	if got := e.callMCP(bobNewKey); got != http.StatusOK {
		t.Fatalf("bob's new key after his old one was retried: %d", got)
	}
	// The sign-in page asks for the person's own key and says when one was retired.
	reg := e.register(map[string]any{"redirect_uris": []string{httpsRedirect}, "token_endpoint_auth_method": "none"})
	params, _ := authParamsFor(e, reg.ClientID, httpsRedirect)
	_, page := e.get("/authorize?" + params.Encode())
	if !strings.Contains(string(page), ">Your key</label>") || strings.Contains(string(page), "API key") {
		t.Errorf("the sign-in page does not ask for the person's own key: %s", page)
	}
	form := formFields(t, page)
	form.Set("api_key", aliceKey)
	if resp, body := e.postForm("/authorize", form); resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "This key was retired; ask the operator for your new key.") {
		t.Errorf("alice's old key on the sign-in page: %d %s", resp.StatusCode, body)
	}
	if ok, _, err := e.server().CheckAPIKey(consoleRequest(), bobKey); ok || err != ErrRetiredKey {
		t.Fatalf("an old key on the console: %v %v", ok, err)
	}
	// A key never seen is a guess.
	if got := e.callMCP("never-a-key-0123456789"); got != http.StatusUnauthorized {
		t.Fatalf("a key never seen: %d", got)
	}
	if ok, n, _ := e.server().guesses.Try("127.0.0.1", "never-a-key-0123456789", func() bool { return false }); ok || n != 1 {
		t.Fatalf("a key never seen counts %d guesses, want 1", n)
	}

	// Storage has fingerprints and the salt, no key.
	err := filepath.WalkDir(e.storage.Path, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, _ := os.ReadFile(p)
		for _, k := range []string{aliceKey, bobKey, bobNewKey, testKey} {
			if strings.Contains(string(data), k) || strings.Contains(p, k) {
				t.Errorf("storage %s holds a key", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// After RetiredKeyTTL the old key is a guess again, and its fingerprint is deleted.
	e.clock.Advance(RetiredKeyTTL + time.Hour)
	if err := history.Load(e.ctx()); err != nil {
		t.Fatal(err)
	}
	if e.server().retired(aliceKey) {
		t.Fatal("alice's key is still retired after RetiredKeyTTL")
	}
	if n := history.noteCount(); n != 0 {
		t.Fatalf("%d fingerprints kept after RetiredKeyTTL", n)
	}
}

// noteCount is the number of fingerprints the history holds.
func (k *KeyHistory) noteCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.seen)
}

func consoleRequest() *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/console/signin", nil)
	r.RemoteAddr = "127.0.0.1:1234"
	return r
}

// TestKeyHistoryClose: Close waits for the writes under way, and a history closed by its
// last user writes nothing more to storage.
func TestKeyHistoryClose(t *testing.T) {
	dir := t.TempDir()
	history := NewKeyHistory(&certmagic.FileStorage{Path: dir}, "", nil, nil)
	if err := history.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	history.Note([]string{"first-key-0123456789abcdef"})
	history.Close()
	files := func() []string {
		entries, err := os.ReadDir(filepath.Join(dir, "mcp_sandbox", "keys"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			if e.Name() != "salt" {
				names = append(names, e.Name())
			}
		}
		return names
	}
	if got := files(); len(got) != 1 {
		t.Fatalf("after Close, storage holds %q; want the one noted key's fingerprint", got)
	}
	history.Note([]string{"second-key-0123456789abcdef"})
	time.Sleep(100 * time.Millisecond)
	if got := files(); len(got) != 1 {
		t.Fatalf("a closed history wrote to storage: %q", got)
	}
}
