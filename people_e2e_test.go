package mcpsandbox

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/metrics"
)

// A site with the operator and two people, alice and bob, through a real Caddy and real
// sandboxes: each key signs in, each person works in a container of their own, and
// nothing of one person's opens for another.

// peopleSite is a site with `person` lines; keys are by person, "" the operator's.
type peopleSite struct {
	*site
	keys  map[string]string
	extra []string     // directives besides the person lines
	web   *http.Client // dials Caddy whatever the host name (preview hosts)
}

// startPeopleSite starts a site (any host, previews under localhost) with the given
// people, whose containers and volumes are removed when the test ends.
func startPeopleSite(t testing.TB, people []string, directives ...string) *peopleSite {
	t.Helper()
	s := newSite(t)
	p := &peopleSite{site: s, keys: map[string]string{"": s.key}, extra: directives}
	for _, name := range people {
		p.keys[name] = name + "-key-" + randomHex(16)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, name := range people {
			_ = s.docker.ContainerRemove(ctx, s.container+"-"+name, container.RemoveOptions{Force: true})
			_ = s.docker.VolumeRemove(ctx, s.volume+"-"+name, true)
		}
	})
	s.start(p.options(people))
	p.web = anyHostClient(s.port)
	return p
}

// options are the site's with person lines for people.
func (p *peopleSite) options(people []string) siteOptions {
	var lines []string
	for _, name := range people {
		lines = append(lines, "person "+name+" "+p.keys[name])
	}
	return siteOptions{address: "http://:%d", directive: append(lines, p.extra...)}
}

// client is an initialized MCP client signed in with person's key as bearer.
func (p *peopleSite) client(ctx context.Context, person string) *mcpclient.Client {
	p.t.Helper()
	return p.clientAs(ctx, p.url, mcp.LATEST_PROTOCOL_VERSION, p.keys[person])
}

// containerOf is the name of person's container.
func (p *peopleSite) containerOf(person string) string {
	if person == "" {
		return p.container
	}
	return p.container + "-" + person
}

