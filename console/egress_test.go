package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
)

type fakeEgress struct{ list []EgressRefusal }

func (f fakeEgress) Refusals(context.Context) ([]EgressRefusal, error) {
	return append([]EgressRefusal(nil), f.list...), nil
}

// TestEgressAPI: GET /console/api/egress lists refusals across the sandboxes, newest
// first, each with its person, filtered by person on request; the overview's card
// names the person and escapes the container's text; a site without egress has none.
func TestEgressAPI(t *testing.T) {
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	c := newTestConsole(t, fullLog(t))
	get := func(path string) (int, string) {
		req := httptest.NewRequest("GET", "http://console.test"+path, nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/console/api/egress"); code != 404 || !strings.Contains(body, "no egress block") {
		t.Fatalf("without egress: %d %s", code, body)
	}
	c.opts.Egress = fakeEgress{[]EgressRefusal{
		{Person: "", Host: "gist.github.com", Reason: "denied by the operator", Count: 3, LastAt: t0},
		{Person: "alice", Host: "evil.example", Reason: "not allowed by the operator", Count: 7, LastAt: t0.Add(2 * time.Minute)},
		{Person: "bob", Host: `"<b>"`, Reason: "not a valid host name", Count: 1, LastAt: t0.Add(time.Minute)},
	}}
	code, body := get("/console/api/egress")
	var got struct {
		Refusals  []EgressRefusal `json:"refusals"`
		Approvals []any           `json:"approvals"`
	}
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil || got.Approvals == nil {
		t.Fatalf("%d %s %v", code, body, err)
	}
	if len(got.Refusals) != 3 || got.Refusals[0].Person != "alice" || got.Refusals[0].Host != "evil.example" ||
		got.Refusals[0].Count != 7 || !got.Refusals[0].LastAt.Equal(t0.Add(2*time.Minute)) || got.Refusals[2].Person != "" {
		t.Fatalf("refusals %+v", got.Refusals)
	}
	for q, want := range map[string]string{"alice": "evil.example", "-": "gist.github.com"} {
		_, body := get("/console/api/egress?person=" + q)
		got.Refusals = nil
		if err := json.Unmarshal([]byte(body), &got); err != nil || len(got.Refusals) != 1 || got.Refusals[0].Host != want {
			t.Fatalf("person=%s: %s", q, body)
		}
	}

	c.opts.Sandboxes = &fakeSandboxes{}
	req := httptest.NewRequest("GET", "http://console.test/console", nil)
	req.AddCookie(signedIn(t, c))
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	page := rec.Body.String()
	for _, want := range []string{
		`<h2>Egress refusals</h2>`,
		`<tr><td><code>evil.example</code></td><td>alice</td><td class="num">×7</td>`,
		`<tr><td><code>&#34;&lt;b&gt;&#34;</code></td><td>bob</td><td class="num">×1</td>`,
		`<tr><td><code>gist.github.com</code></td><td>operator</td><td class="num">×3</td>`,
	} {
		if !strings.Contains(page, want) {
			t.Fatalf("overview lacks %s:\n%s", want, page)
		}
	}
}

// approvingEgress keeps approvals in memory (the real store is tested in egress/ and
// through Caddy in integration/).
type approvingEgress struct {
	fakeEgress
	list *[]EgressApproval
}

func (a approvingEgress) Approvals(context.Context) ([]EgressApproval, error) {
	return append([]EgressApproval(nil), *a.list...), nil
}

func (a approvingEgress) RevokeApproval(_ context.Context, id string) (EgressApproval, error) {
	for i, x := range *a.list {
		if x.ID == id {
			*a.list = append((*a.list)[:i], (*a.list)[i+1:]...)
			return x, nil
		}
	}
	return EgressApproval{}, ErrNotFound
}

// TestEgressApprovalsAPI: approvals are listed (per person on request) and revoked by
// id; an unknown id or a wrong path is 404.
func TestEgressApprovalsAPI(t *testing.T) {
	c := newTestConsole(t, fullLog(t))
	list := []EgressApproval{{ID: "a1", Person: "alice", Host: "pypi.org", Port: 443}, {ID: "o1", Host: "x.test", Port: 80}}
	c.opts.Egress = approvingEgress{list: &list}
	do := func(method, path string) (int, string) {
		req := httptest.NewRequest(method, "http://console.test"+path, nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	var got struct {
		Approvals []EgressApproval `json:"approvals"`
	}
	for q, want := range map[string][]string{"": {"a1", "o1"}, "?person=alice": {"a1"}, "?person=-": {"o1"}, "?person=bob": {}} {
		code, body := do("GET", "/console/api/egress"+q)
		got.Approvals = nil
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil || len(got.Approvals) != len(want) {
			t.Fatalf("%s: %d %s", q, code, body)
		}
		for i, id := range want {
			if got.Approvals[i].ID != id {
				t.Fatalf("%s: %s", q, body)
			}
		}
	}
	if code, body := do("DELETE", "/console/api/egress/approvals/a1"); code != 200 || len(list) != 1 || list[0].ID != "o1" {
		t.Fatalf("revoke: %d %s %+v", code, body, list)
	}
	if code, body := do("DELETE", "/console/api/egress/approvals/a1"); code != 404 || !strings.Contains(body, "GET /console/api/egress") {
		t.Fatalf("revoke again: %d %s", code, body)
	}
	if code, _ := do("DELETE", "/console/api/egress/o1"); code != 404 || len(list) != 1 {
		t.Fatalf("wrong path: %d", code)
	}
}

// TestEgressApprovalsOnOverview: the overview lists the approvals with person, host,
// when and answer, each with a Revoke button whose form revokes it through the same
// action as the API; the activity log and the server log name the person and host.
func TestEgressApprovalsOnOverview(t *testing.T) {
	log := NewAuditLog(fileStorage(t), "console", 100, nil)
	c := newTestConsole(t, log)
	core, logs := observer.New(zap.InfoLevel)
	c.log = zap.New(core)
	c.opts.Sandboxes = &fakeSandboxes{}
	at := time.Now().Add(-3 * time.Minute)
	list := []EgressApproval{{ID: "b1", Person: "bob", Host: "always.test", Port: 8080, At: at, Answer: AnswerAllowAlways}}
	c.opts.Egress = approvingEgress{list: &list}
	ck := signedIn(t, c)
	get := func(path string) string {
		req := httptest.NewRequest("GET", "http://console.test"+path, nil)
		req.AddCookie(ck)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec.Body.String()
	}
	page := get("/console")
	for _, want := range []string{`<section class="card" id="approvals">`, `<tr data-approval="b1"><td class="person">bob</td><td><code>always.test:8080</code></td>`,
		`title="` + when(at) + `">3m ago</td><td>allow always</td>`, `name="action" value="revoke_egress_approval"><input type="hidden" name="id" value="b1">`} {
		if !strings.Contains(page, want) {
			t.Fatalf("overview lacks %s:\n%s", want, page)
		}
	}
	req := httptest.NewRequest("GET", "http://console.test/console", nil)
	req.AddCookie(ck)
	sess, _ := c.sessions.fromRequest(req, cookieHTTP)
	req = httptest.NewRequest("POST", "http://console.test/console/action", strings.NewReader("action=revoke_egress_approval&id=b1&back=overview&csrf="+sess.csrf))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(ck)
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther || len(list) != 0 {
		t.Fatalf("revoke from the page: %d %+v", rec.Code, list)
	}
	if page := get(rec.Header().Get("Location")); !strings.Contains(page, flashes[actRevokeApproval]) || strings.Contains(page, `data-approval="b1"`) ||
		!strings.Contains(page, "No host is allowed always") {
		t.Fatalf("after revoking: %s", page)
	}
	e := log.Query(Filter{Tool: "console." + actRevokeApproval})
	if len(e) != 1 || e[0].Args != `{"id":"b1","person":"bob","host":"always.test","port":8080}` || e[0].Outcome != audit.OutcomeOK {
		t.Fatalf("activity log: %+v", e)
	}
	// The revocation is bob's: his activity lists it, under his name.
	if e := log.Query(Filter{Person: "bob", Tool: "console." + actRevokeApproval}); len(e) != 1 {
		t.Fatalf("bob's activity lacks the revocation: %+v", log.Query(Filter{}))
	}
	if page := get("/console/activity?person=bob"); !strings.Contains(page, `<td class="person">bob</td><td>console`) || !strings.Contains(page, "always.test") {
		t.Fatalf("activity page of bob: %s", page)
	}
	got := logs.FilterMessage("egress approval revoked").All()
	if len(got) != 1 || got[0].ContextMap()["person"] != "bob" || got[0].ContextMap()["host"] != "always.test" {
		t.Fatalf("server log: %+v", logs.All())
	}
}

// TestPersonView: the overview of one person (?person=NAME, linked from each row of
// the sandboxes) shows that person's sandbox, approvals and refusals only, names them
// in its heading and links to their activity; the operator's container card is left
// out for a person.
func TestPersonView(t *testing.T) {
	c := newTestConsole(t, fullLog(t))
	c.opts.Sandboxes = &fakeSandboxes{}
	list := []EgressApproval{{ID: "a1", Person: "alice", Host: "alice.test", Port: 443, Answer: AnswerAllowAlways},
		{ID: "b1", Person: "bob", Host: "bob.test", Port: 443, Answer: AnswerAllowAlways}}
	c.opts.Egress = approvingEgress{list: &list}
	ck := signedIn(t, c)
	get := func(path string) string {
		req := httptest.NewRequest("GET", "http://console.test"+path, nil)
		req.AddCookie(ck)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("%s: %d", path, rec.Code)
		}
		return rec.Body.String()
	}
	all := get("/console/")
	for _, want := range []string{`<a href="/console/?person=alice">alice</a>`, `<a href="/console/?person=-">operator</a>`, `data-approval="a1"`, `data-approval="b1"`, "<h2>Container"} {
		if !strings.Contains(all, want) {
			t.Fatalf("overview lacks %s:\n%s", want, all)
		}
	}
	page := get("/console/?person=alice")
	for _, want := range []string{"<h1>alice's sandbox</h1>", `href="/console/activity?person=alice"`, `data-person="alice"`, `data-approval="a1"`} {
		if !strings.Contains(page, want) {
			t.Errorf("alice's view lacks %s", want)
		}
	}
	for _, not := range []string{`data-person="bob"`, `data-approval="b1"`, "<h2>Container"} {
		if strings.Contains(page, not) {
			t.Errorf("alice's view shows %s", not)
		}
	}
	if op := get("/console/?person=-"); !strings.Contains(op, "<h2>Container") || strings.Contains(op, `data-person="alice"`) {
		t.Errorf("the operator's view: no container card, or alice's row")
	}
}
