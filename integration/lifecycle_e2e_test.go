package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// The lifecycle of people's sandboxes, through a real Caddy and real Docker: what
// stops a container stays stopped until a call or the operator starts it, previews
// keep their owner's sandbox in use, max_sandboxes counts what exists, a session id
// is its person's, and a person removed by a reload leaves a stopped container the
// console still shows.

// sessionStatus sends one request to /mcp with key and session id sid and returns the
// status: POST a tools/list, GET a stream (closed at once), DELETE the session.
func sessionStatus(t testing.TB, s *testsite.Site, method, key, sid string) int {
	t.Helper()
	var body io.Reader
	if method == "POST" {
		body = strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, s.URL+"/mcp", body)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s /mcp: %v", method, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// consoleAct posts a console API action and returns its status and body.
func consoleAct(t testing.TB, s *testsite.Site, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL+"/console/api"+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// consoleSandboxList is GET /console/api/sandboxes by person.
func consoleSandboxList(t testing.TB, s *testsite.Site) map[string]map[string]any {
	t.Helper()
	var out struct{ Sandboxes []map[string]any }
	consoleGet(t, http.DefaultClient, s.URL, s.Key, "/console/api/sandboxes", &out)
	m := map[string]map[string]any{}
	for _, sb := range out.Sandboxes {
		m[sb["person"].(string)] = sb
	}
	return m
}

// consoleGet reads the console's JSON API at path of the site at base with the
// operator's key into v; anything but 200 and JSON fails the test.
func consoleGet(t testing.TB, c *http.Client, base, key, path string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, v); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
}

// TestSessionIDsBoundToPerson: bob's key with alice's session id opens no stream of
// hers, calls nothing in her session and does not end it: each gets 404, as an unknown
// session does, and her session works on. The operator's key fares no better.
func TestSessionIDsBoundToPerson(t *testing.T) {
	p := startPeopleSite(t, []string{"alice", "bob"})
	alice := rawSessionAs(p.Site, t, p.keys["alice"])
	if !strings.HasPrefix(alice.sid, "mcp-session-") {
		t.Fatalf("session id %q", alice.sid)
	}
	for _, other := range []string{"bob", ""} {
		for _, method := range []string{"POST", "GET", "DELETE"} {
			if code := sessionStatus(t, p.Site, method, p.keys[other], alice.sid); code != http.StatusNotFound {
				t.Errorf("%q's key, %s with alice's session id: %d, want 404", other, method, code)
			}
		}
	}
	// A made-up id is as unknown.
	if code := sessionStatus(t, p.Site, "POST", p.keys["bob"], "mcp-session-00000000-0000-4000-8000-000000000000"); code != http.StatusNotFound {
		t.Errorf("a made-up session id: %d, want 404", code)
	}
	if res, rerr := alice.call("tools/list", map[string]any{}); rerr != nil || !strings.Contains(string(res), `"execute"`) {
		t.Fatalf("alice's own session after bob's tries: %.200s %v", res, rerr)
	}
	if code := sessionStatus(t, p.Site, "POST", p.keys["alice"], alice.sid); code != http.StatusOK {
		t.Errorf("alice with her session id: %d, want 200", code)
	}
	alice.end()
}

// TestEgressStopsHold: with egress, idle_stop and the console's Stop stop a sandbox
// for good: the egress listener does not start it again (watched for 20 s). The next
// call starts it, and the proxy follows it there.
func TestEgressStopsHold(t *testing.T) {
	up := newEgressUpstream(t)
	t.Setenv("EGRESS_TEST_SECRET", "unused-"+testenv.RandomHex(8))
	p := startPeopleSite(t, []string{"alice"}, append(egressDirective(up.port, "allowed.test:"+up.port), "idle_stop 8s")...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	get := "wget -q -O - http://allowed.test:" + up.port + "/"
	for _, person := range []string{"", "alice"} {
		st := testsite.Structured(t, testsite.Call(ctx, t, p.client(ctx, person), "execute", map[string]any{"command": get + "first"}))
		if st["stdout"] != "hello from allowed.test:"+up.port+"/first\n" {
			t.Fatalf("%q through the proxy: %v", person, st)
		}
	}
	if code, body := consoleAct(t, p.Site, "/sandboxes/alice/stop"); code != 200 {
		t.Fatalf("console stop: %d %s", code, body)
	}
	alice, operator := p.containerOf("alice"), p.containerOf("")
	if testsite.ContainerRunning(t, p.Docker, alice) {
		t.Fatal("alice's container runs after the console's Stop")
	}
	testenv.WaitFor(t, 30*time.Second, "the operator's idle sandbox to stop", func() bool { return !testsite.ContainerRunning(t, p.Docker, operator) })
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		for who, name := range map[string]string{"alice (console stop)": alice, "operator (idle stop)": operator} {
			if testsite.ContainerRunning(t, p.Docker, name) {
				t.Fatalf("%s's container runs again", who)
			}
		}
	}
	// The next call starts it; its first command already reaches the proxy.
	st := testsite.Structured(t, testsite.Call(ctx, t, p.client(ctx, "alice"), "execute", map[string]any{"command": get + "again"}))
	if st["stdout"] != "hello from allowed.test:"+up.port+"/again\n" {
		t.Fatalf("after the stop, through the proxy: %v", st)
	}
	if testsite.ContainerRunning(t, p.Docker, operator) {
		t.Fatal("alice's call started the operator's container")
	}
	// The log says who stopped each.
	log, _ := os.ReadFile(filepath.Join(p.Storage, "caddy.log"))
	for name, by := range map[string]string{alice: "operator", operator: "idle_stop"} {
		found := false
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, `"msg":"stopped sandbox container; /sandbox is kept"`) && strings.Contains(line, `"container":"`+name+`"`) {
				found = found || strings.Contains(line, `"by":"`+by+`"`)
				if !strings.Contains(line, `"by":"`+by+`"`) {
					t.Errorf("%s stopped by another: %s", name, line)
				}
			}
		}
		if !found {
			t.Errorf("no log line of %s stopped by %s", name, by)
		}
	}
}

