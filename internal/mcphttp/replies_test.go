package mcphttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"
)

// These run without Docker or Caddy: replies handed between two servers over an
// in-memory store.

// memStore is a ReplyStore in memory, shared by the servers of a test.
type memStore struct {
	mu      sync.Mutex
	entries map[string][]byte
	stored  map[string]time.Time
}

func newMemStore() *memStore {
	return &memStore{entries: map[string][]byte{}, stored: map[string]time.Time{}}
}

func (m *memStore) Put(_ context.Context, name string, entry []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries[name], m.stored[name] = bytes.Clone(entry), time.Now()
	return nil
}

func (m *memStore) Take(_ context.Context, name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.entries[name]
	delete(m.entries, name)
	return b, nil
}

func (m *memStore) Sweep(_ context.Context, t time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, at := range m.stored {
		if at.Before(t) {
			delete(m.entries, name)
			delete(m.stored, name)
		}
	}
	return nil
}

func (m *memStore) get(name string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.entries[name]
}

func (m *memStore) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// fakeMCP records the replies replayed into it and accepts them, as mcp-go does a
// reply to a request that waits.
type fakeMCP struct {
	mu     sync.Mutex
	bodies []string
	people []string
}

func (f *fakeMCP) Handle(w server.HTTPResponseWriter, r *server.HTTPRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bodies = append(f.bodies, r.Header.Get(server.HeaderKeySessionID)+" "+string(r.Body))
	f.people = append(f.people, personOf(r.Context))
	w.WriteHeader(http.StatusAccepted)
}

func (f *fakeMCP) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.bodies...)
}

// clock is a test's time, moved by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func withPerson(ctx context.Context, person string) context.Context {
	return context.WithValue(ctx, personKey{}, person)
}

// replyPair is two servers' Replies over one store, with one key.
func replyPair(t *testing.T, c *clock) (a, b *Replies, fa *fakeMCP, st *memStore) {
	t.Helper()
	st, fa = newMemStore(), &fakeMCP{}
	o := ReplyOptions{Key: []byte("replies-test-key"), Store: st, WithPerson: withPerson, Poll: 5 * time.Millisecond, TTL: time.Minute, Now: c.now}
	o.MCP = fa
	a = NewReplies(o)
	o.MCP = &fakeMCP{}
	b = NewReplies(o)
	return a, b, fa, st
}

// ask has r write request n of session (person's) as mcp-go does, and returns the id
// the client is given.
func ask(t *testing.T, r *Replies, n int, session, person string) (id string, end func()) {
	t.Helper()
	rec := httptest.NewRecorder()
	w, end := r.Writer(&statusWriterRecorder{rec}, session, person)
	fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%d,\"params\":{\"message\":\"Allow?\"},\"method\":\"elicitation/create\"}\n\n", n)
	data, ok := strings.CutPrefix(rec.Body.String(), sseMessage)
	if !ok {
		t.Fatalf("written: %q", rec.Body)
	}
	var msg struct {
		ID     string `json:"id"`
		Method string `json:"method"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &msg); err != nil || msg.Method != "elicitation/create" || !strings.HasPrefix(msg.ID, replyPrefix) {
		t.Fatalf("the request went out as %q (%v)", rec.Body, err)
	}
	return msg.ID, end
}

// statusWriterRecorder makes a ResponseRecorder mcp-go's writer.
type statusWriterRecorder struct{ *httptest.ResponseRecorder }

func (statusWriterRecorder) CanStream() bool { return true }

// reply is the client's reply to the request given id.
func reply(id, decision string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%q,"result":{"action":"accept","content":{"decision":%q}}}`, id, decision)
}

