package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
)

type personAccess struct{ fakeAccess }

func (personAccess) Grants(context.Context) ([]Grant, error) {
	return []Grant{{ID: "g1", ClientID: "c1", ClientName: "Claude", Person: "alice", CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)},
		{ID: "g2", ClientID: "c2", ClientName: "Claude", CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}}, nil
}

// TestJobsByPerson: with people, GET /console/api/jobs lists every sandbox's jobs each
// with its person, ?person= narrows to one ("-" the operator), an unknown person is a
// 404, and DELETE kills the job in the sandbox named (or the one that runs it).
func TestJobsByPerson(t *testing.T) {
	c := newTestConsole(t, fullLog(t))
	jobs := &fakeJobs{}
	c.opts.Jobs, c.opts.Sandboxes = jobs, &fakeSandboxes{}
	do := func(method, path string) (int, map[string]any) {
		t.Helper()
		req := httptest.NewRequest(method, "http://console.test/console/api"+path, nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
		return rec.Code, m
	}
	listed := func(path string) string {
		t.Helper()
		code, m := do("GET", path)
		if code != 200 {
			t.Fatalf("GET %s: %d %v", path, code, m)
		}
		var out []string
		for _, j := range m["jobs"].([]any) {
			j := j.(map[string]any)
			p, has := j["person"]
			if !has {
				t.Fatalf("GET %s: a job without a person field: %v", path, j)
			}
			out = append(out, p.(string)+"/"+j["id"].(string))
		}
		return strings.Join(out, ",")
	}
	for _, all := range []string{"/jobs", "/jobs?person="} {
		if got := listed(all); got != "/job-1,alice/job-2" {
			t.Errorf("every job (%s): %q", all, got)
		}
	}
	if got := listed("/jobs?person=alice"); got != "alice/job-2" {
		t.Errorf("alice's jobs: %q", got)
	}
	if got := listed("/jobs?person=-"); got != "/job-1" {
		t.Errorf("the operator's jobs: %q", got)
	}
	if code, _ := do("GET", "/jobs?person=zed"); code != 404 {
		t.Errorf("an unknown person's jobs: %d, want 404", code)
	}
	if code, _ := do("DELETE", "/jobs/job-2?person=-"); code != 404 {
		t.Errorf("alice's job killed in the operator's sandbox: %d, want 404", code)
	}
	if code, m := do("DELETE", "/jobs/job-2?person=alice"); code != 200 {
		t.Errorf("killing alice's job: %d %v", code, m)
	}
	if code, m := do("DELETE", "/jobs/job-2"); code != 200 {
		t.Errorf("killing alice's job without naming her: %d %v", code, m)
	}
	if strings.Join(jobs.killed, ",") != "alice/job-2,alice/job-2" {
		t.Errorf("killed: %v", jobs.killed)
	}
	if e := c.opts.Audit.Query(Filter{Tool: "console.kill_job", Outcome: audit.OutcomeOK, Limit: 1}); len(e) != 1 || !strings.Contains(e[0].Args, `"person":"alice"`) || e[0].Person != "alice" {
		t.Errorf("the kill in the audit log: %+v", e)
	}
}

// TestPagesNamePeople: with people, the overview's jobs, the activity log, the
// sign-ins and the links each show whose they are; without people no Person column
// shows.
func TestPagesNamePeople(t *testing.T) {
	log := NewAuditLog(fileStorage(t), "console", 100, nil)
	log.Record(audit.Entry{Time: time.Now(), Client: "Claude", Person: "alice", Tool: "execute", Args: `"alice-cmd"`, Outcome: audit.OutcomeOK})
	errAt := time.Now()
	log.Record(audit.Entry{Time: errAt, Client: "c", Person: "alice", Tool: "execute", Outcome: audit.OutcomeError, Error: "boom"})
	c := newTestConsole(t, log)
	reg := NewLinkRegistry(fileStorage(t), "console", nil)
	if err := reg.Record(context.Background(), Link{ID: "preview-0123456789", Kind: KindPreview, Target: "8000", Person: "alice",
		Creator: "Claude", ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c.opts.Links, c.opts.Access, c.opts.Jobs = registryLinks{reg}, personAccess{}, &fakeJobs{}
	ck := signedIn(t, c)
	page := func(path string) string {
		t.Helper()
		req := httptest.NewRequest("GET", "http://console.test"+path, nil)
		req.AddCookie(ck)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d", path, rec.Code)
		}
		return rec.Body.String()
	}
	for _, path := range []string{"/console", "/console/activity", "/console/access", "/console/links"} {
		if p := page(path); strings.Contains(p, "<th>Person</th>") {
			t.Errorf("%s shows a Person column without people", path)
		}
	}
	c.opts.Sandboxes = &fakeSandboxes{}
	for path, want := range map[string][]string{
		"/console": {`<td class="person">alice</td><td><code>job-2</code>`, `<td class="person">operator</td><td><code>job-1</code>`, `action=kill_job&amp;id=job-2&amp;person=alice"`,
			`<td class="nowrap">` + when(errAt) + `</td><td class="person">alice</td><td>c</td><td>execute</td>`},
		"/console/activity": {`<td class="person">alice</td>`},
		"/console/access":   {`<td class="person">alice</td>`, `<td class="person">operator</td>`},
		"/console/links":    {`<td class="person">alice</td><td>preview</td>`},
	} {
		p := page(path)
		for _, w := range append(want, "<th>Person</th>") {
			if !strings.Contains(p, w) {
				t.Errorf("%s lacks %s", path, w)
			}
		}
	}
}

// TestRemovedPersonLinksAndFilter: a removed person's links are listed as dead, not
// live, with no Revoke; the activity filter offers removed people too.
func TestRemovedPersonLinksAndFilter(t *testing.T) {
	c := newTestConsole(t, NewAuditLog(fileStorage(t), "console", 100, nil))
	reg := NewLinkRegistry(fileStorage(t), "console", nil)
	for _, p := range []string{"dave", "alice"} {
		if err := reg.Record(context.Background(), Link{ID: "download-" + p + "-0123", Kind: KindDownload, Target: "/sandbox/" + p, Person: p,
			Creator: "Claude", ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	c.opts.Links, c.opts.Sandboxes = registryLinks{reg}, &fakeSandboxes{}
	ck := signedIn(t, c)
	get := func(path string, bearer bool) string {
		req := httptest.NewRequest("GET", "http://console.test"+path, nil)
		if bearer {
			req.Header.Set("Authorization", "Bearer "+testKey)
		} else {
			req.AddCookie(ck)
		}
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec.Body.String()
	}
	page := get("/console/links", false)
	dave, _, _ := strings.Cut(page[strings.Index(page, `<td class="person">dave</td>`):], "</tr>")
	alice, _, _ := strings.Cut(page[strings.Index(page, `<td class="person">alice</td>`):], "</tr>")
	if !strings.Contains(dave, "dead: the person was removed") || strings.Contains(dave, "Revoke") || !strings.Contains(alice, "Revoke") {
		t.Fatalf("links page: dave %s / alice %s", dave, alice)
	}
	var api struct{ Links []Link }
	if err := json.Unmarshal([]byte(get("/console/api/links", true)), &api); err != nil || len(api.Links) != 2 {
		t.Fatal(err, api)
	}
	for _, l := range api.Links {
		if l.PersonRemoved != (l.Person == "dave") {
			t.Errorf("API: %+v", l)
		}
	}
	if page := get("/console/activity", false); !strings.Contains(page, "<option>dave</option>") {
		t.Errorf("the activity filter lacks dave")
	}
}

// TestPersonViewCallsAndLinks: one person's view lists their newest calls, whatever
// the outcome, and the links to their sandbox with Revoke, nobody else's; a person no
// line names and no sandbox is left of has no view.
func TestPersonViewCallsAndLinks(t *testing.T) {
	log := NewAuditLog(fileStorage(t), "console", 100, nil)
	t0 := time.Now().Add(-time.Minute)
	log.Record(audit.Entry{Time: t0, Client: "Claude", Person: "alice", Tool: "execute", Args: `{"command":"make alice-build"}`, Outcome: audit.OutcomeOK})
	log.Record(audit.Entry{Time: t0, Client: "Claude", Person: "bob", Tool: "execute", Args: `{"command":"make bob-build"}`, Outcome: audit.OutcomeOK})
	c := newTestConsole(t, log)
	reg := NewLinkRegistry(fileStorage(t), "console", nil)
	for _, p := range []string{"alice", "bob"} {
		if err := reg.Record(context.Background(), Link{ID: "download-" + p + "-0123", Kind: KindDownload, Target: "/sandbox/" + p + ".txt", Person: p,
			Creator: "Claude", ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	c.opts.Links, c.opts.Sandboxes = registryLinks{reg}, &fakeSandboxes{}
	ck := signedIn(t, c)
	get := func(path string) (int, string) {
		req := httptest.NewRequest("GET", "http://console.test"+path, nil)
		req.AddCookie(ck)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	code, page := get("/console/?person=alice")
	if code != 200 {
		t.Fatalf("alice's view: %d", code)
	}
	for _, want := range []string{`<section class="card" id="calls">`, "make alice-build", `<tr data-link="download-alice-0123">`, "/sandbox/alice.txt",
		`name="action" value="revoke_link"><input type="hidden" name="id" value="download-alice-0123">`} {
		if !strings.Contains(page, want) {
			t.Errorf("alice's view lacks %s", want)
		}
	}
	for _, not := range []string{"make bob-build", "download-bob-0123"} {
		if strings.Contains(page, not) {
			t.Errorf("alice's view shows %s", not)
		}
	}
	if _, all := get("/console/"); strings.Contains(all, `id="calls"`) || strings.Contains(all, `data-link=`) {
		t.Errorf("the overview of everyone lists calls or links")
	}
	if code, _ := get("/console/?person=carol"); code != http.StatusNotFound {
		t.Errorf("the view of carol, whom no line names: %d", code)
	}
}