// TestRemovedPersonStoppedAndListed: a reload without carol stops her running
// container within 30 s and keeps it; the console lists it as removed, Stop and
// Delete work on it (Delete asks what becomes of the volume), the other actions do
// not start it.
func TestRemovedPersonStoppedAndListed(t *testing.T) {
	p := startPeopleSite(t, []string{"alice", "carol"})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, person := range []string{"alice", "carol"} {
		testsite.Call(ctx, t, p.client(ctx, person), "execute", map[string]any{"command": "echo " + person + " > /sandbox/mine"})
	}
	carol := p.containerOf("carol")
	begin := time.Now()
	p.Load(p.options([]string{"alice"}))
	testenv.WaitFor(t, 30*time.Second, "carol's container to stop", func() bool { return !testsite.ContainerRunning(t, p.Docker, carol) })
	t.Logf("carol's container stopped %v after the reload", time.Since(begin).Round(100*time.Millisecond))
	if !testsite.ContainerRunning(t, p.Docker, p.containerOf("alice")) {
		t.Fatal("the reload stopped alice's container")
	}

	m := consoleSandboxList(t, p.Site)
	if c := m["carol"]; c == nil || c["removed"] != true || c["container"] != carol || c["state"] != "exited" {
		t.Fatalf("carol in the console: %v", c)
	}
	if a := m["alice"]; a == nil || a["removed"] != nil {
		t.Fatalf("alice in the console: %v", a)
	}
	// The overview shows her row as removed, with Delete (which asks about the volume)
	// and without the actions that would start it.
	u := newConsoleUser(t, p.URL)
	if resp, _ := u.do("POST", "/console/signin", url.Values{"api_key": {p.Key}}, map[string]string{"Origin": p.URL}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("console sign-in: %d", resp.StatusCode)
	}
	_, page := u.do("GET", "/console", nil, nil)
	if !strings.Contains(page, `data-person="carol" data-removed="true"`) || !strings.Contains(page, `href="/console/confirm?action=sandbox_delete&amp;person=carol"`) ||
		strings.Contains(page, `action=sandbox_restart&amp;person=carol`) || strings.Contains(page, `action=sandbox_delete&amp;person=alice`) {
		t.Fatalf("overview: %s", page)
	}
	if _, page = u.do("GET", "/console/confirm?action=sandbox_delete&person=carol", nil, nil); !strings.Contains(page, `name="volume" value="keep"`) || !strings.Contains(page, `name="volume" value="delete"`) {
		t.Fatalf("delete confirmation: %s", page)
	}
	// Her key no longer signs in; the operator may only stop or delete.
	req, _ := http.NewRequest("POST", p.URL+"/mcp", bytes.NewReader([]byte(`{}`)))
	req.Header.Set("Authorization", "Bearer "+p.keys["carol"])
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("carol's key after the reload: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	for _, act := range []string{"start", "restart", "recreate"} {
		if code, body := consoleAct(t, p.Site, "/sandboxes/carol/"+act); code != http.StatusConflict {
			t.Errorf("%s on carol's: %d %s, want 409", act, code, body)
		}
	}
	if testsite.ContainerRunning(t, p.Docker, carol) {
		t.Fatal("an action started carol's container")
	}
	// Stop answers for her (it did 404 before).
	if code, body := consoleAct(t, p.Site, "/sandboxes/carol/stop"); code != 200 {
		t.Fatalf("stop carol's: %d %s", code, body)
	}
	if code, body := consoleAct(t, p.Site, "/sandboxes/carol/delete"); code != http.StatusBadRequest || !strings.Contains(body, "volume=keep") {
		t.Fatalf("delete without a volume choice: %d %s", code, body)
	}
	if code, body := consoleAct(t, p.Site, "/sandboxes/carol/delete?volume=keep"); code != 200 {
		t.Fatalf("delete carol's, keeping the volume: %d %s", code, body)
	}
	if _, err := p.Docker.ContainerInspect(ctx, carol); err == nil {
		t.Fatal("carol's container is still there")
	}
	if _, err := p.Docker.VolumeInspect(ctx, p.Volume+"-carol"); err != nil {
		t.Fatalf("carol's volume: %v", err)
	}
	if _, ok := consoleSandboxList(t, p.Site)["carol"]; ok {
		t.Fatal("the console lists carol after the delete")
	}
	if code, _ := consoleAct(t, p.Site, "/sandboxes/carol/stop"); code != http.StatusNotFound {
		t.Errorf("stop after the delete: %d, want 404", code)
	}

	// Added again, carol gets her files back from the kept volume.
	p.Load(p.options([]string{"alice", "carol"}))
	st := testsite.Structured(t, testsite.Call(ctx, t, p.client(ctx, "carol"), "execute", map[string]any{"command": "cat /sandbox/mine"}))
	if st["stdout"] != "carol\n" {
		t.Fatalf("carol's files after she was added again: %v", st)
	}
	// Removed again and deleted with her volume: both go.
	p.Load(p.options([]string{"alice"}))
	testenv.WaitFor(t, 30*time.Second, "carol's container to stop", func() bool { return !testsite.ContainerRunning(t, p.Docker, carol) })
	if code, body := consoleAct(t, p.Site, "/sandboxes/carol/delete?volume=delete"); code != 200 {
		t.Fatalf("delete carol's with the volume: %d %s", code, body)
	}
	if _, err := p.Docker.VolumeInspect(ctx, p.Volume+"-carol"); err == nil {
		t.Fatal("carol's volume is still there")
	}
}

