package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"golang.org/x/oauth2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// The operator of a team, through a real Caddy and real sandboxes: whose every job,
// sign-in, link and activity entry is, and keys added, rotated and removed.

// personAPI calls the console API with the operator's key and decodes the answer.
func personAPI(t *testing.T, p *peopleSite, method, path string, out any) int {
	t.Helper()
	resp, body := p.request(t, method, p.URL+"/console/api"+path, p.Key, nil)
	if out != nil {
		if err := json.Unmarshal([]byte(body), out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, body)
		}
	}
	return resp.StatusCode
}

// TestOperatorSeesWhose: with alice and bob, the console's jobs API lists alice's real
// job with her name and kills it in her container (not in bob's); Caddy's log lines,
// her calls in the activity log, her download link and preview in the links, and the
// OAuth sign-in she made with her key in the grants all name her; revoking her
// preview closes it.
func TestOperatorSeesWhose(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and the test image")
	}
	p := startPeopleSite(t, []string{"alice", "bob"}, "previews localhost")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alice := p.client(ctx, "alice")
	st := testsite.Structured(t, testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "echo hi > /sandbox/a.txt; sleep 3861; echo never", "wait": 1}))
	if st["running"] != true {
		t.Fatalf("alice's command did not become a job: %v", st)
	}
	job := st["job_id"].(string)
	inAlice := *p.Site
	inAlice.Container = p.containerOf("alice")
	sleeping := func() bool { return strings.Contains(inAlice.TryExec("ps -o args"), "sleep 3861") }
	if !sleeping() {
		t.Fatal("alice's job does not run in her container")
	}

	type apiJob struct {
		ID      string  `json:"id"`
		Person  *string `json:"person"`
		Command string  `json:"command"`
	}
	jobs := func(query string) []apiJob {
		t.Helper()
		var out struct{ Jobs []apiJob }
		if code := personAPI(t, p, "GET", "/jobs"+query, &out); code != 200 {
			t.Fatalf("GET /console/api/jobs%s: %d", query, code)
		}
		for _, j := range out.Jobs {
			if j.Person == nil {
				t.Fatalf("GET /console/api/jobs%s: a job without person: %+v", query, j)
			}
		}
		return out.Jobs
	}
	has := func(js []apiJob) bool {
		for _, j := range js {
			if j.ID == job && *j.Person == "alice" && strings.Contains(j.Command, "sleep 3861") {
				return true
			}
		}
		return false
	}
	if js := jobs("?person=alice"); !has(js) || len(js) != 1 {
		t.Fatalf("alice's jobs: %+v", js)
	}
	if !has(jobs("")) {
		t.Fatalf("every job: %+v", jobs(""))
	}
	if js := jobs("?person=bob"); len(js) != 0 {
		t.Fatalf("bob's jobs: %+v", js)
	}
	if js := jobs("?person=-"); has(js) {
		t.Fatalf("the operator's jobs list alice's: %+v", js)
	}
	if code := personAPI(t, p, "GET", "/jobs?person=carol", nil); code != 404 {
		t.Errorf("jobs of a person not configured: %d, want 404", code)
	}
	if code := personAPI(t, p, "DELETE", "/jobs/"+job+"?person=bob", nil); code != 404 {
		t.Errorf("killing alice's job in bob's sandbox: %d, want 404", code)
	}
	if !sleeping() {
		t.Fatal("alice's job ended when killed in bob's sandbox")
	}
	if code := personAPI(t, p, "DELETE", "/jobs/"+job+"?person=alice", nil); code != 200 {
		t.Fatalf("DELETE /console/api/jobs/%s?person=alice: %d", job, code)
	}
	testenv.WaitFor(t, 10*time.Second, "alice's killed job to end", func() bool { return !sleeping() })
	if has(jobs("?person=alice")) {
		t.Error("the killed job is still listed")
	}

	// Caddy's log names her and her container for her command and for the kill.
	testenv.WaitFor(t, 10*time.Second, "log lines naming alice and her container", func() bool {
		log, _ := os.ReadFile(filepath.Join(p.Storage, "caddy.log"))
		var execute, kill bool
		for _, line := range strings.Split(string(log), "\n") {
			named := strings.Contains(line, `"person":"alice"`) && strings.Contains(line, `"container":"`+p.containerOf("alice")+`"`)
			execute = execute || (named && strings.Contains(line, `"msg":"execute"`))
			kill = kill || (named && strings.Contains(line, `"msg":"job killed from the console"`))
		}
		return execute && kill
	})

	// The activity log names her.
	var act struct {
		Entries []struct {
			Person *string `json:"person"`
			Tool   string  `json:"tool"`
			Args   string  `json:"args"`
		} `json:"entries"`
	}
	if code := personAPI(t, p, "GET", "/activity?tool=execute", &act); code != 200 || len(act.Entries) == 0 {
		t.Fatalf("activity: %d %+v", code, act)
	}
	for _, e := range act.Entries {
		if e.Person == nil || (strings.Contains(e.Args, "sleep 3861") != (*e.Person == "alice")) {
			t.Errorf("an activity entry without its person: %+v", e)
		}
	}
	var kills struct {
		Entries []struct{ Args string } `json:"entries"`
	}
	personAPI(t, p, "GET", "/activity?tool=console.kill_job&outcome=ok", &kills)
	if len(kills.Entries) != 1 || !strings.Contains(kills.Entries[0].Args, `"person":"alice"`) {
		t.Errorf("the kill in the activity log: %+v", kills.Entries)
	}

	// Her download link and her preview name her; revoking the preview closes it.
	if res := testsite.Call(ctx, t, alice, "share_file", map[string]any{"path": "/sandbox/a.txt"}); res.IsError {
		t.Fatalf("share_file: %s", testsite.ResultText(res))
	}
	pv := testsite.Structured(t, testsite.Call(ctx, t, alice, "expose_port", map[string]any{"port": 8000}))
	previewURL := pv["url"].(string)
	type apiLink struct {
		ID, Kind, Target string
		Person           *string `json:"person"`
	}
	links := func() []apiLink {
		t.Helper()
		var out struct{ Links []apiLink }
		if code := personAPI(t, p, "GET", "/links", &out); code != 200 {
			t.Fatalf("links: %d", code)
		}
		return out.Links
	}
	var previewID string
	var download bool
	for _, l := range links() {
		switch {
		case l.Person == nil:
			t.Errorf("a link without person: %+v", l)
		case l.Kind == "download" && l.Target == "/sandbox/a.txt" && *l.Person == "alice":
			download = true
		case l.Kind == "preview" && l.Target == "8000" && *l.Person == "alice":
			previewID = l.ID
		}
	}
	if !download || previewID == "" {
		t.Fatalf("links: %+v", links())
	}
	if strings.Contains(previewURL, previewID) || strings.Contains(previewID, strings.SplitN(strings.TrimPrefix(previewURL, "http://"), ".", 2)[0]) {
		t.Fatalf("the preview's link id %s shows its label (%s)", previewID, previewURL)
	}
	if resp, _ := p.request(t, "GET", previewURL, "", nil); resp.StatusCode == http.StatusNotFound {
		t.Fatalf("the preview is not live before it is revoked: %d", resp.StatusCode)
	}
	if code := personAPI(t, p, "DELETE", "/links/"+previewID, nil); code != 200 {
		t.Fatalf("revoking the preview: %d", code)
	}
	if resp, _ := p.request(t, "GET", previewURL, "", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the revoked preview: %d, want 404", resp.StatusCode)
	}
	// A port the model unexposes leaves the list.
	testsite.Call(ctx, t, alice, "expose_port", map[string]any{"port": 8001})
	listed8001 := func() bool {
		for _, l := range links() {
			if l.Kind == "preview" && l.Target == "8001" {
				return true
			}
		}
		return false
	}
	if !listed8001() {
		t.Fatal("port 8001 is not listed once exposed")
	}
	if res := testsite.Call(ctx, t, alice, "unexpose_port", map[string]any{"port": 8001}); res.IsError {
		t.Fatalf("unexpose_port: %s", testsite.ResultText(res))
	}
	if listed8001() {
		t.Error("port 8001 is still listed once unexposed")
	}

	// An OAuth sign-in made with alice's key names her, and the Access page shows it.
	conf, verifier := p.OAuthConfig(t, "Claude")
	resource := oauth2.SetAuthURLParam("resource", p.URL+"/mcp")
	q := testsite.SignIn(t, conf.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier), resource), p.keys["alice"])
	if _, err := conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier), resource); err != nil {
		t.Fatal(err)
	}
	var grants struct {
		Grants []struct {
			ClientName string  `json:"client_name"`
			Person     *string `json:"person"`
		}
	}
	if code := personAPI(t, p, "GET", "/grants", &grants); code != 200 || len(grants.Grants) != 1 ||
		grants.Grants[0].Person == nil || *grants.Grants[0].Person != "alice" || grants.Grants[0].ClientName != "Claude" {
		t.Fatalf("grants: %d %+v", code, grants)
	}
}

