package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
)

type fakeSandboxes struct {
	mu   sync.Mutex
	acts []string
	warm *WarmInfo
}

func (f *fakeSandboxes) List(context.Context) ([]SandboxInfo, error) {
	return []SandboxInfo{{Person: "", State: "running"}, {Person: "alice", State: "running", Engine: "cluster", Node: "node-1"}, {Person: "bob", State: "missing"}}, nil
}

func (f *fakeSandboxes) People() []string { return []string{"alice", "bob"} }

func (f *fakeSandboxes) Removed(context.Context) []string { return []string{"dave"} }

func (f *fakeSandboxes) Warm() *WarmInfo { return f.warm }

func (f *fakeSandboxes) Act(_ context.Context, person, action string) error {
	if person != "" && person != "alice" && person != "bob" && person != "dave" {
		return ErrNotFound
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acts = append(f.acts, person+":"+action)
	return nil
}

// TestSandboxesAPI: the operator lists every sandbox with its last activity and acts on
// each; an unknown person or action is a 404, a person's key is not the operator's, and
// the activity log filters by person.
func TestSandboxesAPI(t *testing.T) {
	log := NewAuditLog(fileStorage(t), "console", 100, nil)
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	log.Record(audit.Entry{Time: t0, Client: "c", Person: "alice", Tool: "execute", Outcome: audit.OutcomeOK})
	log.Record(audit.Entry{Time: t0.Add(time.Second), Client: "c", Tool: "execute", Outcome: audit.OutcomeOK})
	c := newTestConsole(t, log)
	fs := &fakeSandboxes{}
	c.opts.Sandboxes = fs
	do := func(method, path, key string) (int, map[string]any) {
		req := httptest.NewRequest(method, "http://console.test"+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		var m map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &m)
		return rec.Code, m
	}
	code, m := do("GET", "/console/api/sandboxes", testKey)
	list, _ := m["sandboxes"].([]any)
	if code != 200 || len(list) != 3 {
		t.Fatalf("list: %d %v", code, m)
	}
	if _, ok := m["warm"]; ok {
		t.Errorf("a site without warm sandboxes lists some: %v", m["warm"])
	}
	fs.warm = &WarmInfo{Wanted: 3, Ready: 2, Making: 1, Taken: 5}
	_, withWarm := do("GET", "/console/api/sandboxes", testKey)
	if w, _ := withWarm["warm"].(map[string]any); w["wanted"] != 3.0 || w["ready"] != 2.0 || w["making"] != 1.0 || w["taken"] != 5.0 {
		t.Errorf("the warm sandboxes listed: %v, want 3 wanted, 2 ready, 1 being made, 5 taken", withWarm["warm"])
	}
	fs.warm = nil
	alice := list[1].(map[string]any)
	if alice["person"] != "alice" || alice["last_activity"] == nil {
		t.Errorf("alice's sandbox: %v", alice)
	}
	if bob := list[2].(map[string]any); bob["last_activity"] != nil {
		t.Errorf("bob never acted, yet: %v", bob)
	}
	// The node a sandbox runs on (a Kubernetes engine's) is listed when known, absent
	// when not.
	if alice["node"] != "node-1" {
		t.Errorf("alice's node: %v", alice)
	}
	if bob := list[2].(map[string]any); bob["node"] != nil {
		t.Errorf("bob's sandbox has no node, yet: %v", bob)
	}
	for _, p := range []string{"alice/stop", "alice/start", "bob/restart", "-/recreate", "dave/delete?volume=keep", "dave/delete?volume=delete"} {
		if code, m := do("POST", "/console/api/sandboxes/"+p, testKey); code != 200 {
			t.Errorf("POST %s: %d %v", p, code, m)
		}
	}
	if strings.Join(fs.acts, " ") != "alice:stop alice:start bob:restart :recreate dave:delete dave:delete_volume" {
		t.Errorf("acts: %v", fs.acts)
	}
	// Deleting needs the operator's word on the volume.
	for _, p := range []string{"dave/delete", "dave/delete?volume=maybe"} {
		if code, m := do("POST", "/console/api/sandboxes/"+p, testKey); code != http.StatusBadRequest || !strings.Contains(m["error"].(string), "volume=keep") {
			t.Errorf("POST %s: %d %v, want 400", p, code, m)
		}
	}
	for _, p := range []string{"carol/stop", "alice/explode", "alice"} {
		if code, _ := do("POST", "/console/api/sandboxes/"+p, testKey); code != 404 {
			t.Errorf("POST %s: %d, want 404", p, code)
		}
	}
	if code, _ := do("GET", "/console/api/sandboxes", "alice's own key, not the operator's"); code != http.StatusUnauthorized {
		t.Errorf("a key that is not the operator's: %d", code)
	}
	_, m = do("GET", "/console/api/activity?person=alice&tool=execute", testKey)
	entries, _ := m["entries"].([]any)
	if len(entries) != 1 || entries[0].(map[string]any)["person"] != "alice" {
		t.Errorf("activity of alice: %v", m)
	}
	// The operator's actions on alice's sandbox are listed as hers; carol, whom no
	// line names, gets none.
	for q, want := range map[string]int{"person=alice&tool=console.sandbox_stop": 1, "person=alice&tool=console.sandbox_start": 1,
		"person=dave&tool=console.sandbox_delete&outcome=ok": 2, "person=carol": 0} {
		if _, m := do("GET", "/console/api/activity?"+q, testKey); len(m["entries"].([]any)) != want {
			t.Errorf("activity %s: %v, want %d entries", q, m, want)
		}
	}
	_, m = do("GET", "/console/api/activity?person=-&tool=execute", testKey)
	if entries, _ := m["entries"].([]any); len(entries) != 1 {
		t.Errorf("activity of the operator: %v", m)
	}
}

// TestSandboxesPages: with people, the overview lists every sandbox with its buttons,
// stopping asks first and then acts on that person's sandbox, and the activity page
// filters by person; without people neither shows.
func TestSandboxesPages(t *testing.T) {
	log := NewAuditLog(fileStorage(t), "console", 100, nil)
	log.Record(audit.Entry{Time: time.Now(), Client: "c", Person: "alice", Tool: "execute", Args: `"alice-cmd"`, Outcome: audit.OutcomeOK})
	log.Record(audit.Entry{Time: time.Now(), Client: "c", Person: "bob", Tool: "execute", Args: `"bob-cmd"`, Outcome: audit.OutcomeOK})
	c := newTestConsole(t, log)
	ck := signedIn(t, c)
	get := func(path string) (int, string) {
		req := httptest.NewRequest("GET", "http://console.test"+path, nil)
		req.AddCookie(ck)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if _, page := get("/console"); strings.Contains(page, `id="sandboxes"`) {
		t.Fatal("the overview lists sandboxes without person lines")
	}
	if _, page := get("/console/activity"); strings.Contains(page, `name="person"`) {
		t.Fatal("the activity page filters by person without person lines")
	}
	if code, _ := get("/console/confirm?action=sandbox_stop&person=bob"); code != http.StatusNotFound {
		t.Fatalf("confirming a sandbox action without person lines: %d", code)
	}

	fs := &fakeSandboxes{}
	c.opts.Sandboxes = fs
	_, page := get("/console")
	for _, want := range []string{`data-person="-"`, `data-person="alice"`, `data-person="bob"`,
		`href="/console/confirm?action=sandbox_stop&amp;person=-"`, `value="sandbox_start"`, `href="/console/activity?person=alice"`} {
		if !strings.Contains(page, want) {
			t.Errorf("overview without %s", want)
		}
	}
	if strings.Contains(page, `id="warm"`) {
		t.Error("the overview shows warm sandboxes on a site without them")
	}
	fs.warm = &WarmInfo{Wanted: 3, Ready: 2, Making: 1, Taken: 5, Engine: "local"}
	if _, page := get("/console"); !strings.Contains(page, "Warm sandboxes on <code>local</code>: 2 of 3 ready, 1 being made; 5 taken by new people.") {
		t.Errorf("the overview does not show the warm sandboxes: %s", page)
	}
	if _, page := get("/console?person=alice"); strings.Contains(page, `id="warm"`) {
		t.Error("one person's page shows the site's warm sandboxes")
	}
	fs.warm = nil
	if n := strings.Count(page, "node <code>"); n != 1 || !strings.Contains(page, "node <code>node-1</code>") {
		t.Errorf("overview shows %d nodes, want alice's node-1 only", n)
	}
	code, page := get("/console/confirm?action=sandbox_stop&person=bob")
	if code != 200 || !strings.Contains(page, "Stop bob&#39;s sandbox?") || !strings.Contains(page, `name="id" value="bob"`) {
		t.Fatalf("confirm stop: %d %s", code, page)
	}
	if code, _ := get("/console/confirm?action=sandbox_stop&person=carol"); code != http.StatusNotFound {
		t.Errorf("confirm for a person who is not configured: %d", code)
	}
	// A removed person's sandbox: Delete asks what becomes of the volume; only Stop and
	// Delete are offered for it, and Delete for no one else.
	code, page = get("/console/confirm?action=sandbox_delete&person=dave")
	if code != 200 || !strings.Contains(page, "Delete dave&#39;s sandbox?") || !strings.Contains(page, `name="volume" value="keep"`) || !strings.Contains(page, `name="volume" value="delete"`) {
		t.Fatalf("confirm delete: %d %s", code, page)
	}
	for _, q := range []string{"action=sandbox_delete&person=alice", "action=sandbox_restart&person=dave", "action=sandbox_delete&person=carol"} {
		if code, _ := get("/console/confirm?" + q); code != http.StatusNotFound {
			t.Errorf("confirm %s: %d, want 404", q, code)
		}
	}
	req := httptest.NewRequest("GET", "http://console.test/console", nil)
	req.AddCookie(ck)
	sess, _ := c.sessions.fromRequest(req, cookieHTTP)
	req = httptest.NewRequest("POST", "http://console.test/console/action", strings.NewReader("action=sandbox_stop&id=bob&back=overview&csrf="+sess.csrf))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(ck)
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther || strings.Join(fs.acts, " ") != "bob:stop" {
		t.Fatalf("stop: %d %v", rec.Code, fs.acts)
	}
	if _, page := get(rec.Header().Get("Location")); !strings.Contains(page, flashes[sbStop]) {
		t.Errorf("no flash after stopping")
	}

	_, page = get("/console/activity?person=alice")
	if !strings.Contains(page, `<option selected>alice</option>`) || !strings.Contains(page, "alice-cmd") || strings.Contains(page, "bob-cmd") {
		t.Fatalf("activity of alice: %s", page)
	}
	if !strings.Contains(page, `href="/console/activity.jsonl?person=alice"`) {
		t.Error("the export link drops the person")
	}
}

// TestEphemeralConfirmations: on an engine that keeps no container filesystem (a
// Kubernetes engine), the confirmations of stop and restart say that what is outside
// /sandbox is lost; elsewhere they say it is kept.
func TestEphemeralConfirmations(t *testing.T) {
	for _, ephemeral := range []bool{false, true} {
		c := newTestConsole(t, NewAuditLog(fileStorage(t), "console", 100, nil))
		c.opts.Sandboxes = &fakeSandboxes{}
		c.opts.Ephemeral = ephemeral
		ck := signedIn(t, c)
		for _, q := range []string{"action=sandbox_stop&person=bob", "action=sandbox_restart&person=alice", "action=restart"} {
			req := httptest.NewRequest("GET", "http://console.test/console/confirm?"+q, nil)
			req.AddCookie(ck)
			rec := httptest.NewRecorder()
			c.ServeHTTP(rec, req)
			page := rec.Body.String()
			lost := strings.Contains(page, "the pod is deleted and made again from the image")
			kept := strings.Contains(page, "packages and other files written anywhere in the container") || strings.Contains(page, "every file in the container and under /sandbox")
			if rec.Code != 200 || lost != ephemeral || kept == ephemeral {
				t.Errorf("ephemeral %v, %s: %d, says lost %v, kept %v", ephemeral, q, rec.Code, lost, kept)
			}
		}
	}
}

// stoppedSandboxes lists bob's and alice's sandboxes stopped, alice's by idle stop.
type stoppedSandboxes struct{ fakeSandboxes }

func (*stoppedSandboxes) List(context.Context) ([]SandboxInfo, error) {
	return []SandboxInfo{{Person: "", State: "running"}, {Person: "alice", State: "exited", StoppedBy: StoppedIdle}, {Person: "bob", State: "exited"}}, nil
}

// TestSandboxesStoppedBy: a sandbox the operator stopped shows "stopped (operator)",
// one idle stop stopped "stopped (idle)", and console sign-ins and actions do not
// count as a sandbox's last activity.
func TestSandboxesStoppedBy(t *testing.T) {
	log := NewAuditLog(fileStorage(t), "console", 100, nil)
	t0 := time.Now().Add(-time.Hour)
	log.Record(audit.Entry{Time: t0, Client: "c", Person: "bob", Tool: "execute", Outcome: audit.OutcomeOK})
	log.Record(audit.Entry{Time: t0.Add(time.Minute), Client: "console", Person: "bob", Tool: "console.sandbox_stop", Args: `{"person":"bob"}`, Outcome: audit.OutcomeOK})
	log.Record(audit.Entry{Time: t0.Add(2 * time.Minute), Client: "console", Tool: "console.sign_in", Outcome: audit.OutcomeOK})
	c := newTestConsole(t, log)
	c.opts.Sandboxes = &stoppedSandboxes{}
	list, err := c.sandboxes(context.Background())
	if err != nil || len(list) != 3 {
		t.Fatal(list, err)
	}
	if list[0].StoppedBy != "" || !list[0].LastActivity.IsZero() {
		t.Errorf("the operator's unused sandbox: %+v", list[0])
	}
	if list[1].StoppedBy != StoppedIdle || list[2].StoppedBy != StoppedOperator || !list[2].LastActivity.Equal(t0) {
		t.Errorf("stopped by: alice %+v, bob %+v", list[1], list[2])
	}
	req := httptest.NewRequest("GET", "http://console.test/console", nil)
	req.AddCookie(signedIn(t, c))
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	page := rec.Body.String()
	for _, want := range []string{`<span class="state state-stopped">stopped (idle)</span>`, `<span class="state state-stopped">stopped (operator)</span>`} {
		if !strings.Contains(page, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
	// The sign-in concerns no sandbox: not the operator's activity, listed under no person.
	if e := log.Query(Filter{Person: OperatorPath}); len(e) != 0 {
		t.Errorf("the operator's sandbox's activity: %+v", e)
	}
	req = httptest.NewRequest("GET", "http://console.test/console/activity", nil)
	req.AddCookie(signedIn(t, c))
	rec = httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if page := rec.Body.String(); !strings.Contains(page, `<td class="person">–</td><td>console`) || strings.Contains(page, `<td class="person">operator</td><td>console`) {
		t.Errorf("activity page: %s", page)
	}
	// A call after the stop started it again: a later stop is idle's or unknown.
	log.Record(audit.Entry{Time: t0.Add(3 * time.Minute), Client: "c", Person: "bob", Tool: "execute", Outcome: audit.OutcomeOK})
	if list, _ := c.sandboxes(context.Background()); list[2].StoppedBy != "" {
		t.Errorf("bob's sandbox used after the stop: %+v", list[2])
	}
}