// TestMaxSandboxesAcrossReload: max_sandboxes counts the people's sandboxes that
// exist, whichever configuration made them: after a reload that adds people, a new
// person beyond the cap is refused, while one whose container exists goes on.
func TestMaxSandboxesAcrossReload(t *testing.T) {
	p := startPeopleSite(t, []string{"alice", "bob", "dave"}, "max_sandboxes 2")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, person := range []string{"alice", "bob"} {
		if res := testsite.Call(ctx, t, p.client(ctx, person), "execute", map[string]any{"command": "true"}); res.IsError {
			t.Fatalf("%s: %s", person, testsite.ResultText(res))
		}
	}
	refused := func(person string) string {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = "execute", map[string]any{"command": "true"}
		res, err := p.client(ctx, person).CallTool(ctx, req)
		if err != nil {
			return err.Error()
		}
		if res.IsError {
			return testsite.ResultText(res)
		}
		return ""
	}
	if msg := refused("dave"); !strings.Contains(msg, "max_sandboxes") {
		t.Fatalf("dave, third with max_sandboxes 2: %q", msg)
	}
	// A reload (same people, same cap) does not give room for more.
	p.Load(p.options([]string{"alice", "bob", "dave"}))
	if msg := refused("dave"); !strings.Contains(msg, "max_sandboxes") {
		t.Fatalf("dave after a reload: %q", msg)
	}
	if _, err := p.Docker.ContainerInspect(ctx, p.containerOf("dave")); err == nil {
		t.Fatal("dave's container was made")
	}
	// Those whose sandboxes exist go on under the new configuration.
	for _, person := range []string{"bob", "alice"} {
		if msg := refused(person); msg != "" {
			t.Fatalf("%s after the reload: %q", person, msg)
		}
	}
	// Deleting one makes room: bob is removed, his sandbox deleted, dave gets one.
	p.Load(p.options([]string{"alice", "dave"}))
	testenv.WaitFor(t, 30*time.Second, "bob's container to stop", func() bool { return !testsite.ContainerRunning(t, p.Docker, p.containerOf("bob")) })
	if msg := refused("dave"); !strings.Contains(msg, "max_sandboxes") {
		t.Fatalf("dave while bob's stopped sandbox exists: %q", msg)
	}
	if code, body := consoleAct(t, p.Site, "/sandboxes/bob/delete?volume=delete"); code != 200 {
		t.Fatalf("delete bob's: %d %s", code, body)
	}
	if msg := refused("dave"); msg != "" {
		t.Fatalf("dave after bob's sandbox was deleted: %q", msg)
	}
}