// route posts body to r in session as person and returns what went on to mcp-go
// (nil when r answered itself) and r's status.
func route(r *Replies, body []byte, session, person string) ([]byte, int) {
	rec := httptest.NewRecorder()
	out, goOn := r.Route(context.Background(), rec, body, session, person)
	if goOn {
		return out, 0
	}
	return nil, rec.Code
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRepliesHandOver: a reply that reaches the server that asked goes on to its mcp-go
// with mcp-go's id, once; one that reaches the other server is handed over through the
// store, 202 there, and delivered once by the one that asked, whatever is sent again.
// Entries tampered with, made for another person or session, or expired are dropped
// and the request still waits; ids given to another session or person, altered or
// expired are refused where they arrive; replies too large are refused; entries
// nobody takes are swept.
func TestRepliesHandOver(t *testing.T) {
	c := &clock{t: time.Now()}
	a, b, fa, st := replyPair(t, c)
	const s1, s2 = "mcp-session-1", "mcp-session-2"

	// Back to A itself: mcp-go's id again, once.
	id, end := ask(t, a, 7, s1, "alice")
	out, code := route(a, reply(id, "allow_once"), s1, "alice")
	if code != 0 || !strings.Contains(string(out), `"id":7`) || !strings.Contains(string(out), "allow_once") {
		t.Fatalf("a reply back to the server that asked: %d %s", code, out)
	}
	if _, code := route(a, reply(id, "allow_once"), s1, "alice"); code != http.StatusBadRequest {
		t.Fatalf("the same reply again on A: %d, want 400", code)
	}
	end()

	// Through B: handed over, delivered by A once with mcp-go's id, to alice's session.
	id, end = ask(t, a, 8, s1, "alice")
	defer end()
	if _, code := route(b, reply(id, "deny"), s1, "alice"); code != http.StatusAccepted {
		t.Fatalf("a reply to A's request on B: %d, want 202", code)
	}
	waitFor(t, "A to deliver the reply B handed over", func() bool { return len(fa.got()) == 1 })
	if got := fa.got()[0]; !strings.HasPrefix(got, s1+" ") || !strings.Contains(got, `"id":8`) || !strings.Contains(got, "deny") || fa.people[0] != "alice" {
		t.Fatalf("delivered %q as %q", got, fa.people[0])
	}
	if _, code := route(b, reply(id, "allow_always"), s1, "alice"); code != http.StatusAccepted {
		t.Fatalf("the reply sent again on B: %d", code)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(fa.got()); n != 1 || st.len() != 1 {
		t.Fatalf("a reply sent twice: delivered %d times, %d entries left (want 1, 1)", n, st.len())
	}

	// Refused where they arrive: another session's, another person's, altered, too large.
	id, end9 := ask(t, a, 9, s1, "alice")
	defer end9()
	altered := []byte(id)
	altered[len(altered)-1] ^= 1
	for _, tc := range []struct {
		name, session, person string
		body                  []byte
		want                  int
	}{
		{"another session", s2, "alice", reply(id, "allow_always"), http.StatusBadRequest},
		{"another person", s1, "bob", reply(id, "allow_always"), http.StatusBadRequest},
		{"an altered id", s1, "alice", reply(string(altered), "allow_always"), http.StatusBadRequest},
		{"too large", s1, "alice", reply(id, strings.Repeat("x", MaxReply)), http.StatusRequestEntityTooLarge},
	} {
		for _, r := range []*Replies{a, b} {
			if _, code := route(r, tc.body, tc.session, tc.person); code != tc.want {
				t.Errorf("%s: %d, want %d", tc.name, code, tc.want)
			}
		}
	}

	// Entries dropped by A, which goes on waiting: tampered with, another person's,
	// another session's (sealed with the key: a slip, or a storage written by hand).
	name := entryName(a.inbox, 9)
	good := b.seal(replyEntry{Inbox: a.inbox, N: 9, Session: s1, Person: "alice", Body: reply(id, "allow_once"),
		Stored: c.now().UnixMilli(), Expires: c.now().Add(time.Minute).Unix()})
	tampered := bytes.Replace(good, []byte("allow_once"), []byte("allow_alwa"), 1)
	for _, e := range []struct {
		Person, Session string
	}{{"bob", s1}, {"alice", s2}} {
		bad := b.seal(replyEntry{Inbox: a.inbox, N: 9, Session: e.Session, Person: e.Person, Body: reply(id, "allow_always"),
			Stored: c.now().UnixMilli(), Expires: c.now().Add(time.Minute).Unix()})
		_ = st.Put(context.Background(), name, bad)
		waitFor(t, "A to drop an entry for "+e.Person+" in "+e.Session, func() bool { return st.get(name) == nil })
	}
	_ = st.Put(context.Background(), name, tampered)
	waitFor(t, "A to drop a tampered entry", func() bool { return st.get(name) == nil })
	if n := len(fa.got()); n != 1 {
		t.Fatalf("a bad entry was delivered: %q", fa.got())
	}
	_ = st.Put(context.Background(), name, good)
	waitFor(t, "A to deliver the good entry after the bad ones", func() bool { return len(fa.got()) == 2 })

	// Expired: an entry past its expiry is dropped; a reply to a request older than the
	// TTL is refused where it arrives.
	id, end10 := ask(t, a, 10, s1, "alice")
	defer end10()
	_ = st.Put(context.Background(), entryName(a.inbox, 10), b.seal(replyEntry{Inbox: a.inbox, N: 10, Session: s1, Person: "alice",
		Body: reply(id, "allow_once"), Stored: c.now().UnixMilli(), Expires: c.now().Add(-time.Second).Unix()}))
	waitFor(t, "A to drop an expired entry", func() bool { return st.get(entryName(a.inbox, 10)) == nil })
	c.add(2 * time.Minute)
	for _, r := range []*Replies{a, b} {
		if _, code := route(r, reply(id, "allow_once"), s1, "alice"); code != http.StatusBadRequest {
			t.Errorf("a reply past the TTL: %d, want 400", code)
		}
	}
	if n := len(fa.got()); n != 2 {
		t.Fatalf("an expired reply was delivered: %q", fa.got())
	}

	// What nobody took (the reply sent twice) is swept by the next hand-over past the TTL.
	id11, end11 := ask(t, a, 11, s1, "alice")
	end11()
	if _, code := route(b, reply(id11, "deny"), s1, "alice"); code != http.StatusAccepted {
		t.Fatalf("a reply to a request that ended, on B: %d", code)
	}
	waitFor(t, "the reply sent twice to be swept", func() bool { return st.get(entryName(a.inbox, 8)) == nil })
	if n := len(fa.got()); n != 2 {
		t.Errorf("a reply to a request that ended was delivered: %q", fa.got())
	}

	// Not replies: requests, notifications, numeric ids, another server's strings.
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":"srv-x","method":"tools/call"}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":3,"result":{}}`,
		`{"jsonrpc":"2.0","id":"abc","result":{}}`,
		`[{"jsonrpc":"2.0","id":"srv-1","result":{}}]`,
	} {
		if out, code := route(b, []byte(body), s1, "alice"); code != 0 || string(out) != body {
			t.Errorf("%s: went on as %q, status %d", body, out, code)
		}
	}
}

// TestRepliesWriter: only requests get an id that names the server; notifications and
// responses go out byte for byte, and a request ends its wait with its response.
func TestRepliesWriter(t *testing.T) {
	a, _, _, _ := replyPair(t, &clock{t: time.Now()})
	rec := httptest.NewRecorder()
	w, end := a.Writer(&statusWriterRecorder{rec}, "mcp-session-1", "alice")
	for _, ev := range []string{
		"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"id\":4}}\n\n",
		"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"method\":\"x\"}}\n\n",
		": keep-alive\n\n",
	} {
		rec.Body.Reset()
		fmt.Fprint(w, ev)
		if rec.Body.String() != ev {
			t.Errorf("%q went out as %q", ev, rec.Body)
		}
	}
	if waitingCount(a) != 0 {
		t.Fatalf("waiting for %d requests", waitingCount(a))
	}
	fmt.Fprint(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"roots/list\"}\n\n")
	if !strings.Contains(rec.Body.String(), `"id":"srv-`+a.inbox+`-5-`) || waitingCount(a) != 1 {
		t.Fatalf("a request went out as %q, waiting for %d", rec.Body, waitingCount(a))
	}
	end()
	if waitingCount(a) != 0 {
		t.Fatalf("still waiting for %d after the response ended", waitingCount(a))
	}
	if w, _ := a.Writer(&statusWriterRecorder{rec}, "", "alice"); w.(*statusWriterRecorder).ResponseRecorder != rec {
		t.Error("a response without a session was wrapped")
	}
}

func waitingCount(r *Replies) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}
