package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
)

// fakeCheckpoints records what the console asks of the checkpoints.
type fakeCheckpoints struct{ did []string }

func (f *fakeCheckpoints) Checkpoints(context.Context) ([]Checkpoint, error) {
	return []Checkpoint{{ID: "c0000000100000a", Name: "before <upgrade>", Person: "alice", SizeBytes: 3 << 20, CreatedAt: time.Now().Add(-time.Hour)}}, nil
}

func (f *fakeCheckpoints) DeleteCheckpoint(_ context.Context, id string) error {
	return f.note("delete " + id)
}

func (f *fakeCheckpoints) RestoreCheckpoint(_ context.Context, id string) error {
	return f.note("restore " + id)
}

func (f *fakeCheckpoints) CopyCheckpoint(_ context.Context, id, to string, replace bool) error {
	if to == "bob" && !replace {
		return fmt.Errorf("%w: bob's sandbox exists already", ErrConflict)
	}
	return f.note(fmt.Sprintf("copy %s %s %v", id, to, replace))
}

func (f *fakeCheckpoints) note(s string) error {
	if strings.Contains(s, "unknown") {
		return fmt.Errorf("%w: no checkpoint", ErrNotFound)
	}
	f.did = append(f.did, s)
	return nil
}

// TestCheckpointsAPI: the JSON API lists, deletes, restores and copies, answering 404,
// 409 and 400 where it should, and records each action.
func TestCheckpointsAPI(t *testing.T) {
	c := newTestConsole(t, fullLog(t))
	f := &fakeCheckpoints{}
	c.opts.Checkpoints = f
	c.opts.Sandboxes = &fakeSandboxes{}
	do := func(method, path, body string) (int, string) {
		req := httptest.NewRequest(method, "http://console.test/console/api/checkpoints"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	for _, tc := range []struct {
		method, path, body string
		code               int
		has                string
	}{
		{"GET", "", "", 200, `"person": "alice"`},
		{"DELETE", "/c0000000100000a", "", 200, `"delete_checkpoint"`},
		{"DELETE", "/unknown", "", 404, "GET /console/api/checkpoints lists them"},
		{"POST", "/c0000000100000a/restore", "", 200, `"restore_checkpoint"`},
		{"POST", "/c0000000100000a/copy", `{"to":"bob"}`, 409, "exists already"},
		{"POST", "/c0000000100000a/copy", `{"to":"bob","replace":true}`, 200, `"copy_checkpoint"`},
		{"POST", "/c0000000100000a/copy", `{"to":"nobody"}`, 404, "no such person"},
		{"POST", "/c0000000100000a/copy", `{"too":"bob"}`, 400, `replace\": true to replace`},
		{"POST", "/c0000000100000a/fork", "", 404, "use GET /console/api/checkpoints"},
	} {
		code, body := do(tc.method, tc.path, tc.body)
		if code != tc.code || !strings.Contains(body, tc.has) {
			t.Errorf("%s %s %s: %d %s, want %d with %q", tc.method, tc.path, tc.body, code, body, tc.code, tc.has)
		}
	}
	if got := strings.Join(f.did, "; "); got != "delete c0000000100000a; restore c0000000100000a; copy c0000000100000a bob true" {
		t.Errorf("did: %s", got)
	}
	if e := c.opts.Audit.Query(Filter{Tool: "console.copy_checkpoint"}); len(e) != 2 || e[0].Outcome != audit.OutcomeOK || e[1].Outcome != audit.OutcomeError {
		t.Errorf("copies in the audit log: %+v", e)
	}
	// Each is listed under whose sandbox it changes: alice's, whose checkpoint it is,
	// and bob's for the copy into his.
	for tool, person := range map[string]string{"console.restore_checkpoint": "alice", "console.delete_checkpoint": "alice", "console.copy_checkpoint": "bob"} {
		if e := c.opts.Audit.Query(Filter{Tool: tool, Outcome: audit.OutcomeOK}); len(e) != 1 || e[0].Person != person {
			t.Errorf("%s in the audit log: %+v, want it under %s", tool, e, person)
		}
	}
}

// TestCheckpointsPage: the overview lists checkpoints with size and age, escaped, and
// its Restore… confirms, then posts the restore.
func TestCheckpointsPage(t *testing.T) {
	c := newTestConsole(t, fullLog(t))
	f := &fakeCheckpoints{}
	c.opts.Checkpoints = f
	ck := signedIn(t, c)
	get := func(u string) (int, string) {
		req := httptest.NewRequest("GET", u, nil)
		req.AddCookie(ck)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	code, page := get("http://console.test/console")
	for _, want := range []string{`data-checkpoint="c0000000100000a"`, "before &lt;upgrade&gt;", "3.0 MiB", "1h 0m ago", "action=restore_checkpoint&amp;id=c0000000100000a"} {
		if code != 200 || !strings.Contains(page, want) {
			t.Errorf("overview: %d, want %q in the checkpoints section", code, want)
		}
	}
	code, page = get("http://console.test/console/confirm?action=restore_checkpoint&id=c0000000100000a")
	if code != 200 || !strings.Contains(page, "Restore alice&#39;s sandbox to checkpoint c0000000100000a?") ||
		!strings.Contains(page, "every change made to alice&#39;s sandbox since the checkpoint") || !strings.Contains(page, `value="restore_checkpoint"`) {
		t.Fatalf("confirm: %d %s", code, page)
	}
	if code, page := get("http://console.test/console/confirm?action=delete_checkpoint&id=c0000000100000a"); code != 200 || !strings.Contains(page, "Delete checkpoint c0000000100000a of alice&#39;s sandbox?") {
		t.Fatalf("confirm delete: %d %s", code, page)
	}
	if code, _ := get("http://console.test/console/confirm?action=restore_checkpoint&id=c0000000200000b"); code != http.StatusNotFound {
		t.Fatalf("confirm for an unknown checkpoint: %d", code)
	}
	req := httptest.NewRequest("GET", "http://console.test/console", nil)
	req.AddCookie(ck)
	sess, _ := c.sessions.fromRequest(req, cookieHTTP)
	req = httptest.NewRequest("POST", "http://console.test/console/action", strings.NewReader("action=restore_checkpoint&id=c0000000100000a&back=overview&csrf="+sess.csrf))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(ck)
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther || len(f.did) != 1 || f.did[0] != "restore c0000000100000a" {
		t.Fatalf("restore from the page: %d %v", rec.Code, f.did)
	}
	if e := c.opts.Audit.Query(Filter{Tool: "console.restore_checkpoint", Limit: 1}); len(e) != 1 || e[0].Person != "alice" {
		t.Fatalf("the restore in the audit log: %+v, want it under alice", e)
	}
}

// TestCheckpointCopyPage: Copy to… asks which sandbox and whether to replace it, then
// copies through the same call as the API; a sandbox that exists is refused without
// "replace".
func TestCheckpointCopyPage(t *testing.T) {
	c := newTestConsole(t, fullLog(t))
	f := &fakeCheckpoints{}
	c.opts.Checkpoints, c.opts.Sandboxes = f, &fakeSandboxes{}
	ck := signedIn(t, c)
	get := func(u string) (int, string) {
		req := httptest.NewRequest("GET", u, nil)
		req.AddCookie(ck)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if _, page := get("http://console.test/console"); !strings.Contains(page, `href="/console/confirm?action=copy_checkpoint&amp;id=c0000000100000a">Copy to…</a>`) {
		t.Fatalf("overview lacks Copy to…: %s", page)
	}
	code, page := get("http://console.test/console/confirm?action=copy_checkpoint&id=c0000000100000a")
	for _, want := range []string{"Copy checkpoint c0000000100000a of alice&#39;s sandbox to…", `<option value="-">the operator's sandbox</option>`,
		`<option value="bob">bob's sandbox</option>`, `name="replace" value="on"`, `value="copy_checkpoint"`} {
		if code != 200 || !strings.Contains(page, want) {
			t.Fatalf("copy form lacks %s: %d %s", want, code, page)
		}
	}
	req := httptest.NewRequest("GET", "http://console.test/console", nil)
	req.AddCookie(ck)
	sess, _ := c.sessions.fromRequest(req, cookieHTTP)
	post := func(form string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "http://console.test/console/action", strings.NewReader(form+"&back=overview&csrf="+sess.csrf))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(ck)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec
	}
	if rec := post("action=copy_checkpoint&id=c0000000100000a&to=bob"); rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "bob&#39;s sandbox exists already") || len(f.did) != 0 {
		t.Fatalf("copy onto bob's without replace: %d %v", rec.Code, f.did)
	}
	if rec := post("action=copy_checkpoint&id=c0000000100000a&to=carol"); rec.Code != http.StatusNotFound || len(f.did) != 0 {
		t.Fatalf("copy to someone not configured: %d %v", rec.Code, f.did)
	}
	if rec := post("action=copy_checkpoint&id=c0000000100000a&to=bob&replace=on"); rec.Code != http.StatusSeeOther || strings.Join(f.did, ",") != "copy c0000000100000a bob true" {
		t.Fatalf("copy onto bob's with replace: %d %v", rec.Code, f.did)
	}
	if e := c.opts.Audit.Query(Filter{Tool: "console.copy_checkpoint", Outcome: audit.OutcomeOK}); len(e) != 1 || e[0].Args != `{"id":"c0000000100000a","to":"bob","replace":true}` {
		t.Fatalf("audit: %+v", e)
	}
}