// servePreview copies the preview server and its site into container name, starts it
// on port 8000 through c, and returns the preview URL expose_port gives.
func servePreview(ctx context.Context, t *testing.T, s *testsite.Site, name string, c *mcpclient.Client) string {
	t.Helper()
	in := *s
	in.Container = name
	(&previewSite{Site: &in}).copyIn(t)
	if res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "setsid nohup /usr/local/bin/previewserver -addr 127.0.0.1:8000 -dir /sandbox/site >/dev/null 2>&1 </dev/null & for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null && break; sleep 0.1; done"}); res.IsError {
		t.Fatal(testsite.ResultText(res))
	}
	res := testsite.Call(ctx, t, c, "expose_port", map[string]any{"port": 8000})
	u, _ := testsite.Structured(t, res)["url"].(string)
	if res.IsError || u == "" {
		t.Fatalf("expose_port: %s", testsite.ResultText(res))
	}
	return u
}

// TestPreviewInUseKeepsOwnerSandbox: a stream through alice's preview (server-sent
// events for three idle periods, on one relay), with no tool call, keeps her sandbox
// from idle stop: every event arrives and the container is never stopped (same start
// time). Once the preview is unused, the sandbox is stopped.
func TestPreviewInUseKeepsOwnerSandbox(t *testing.T) {
	const idle = 4 * time.Second
	p := startPeopleSite(t, []string{"alice"}, "previews localhost", "idle_stop "+idle.String())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alice := p.client(ctx, "alice")
	testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "true"}) // creates her container
	name := p.containerOf("alice")
	u := servePreview(ctx, t, p.Site, name, alice)
	startedAt := func() string {
		info, err := p.Docker.ContainerInspect(ctx, name)
		if err != nil || info.State == nil {
			t.Fatalf("inspecting %s: %v", name, err)
		}
		return info.State.StartedAt
	}
	before := startedAt()
	ticks := int(3 * idle / (100 * time.Millisecond))
	resp, err := p.web.Get(fmt.Sprintf("%ssse?count=%d", u, ticks))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), fmt.Sprintf("data: tick %d\n", ticks)) {
		t.Fatalf("the stream through the preview: %d, %d bytes, ends %q", resp.StatusCode, len(b), b[max(0, len(b)-60):])
	}
	if after := startedAt(); after != before || !testsite.ContainerRunning(t, p.Docker, name) {
		t.Fatalf("alice's container was stopped while her preview was in use (started %s, then %s)", before, after)
	}
	testenv.WaitFor(t, 4*idle+10*time.Second, "the unused sandbox to stop", func() bool { return !testsite.ContainerRunning(t, p.Docker, name) })
}