// request sends a request through the site (any host) and returns status and body.
func (p *peopleSite) request(t testing.TB, method, u, bearer string, body io.Reader, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := p.web.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// reowned rewrites the owner of a link URL (".<owner>" after the signature; "" for
// none).
func reowned(link, owner string) string {
	u, _ := url.Parse(link)
	segs := strings.SplitN(strings.TrimPrefix(u.Path, "/"), "/", 3) // files|uploads, token, rest
	tok := segs[1]
	if i := strings.Index(tok, "."); i >= 0 {
		if j := strings.Index(tok[i+1:], "."); j >= 0 {
			tok = tok[:i+1+j]
		}
	}
	if owner != "" {
		tok += "." + owner
	}
	segs[1] = tok
	u.Path = "/" + strings.Join(segs, "/")
	return u.String()
}

// TestPeople: with the official TypeScript SDK, the operator's key and each person's
// work with OAuth and as bearer, and each runs in its own container; then a table of
// every tool and endpoint against another person's ids (job ids, link URLs, upload
// URLs, preview labels, task ids) shows each refused, and the console lists and acts
// on every sandbox.
func TestPeople(t *testing.T) {
	p := startPeopleSite(t, []string{"alice", "bob"}, "previews localhost", "preview_auth on")
	ctx := context.Background()

	t.Run("each key with OAuth and as bearer, in its own container", func(t *testing.T) {
		type run struct{ person, mode string }
		var runs []run
		for _, person := range []string{"", "alice", "bob"} {
			for _, mode := range []string{"oauth", "bearer"} {
				runs = append(runs, run{person, mode})
			}
		}
		errs := make([]error, len(runs))
		results := make([]tsResult, len(runs))
		var wg sync.WaitGroup
		for i, r := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = tsClient(p.site, r.mode, p.keys[r.person])
			}()
		}
		wg.Wait()
		for i, r := range runs {
			if errs[i] != nil {
				t.Fatalf("%q by %s: %v", r.person, r.mode, errs[i])
			}
			checkTSResult(t, results[i])
		}
		// Each wrote /sandbox/ts.txt: in three containers, on three volumes.
		ids, sockets := map[string]bool{}, map[string]bool{}
		for _, person := range []string{"", "alice", "bob"} {
			info, err := p.docker.ContainerInspect(ctx, p.containerOf(person))
			if err != nil {
				t.Fatalf("%q's container: %v", person, err)
			}
			ids[info.ID] = true
			vol := p.volume
			if person != "" {
				vol += "-" + person
			}
			// Its volume at /sandbox, and its own read-only directory for the agent's
			// direct channel.
			for _, m := range info.Mounts {
				switch {
				case m.Destination == "/sandbox" && m.Name == vol:
				case m.Destination == "/run/mcp-sandbox-agent" && m.Type == "bind" && !m.RW && !sockets[m.Source]:
					sockets[m.Source] = true
				default:
					t.Errorf("%q's container mounts %+v, want volume %s and a directory of its own", person, info.Mounts, vol)
				}
			}
			if len(info.Mounts) != 2 {
				t.Errorf("%q's container mounts %+v, want volume %s and a directory of its own", person, info.Mounts, vol)
			}
		}
		if len(ids) != 3 {
			t.Fatalf("%d containers for three keys", len(ids))
		}
		// The activity log names, for each person, both the OAuth client and the key.
		for _, person := range []string{"alice", "bob"} {
			var out struct{ Entries []apiEntry }
			apiCall(t, p.site, "GET", "/activity?limit=0&tool=execute&person="+person, &out)
			clients := map[string]bool{}
			for _, e := range out.Entries {
				clients[e.Client] = true
			}
			if !clients["TypeScript SDK e2e"] || !clients[person+"'s key"] || len(clients) != 2 {
				t.Errorf("%s's executes were made by %v, want the OAuth client and %s's key", person, clients, person)
			}
		}
	})

	alice, bob := p.client(ctx, "alice"), p.client(ctx, "bob")
	do := func(c *mcpclient.Client, tool string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		return call(ctx, t, c, tool, args)
	}
	mustOK := func(res *mcp.CallToolResult) map[string]any {
		t.Helper()
		if res.IsError {
			t.Fatal(resultText(res))
		}
		m, _ := res.StructuredContent.(map[string]any)
		return m
	}

	// What alice owns.
	mustOK(do(alice, "write_file", map[string]any{"path": "/sandbox/secret.txt", "content": "alice's secret"}))
	job := mustOK(do(alice, "execute", map[string]any{"command": "sleep 600", "wait": 0}))["job_id"].(string)
	share := mustOK(do(alice, "share_file", map[string]any{"path": "/sandbox/secret.txt"}))["url"].(string)
	upload := mustOK(do(alice, "upload_link", map[string]any{}))["url"].(string)
	bobUpload := mustOK(do(bob, "upload_link", map[string]any{}))["url"].(string)
	for _, c := range []*mcpclient.Client{alice, bob} {
		mustOK(do(c, "execute", map[string]any{"command": `mkdir -p /sandbox/www && echo "$(cat /sandbox/whoami 2>/dev/null)" > /sandbox/www/index.html && busybox httpd -p 127.0.0.1:8000 -h /sandbox/www`}))
	}
	mustOK(do(alice, "write_file", map[string]any{"path": "/sandbox/www/index.html", "content": "alice's page"}))
	preview := mustOK(do(alice, "expose_port", map[string]any{"port": 8000}))["url"].(string)
	aliceTasks := p.rawSessionAs(t, p.keys["alice"])
	taskRes, rerr := aliceTasks.call("tools/call", map[string]any{
		"name": "execute", "arguments": map[string]any{"command": "echo alices task; sleep 30"}, "task": map[string]any{},
	})
	if rerr != nil {
		t.Fatalf("alice's task: %s", rerr.Message)
	}
	var created struct{ Task createdTask }
	if err := json.Unmarshal(taskRes, &created); err != nil || created.Task.ID == "" {
		t.Fatalf("alice's task: %s", taskRes)
	}
	taskID := created.Task.ID

	t.Run("another person's ids are refused", func(t *testing.T) {
		for _, tc := range []struct {
			tool string
			args map[string]any
		}{
			{"job_output", map[string]any{"job_id": job, "wait": 0}},
			{"job_input", map[string]any{"job_id": job, "input": "x", "wait": 0}},
			{"job_kill", map[string]any{"job_id": job}},
			{"read_file", map[string]any{"path": "/sandbox/secret.txt"}},
			{"share_file", map[string]any{"path": "/sandbox/secret.txt"}},
			{"edit_file", map[string]any{"path": "/sandbox/secret.txt", "old_text": "alice", "new_text": "bob"}},
		} {
			if res := do(bob, tc.tool, tc.args); !res.IsError {
				t.Errorf("bob's %s on alice's: %s", tc.tool, resultText(res))
			}
		}
		if res := do(bob, "job_list", map[string]any{}); strings.Contains(resultText(res), job) {
			t.Errorf("bob's job_list shows alice's job: %s", resultText(res))
		}
		if res := do(bob, "unexpose_port", map[string]any{"port": 8000}); strings.Contains(resultText(res), "no longer exposed") {
			t.Errorf("bob's unexpose_port closed alice's preview: %s", resultText(res))
		}
		// alice's job still runs, and her file is as she wrote it.
		if res := do(alice, "job_list", map[string]any{}); !strings.Contains(resultText(res), job) {
			t.Errorf("alice's job is gone: %s", resultText(res))
		}

		// Links: alice's opens her sandbox; moved to bob, or to the operator, it is refused.
		if resp, body := p.request(t, "GET", share, "", nil); resp.StatusCode != 200 || body != "alice's secret" {
			t.Errorf("alice's download link: %d %q", resp.StatusCode, body)
		}
		for _, owner := range []string{"bob", ""} {
			if resp, _ := p.request(t, "GET", reowned(share, owner), "", nil); resp.StatusCode != http.StatusForbidden {
				t.Errorf("alice's download link as %q's: %d, want 403", owner, resp.StatusCode)
			}
		}
		if resp, _ := p.request(t, "PUT", reowned(bobUpload, "alice")+"planted.txt", "", strings.NewReader("x")); resp.StatusCode != http.StatusForbidden {
			t.Errorf("bob's upload link as alice's: %d, want 403", resp.StatusCode)
		}
		if resp, body := p.request(t, "PUT", upload+"given.txt", "", strings.NewReader("for alice")); resp.StatusCode >= 300 {
			t.Errorf("alice's upload link: %d %s", resp.StatusCode, body)
		}
		if res := do(bob, "read_file", map[string]any{"path": "/sandbox/uploads/given.txt"}); !res.IsError {
			t.Errorf("alice's upload landed in bob's sandbox: %s", resultText(res))
		}
		if res := do(alice, "read_file", map[string]any{"path": "/sandbox/uploads/given.txt"}); res.IsError || !strings.Contains(resultText(res), "for alice") {
			t.Errorf("alice's upload: %s", resultText(res))
		}

		// Previews: only alice's key opens alice's preview, and it shows her sandbox.
		signin := func(key string) *http.Response {
			resp, _ := p.request(t, "POST", preview+".mcp-sandbox/preview-signin", "",
				strings.NewReader(url.Values{"key": {key}, "next": {"/"}}.Encode()), "Content-Type", "application/x-www-form-urlencoded")
			return resp
		}
		for _, person := range []string{"bob", ""} {
			if resp := signin(p.keys[person]); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%q's key on alice's preview: %d, want 401", person, resp.StatusCode)
			}
		}
		resp := signin(p.keys["alice"])
		if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
			t.Fatalf("alice's key on her preview: %d", resp.StatusCode)
		}
		c := resp.Cookies()[0]
		if resp, body := p.request(t, "GET", preview, "", nil, "Cookie", c.Name+"="+c.Value); resp.StatusCode != 200 || !strings.Contains(body, "alice's page") {
			t.Errorf("alice's preview: %d %q", resp.StatusCode, body)
		}

		// Tasks: bob, in his own session, cannot see, read or cancel hers; in hers he
		// gets nothing at all (TestSessionIDsBoundToPerson).
		bobTasks := p.rawSessionAs(t, p.keys["bob"])
		if code := sessionStatus(t, p.site, "POST", p.keys["bob"], aliceTasks.sid); code != http.StatusNotFound {
			t.Errorf("bob with alice's session id: %d, want 404", code)
		}
		for name, c := range map[string]*rawMCP{"bob's session": bobTasks} {
			for _, method := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
				if _, rerr := c.call(method, map[string]any{"taskId": taskID}); rerr == nil {
					t.Errorf("bob in %s: %s of alice's task answered", name, method)
				}
			}
			res, rerr := c.call("tasks/list", map[string]any{})
			if rerr == nil && strings.Contains(string(res), taskID) {
				t.Errorf("bob in %s lists alice's task: %s", name, res)
			}
		}
		if res, rerr := aliceTasks.call("tasks/get", map[string]any{"taskId": taskID}); rerr != nil || !strings.Contains(string(res), "working") {
			t.Errorf("alice's own task: %s %v", res, rerr)
		}

		// The console is the operator's: a person's key is not the API key.
		if resp, _ := p.request(t, "GET", p.url+"/console/api/sandboxes", p.keys["alice"], nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("alice's key on the console API: %d, want 401", resp.StatusCode)
		}
	})

	t.Run("the console lists and acts on every sandbox", func(t *testing.T) {
		list := func() map[string]map[string]any {
			var out struct{ Sandboxes []map[string]any }
			if code := apiCall(t, p.site, "GET", "/sandboxes", &out); code != 200 {
				_, body := p.request(t, "GET", p.url+"/console/api/sandboxes", p.key, nil)
				t.Fatalf("GET /console/api/sandboxes: %d %s", code, body)
			}
			m := map[string]map[string]any{}
			for _, sb := range out.Sandboxes {
				m[sb["person"].(string)] = sb
			}
			return m
		}
		m := list()
		if len(m) != 3 || m["alice"]["state"] != "running" || m["alice"]["jobs"].(float64) < 1 ||
			m["alice"]["container"] != p.containerOf("alice") || m["bob"]["last_activity"] == nil || m["alice"]["memory"].(float64) <= 0 {
			t.Fatalf("sandboxes: %v", m)
		}
		for _, step := range []struct{ path, state string }{
			{"bob/stop", "exited"}, {"bob/start", "running"}, {"bob/restart", "running"}, {"bob/recreate", "running"},
		} {
			var out map[string]any
			if code := apiCall(t, p.site, "POST", "/sandboxes/"+step.path, &out); code != 200 {
				t.Fatalf("POST %s: %d %v", step.path, code, out)
			}
			if got := list()["bob"]["state"]; got != step.state {
				t.Errorf("after %s bob's sandbox is %v, want %s", step.path, got, step.state)
			}
		}
		if code := apiCall(t, p.site, "POST", "/sandboxes/carol/stop", &map[string]any{}); code != 404 {
			t.Errorf("a person who is not configured: %d", code)
		}
		// alice was not touched: her job still runs.
		if got := list()["alice"]; got["state"] != "running" || got["jobs"].(float64) < 1 {
			t.Errorf("alice's sandbox after bob's were acted on: %v", got)
		}
	})

	t.Run("metrics: sandboxes by state, calls by person", func(t *testing.T) {
		for _, person := range []string{"alice", "bob", "-"} {
			if counterValue(t, metrics.PersonCalls.WithLabelValues(person)) < 1 {
				t.Errorf("no calls counted for %s", person)
			}
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.Sandboxes(pooledSandboxes))
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 {
			t.Fatalf("gathering: %v %v", mfs, err)
		}
		running := 0.0
		for _, m := range mfs[0].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "state" && l.GetValue() == "running" {
					running += m.GetGauge().GetValue()
				}
			}
		}
		if running < 3 {
			t.Errorf("%v sandboxes running, want the operator's, alice's and bob's: %v", running, mfs[0])
		}
	})
	t.Run("a person removed from the config loses everything at once", func(t *testing.T) {
		mustOK(do(bob, "write_file", map[string]any{"path": "/sandbox/b.txt", "content": "bob's"}))
		link := mustOK(do(bob, "share_file", map[string]any{"path": "/sandbox/b.txt"}))["url"].(string)
		p.load(p.options([]string{"alice"}))
		if resp, _ := p.request(t, "POST", p.url+"/mcp", p.keys["bob"], strings.NewReader("{}")); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("bob's key after he was removed: %d, want 401", resp.StatusCode)
		}
		if resp, _ := p.request(t, "GET", link, "", nil); resp.StatusCode != http.StatusGone {
			t.Errorf("bob's link after he was removed: %d, want 410", resp.StatusCode)
		}
		if resp, body := p.request(t, "GET", share, "", nil); resp.StatusCode != 200 || body != "alice's secret" {
			t.Errorf("alice's link after bob was removed: %d %q", resp.StatusCode, body)
		}
		// His container is kept, stopped, and listed as removed until the operator
		// deletes it (TestRemovedPersonStoppedAndListed).
		var out struct{ Sandboxes []map[string]any }
		apiCall(t, p.site, "GET", "/sandboxes", &out)
		if len(out.Sandboxes) != 3 || out.Sandboxes[2]["person"] != "bob" || out.Sandboxes[2]["removed"] != true {
			t.Errorf("sandboxes after bob was removed: %v", out.Sandboxes)
		}
	})
}