// waitKeysNoted waits until the site has recorded the fingerprints of n keys.
func waitKeysNoted(t *testing.T, s *testsite.Site, n int) {
	t.Helper()
	// The handler keeps the fingerprints under this key of Caddy's storage.
	dir := filepath.Join(s.Storage, filepath.FromSlash("mcp_sandbox/keys"))
	testenv.WaitFor(t, 20*time.Second, "the keys' fingerprints in storage", func() bool {
		entries, _ := os.ReadDir(dir)
		count := 0
		for _, e := range entries {
			if e.Name() != "salt" && !e.IsDir() {
				count++
			}
		}
		return count >= n
	})
}

// mcpStatus sends an initialize to /mcp with bearer and returns the status and the
// WWW-Authenticate header.
func mcpStatus(t *testing.T, p *peopleSite, bearer string) (int, string) {
	t.Helper()
	resp, _ := p.request(t, "POST", p.URL+"/mcp", bearer, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`),
		"Content-Type", "application/json", "Accept", "application/json, text/event-stream")
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
}

// TestRemovedKeyLocksNobodyOut: bob is removed by a reload; his client retries his old
// key twelve times from the address everyone shares. Each is told the key was retired,
// none counts as a guess: alice's key, the sign-in page and the console still work from
// that address. Ten distinct wrong keys do block the address, but alice's key gets in
// once the first wait (10 s) is over.
func TestRemovedKeyLocksNobodyOut(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and a real Caddy")
	}
	p := startPeopleSite(t, []string{"alice", "bob"})
	if code, _ := mcpStatus(t, p, p.keys["bob"]); code != http.StatusOK {
		t.Fatalf("bob's key before his removal: %d", code)
	}
	waitKeysNoted(t, p.Site, 3)
	p.Load(p.options([]string{"alice"}))
	for i := range 12 {
		code, challenge := mcpStatus(t, p, p.keys["bob"])
		if code != http.StatusUnauthorized || !strings.Contains(challenge, "this key was retired; ask the operator for your new key") {
			t.Fatalf("bob's old key, try %d: %d %q", i+1, code, challenge)
		}
	}
	if code, _ := mcpStatus(t, p, p.keys["alice"]); code != http.StatusOK {
		t.Fatalf("alice's key after twelve tries of bob's old one: %d, want 200", code)
	}
	if code := personAPI(t, p, "GET", "/sandboxes", nil); code != http.StatusOK {
		t.Fatalf("the console after twelve tries of bob's old key: %d, want 200", code)
	}
	conf, verifier := p.OAuthConfig(t, "Claude")
	testsite.SignIn(t, conf.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier)), p.keys["alice"])

	// Guessing still blocks, but not for long.
	for i := range 10 {
		if code, _ := mcpStatus(t, p, "guess-"+testenv.RandomHex(16)); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d", i+1, code)
		}
	}
	blocked := time.Now()
	if code, _ := mcpStatus(t, p, "guess-"+testenv.RandomHex(16)); code != http.StatusTooManyRequests {
		t.Fatalf("a guess after ten: %d, want 429", code)
	}
	testenv.WaitFor(t, 30*time.Second, "alice's key from the blocked address", func() bool {
		code, _ := mcpStatus(t, p, p.keys["alice"])
		return code == http.StatusOK
	})
	if waited := time.Since(blocked); waited > 15*time.Second {
		t.Errorf("alice waited %v behind the guesses", waited)
	}
	t.Logf("alice got in %v after the address was blocked", time.Since(blocked).Round(time.Second))
}

// TestKeyRotationThroughReload: the documented way to change keys. Keys read from files
// with {file./path} are read again at each load: a person added by a reload signs in
// with the key in their file, a key rotated in its file and reloaded replaces the old
// one (refused as retired, the new one works at once, the person keeps their sandbox),
// and a person removed by a reload is refused as retired.
func TestKeyRotationThroughReload(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and a real Caddy")
	}
	s := testsite.New(t)
	p := &peopleSite{Site: s, keys: map[string]string{"": s.Key}}
	dir := t.TempDir()
	write := func(name, key string) {
		t.Helper()
		p.keys[name] = key
		if err := os.WriteFile(filepath.Join(dir, name+".key"), []byte(key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, name := range []string{"alice", "bob"} {
			_ = s.Docker.ContainerRemove(ctx, s.Container+"-"+name, container.RemoveOptions{Force: true})
			_ = s.Docker.VolumeRemove(ctx, s.Volume+"-"+name, true)
		}
	})
	options := func(people ...string) testsite.Options {
		var lines []string
		for _, name := range people {
			lines = append(lines, "person "+name+" {file."+filepath.Join(dir, name+".key")+"}")
		}
		return testsite.Options{Address: "http://:%d", Directive: lines}
	}
	write("alice", "alice-key-one-"+testenv.RandomHex(16))
	s.Start(options("alice"))
	p.web = testsite.AnyHostClient(s.Port)
	if code, _ := mcpStatus(t, p, p.keys["alice"]); code != http.StatusOK {
		t.Fatalf("alice's key from her file: %d", code)
	}

	// Add bob: write his file, add his line, reload.
	write("bob", "bob-key-"+testenv.RandomHex(16))
	s.Load(options("alice", "bob"))
	if code, _ := mcpStatus(t, p, p.keys["bob"]); code != http.StatusOK {
		t.Fatalf("bob's key after he was added: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if res := testsite.Call(ctx, t, p.client(ctx, "alice"), "execute", map[string]any{"command": "echo kept > /sandbox/kept.txt"}); res.IsError {
		t.Fatalf("alice's command: %s", testsite.ResultText(res))
	}
	waitKeysNoted(t, s, 3)

	// Rotate alice's key: a new key in her file, then a reload.
	old := p.keys["alice"]
	write("alice", "alice-key-two-"+testenv.RandomHex(16))
	s.Load(options("alice", "bob"))
	if code, challenge := mcpStatus(t, p, old); code != http.StatusUnauthorized || !strings.Contains(challenge, "retired") {
		t.Fatalf("alice's old key after the rotation: %d %q, want 401 retired", code, challenge)
	}
	st := testsite.Structured(t, testsite.Call(ctx, t, p.client(ctx, "alice"), "execute", map[string]any{"command": "cat /sandbox/kept.txt"}))
	if st["stdout"] != "kept\n" {
		t.Fatalf("alice's new key does not reach her sandbox: %v", st)
	}

	// Remove bob: drop his line, reload.
	s.Load(options("alice"))
	if code, challenge := mcpStatus(t, p, p.keys["bob"]); code != http.StatusUnauthorized || !strings.Contains(challenge, "retired") {
		t.Fatalf("bob's key after his removal: %d %q, want 401 retired", code, challenge)
	}
	if code, _ := mcpStatus(t, p, p.keys["alice"]); code != http.StatusOK {
		t.Fatalf("alice's key after bob's removal: %d", code)
	}
}
