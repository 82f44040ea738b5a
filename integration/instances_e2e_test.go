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
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// Two Caddy processes with the same site (the same api_key, image, container and
// settings) and one shared storage directory stand behind a third Caddy that balances
// them round robin, with no affinity: any request may land on either. Through the
// balancer a person signs in with a real OAuth flow (registration, sign-in page, code
// exchange: each step may be served by the other instance), then, in raw 2026-07-28
// JSON-RPC with no session, server/discover, tools/list and ten execute calls answer,
// and both instances serve some of them; a job started on one instance is followed to
// its end on the other; the official TypeScript SDK (2025-11-25, with its session)
// makes twelve calls through the balancer, served by both; an egress question asked
// on one instance is answered by a retry on the other (a tampered state refused
// there, the real one applied), and an "allow always" given on one instance lets the
// next command through the other without a question; a preview made through one
// instance is served by the other, keeps its URL when exposed again there, and once
// unexposed through the first answers 404 on the other within about 2 s, ending a
// stream open through it; and once one instance is killed
// outright, the balancer's retries make every call answer on the other, which also
// follows the job the dead one started.
func TestSeveralInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	bin := caddyBinary(t)
	site := testsite.New(t) // the key, container, volume and shared storage; A's port
	t.Cleanup(func() {
		// Cleanups run last first: this one runs once the processes below are stopped.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = site.Docker.ContainerRemove(ctx, site.Container, container.RemoveOptions{Force: true})
		_ = site.Docker.VolumeRemove(ctx, site.Volume, true)
	})
	dir := t.TempDir() // Caddyfiles, logs and each process's output
	// The "unlisted hosts" of the egress check: names the egress block maps to this
	// server on loopback, which no rule allows, so that reaching them needs an answer.
	up := newEgressUpstream(t)
	portB, portC := testsite.FreePort(t), testsite.FreePort(t)
	public := fmt.Sprintf("http://127.0.0.1:%d", portC)

	// The instances' Caddyfiles differ only in their port and log file. public_url
	// names the balancer: a token is bound to the resource URL the client signed in
	// for, and each instance must find that same URL when this test reaches it
	// directly (to tell the instances apart), whatever the Host of the request.
	siteOf := func(name string, port int) string {
		s := *site
		s.Port = port
		return s.Caddyfile(testsite.Options{
			// Previews under localhost: <label>.localhost reaches each instance on
			// loopback, with no name resolved.
			Address:   "http://127.0.0.1:%d, http://*.localhost:%d",
			Directive: append([]string{"public_url " + public, "previews localhost"}, askDirective()...),
			Site:      []string{testsite.MetricsRoute},
			Log:       filepath.Join(dir, name+".log"),
		})
	}
	a := startInstance(t, bin, dir, "A", site.Port, siteOf("A", site.Port))
	b := startInstance(t, bin, dir, "B", portB, siteOf("B", portB))
	c := startBalancer(t, bin, dir, portC, a, b)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Each instance, asked directly, names the balancer as the issuer and the resource.
	for _, in := range []*instance{a, b} {
		var meta struct {
			Issuer string `json:"issuer"`
		}
		in.getJSON(t, "/.well-known/oauth-authorization-server", &meta)
		var prm struct {
			Resource string `json:"resource"`
		}
		in.getJSON(t, "/.well-known/oauth-protected-resource", &prm)
		if meta.Issuer != public || prm.Resource != public+"/mcp" {
			t.Fatalf("%s: issuer %q, resource %q; want %s", in.name, meta.Issuer, prm.Resource, public)
		}
	}

	began := time.Now()
	token := (&testsite.Site{T: t, URL: c.url, Key: site.Key}).OAuthToken(ctx, t, "instances-e2e")
	t.Logf("signed in through the balancer in %v", time.Since(began).Round(time.Millisecond))

	t.Run("discover", func(t *testing.T) {
		res, err := c.rpc(ctx, token, "server/discover", nil)
		if err != nil {
			t.Fatal(err)
		}
		versions, _ := res["supportedVersions"].([]any)
		if !slices.Contains(versions, any("2026-07-28")) {
			t.Fatalf("server/discover through the balancer: %v", res)
		}
		t.Logf("server/discover through the balancer: supportedVersions %v", versions)
	})

	t.Run("calls spread over both", func(t *testing.T) {
		res, err := c.rpc(ctx, token, "tools/list", nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		tools, _ := res["tools"].([]any)
		for _, tool := range tools {
			if m, ok := tool.(map[string]any); ok {
				names = append(names, fmt.Sprint(m["name"]))
			}
		}
		if !slices.Contains(names, "execute") || !slices.Contains(names, "job_output") {
			t.Fatalf("tools/list through the balancer: %v", names)
		}
		beforeA, beforeB := a.toolCalls(t), b.toolCalls(t)
		ok, took := executeMany(ctx, t, c, token, 10)
		servedA, servedB := a.toolCalls(t)-beforeA, b.toolCalls(t)-beforeB
		t.Logf("tools/list: %d tools; execute through the balancer: %d of 10 answered right in %v; A served %d, B served %d",
			len(names), ok, took.Round(time.Millisecond), servedA, servedB)
		if ok != 10 {
			t.Errorf("%d of 10 calls through the balancer answered right", ok)
		}
		if servedA+servedB != 10 || servedA == 0 || servedB == 0 {
			t.Errorf("A served %d calls and B %d: want both, 10 in all", servedA, servedB)
		}
		// The token works on each instance reached directly too.
		for _, in := range []*instance{a, b} {
			if st, err := in.execute(ctx, token, "echo "+in.name, 30); err != nil || st["stdout"] != in.name+"\n" {
				t.Errorf("execute on %s directly: %v %v", in.name, st, err)
			}
		}
	})

	t.Run("job started on A followed through B", func(t *testing.T) {
		began := time.Now()
		id := startJobOn(ctx, t, a, token)
		out := followJobOn(ctx, t, b, token, id)
		t.Logf("job %s started on A, followed to its end through B: %q after %v", id, out, time.Since(began).Round(time.Millisecond))
	})

	t.Run("TypeScript SDK through the balancer", func(t *testing.T) {
		checkTypeScriptSpread(t, a, b, c, token)
	})

	t.Run("egress ask across instances", func(t *testing.T) {
		checkEgressAskAcross(ctx, t, a, b, token, up)
	})

	t.Run("preview across instances", func(t *testing.T) {
		checkPreviewAcross(ctx, t, a, b, site, token)
	})

	t.Run("A killed", func(t *testing.T) {
		began := time.Now()
		id := startJobOn(ctx, t, a, token)
		beforeB := b.toolCalls(t)
		a.kill(t)
		t.Logf("A killed (SIGKILL) %v after its job started", time.Since(began).Round(time.Millisecond))
		ok, took := executeMany(ctx, t, c, token, 10)
		servedB := b.toolCalls(t) - beforeB
		t.Logf("execute through the balancer with A dead: %d of 10 answered right in %v; B served %d", ok, took.Round(time.Millisecond), servedB)
		if ok != 10 || servedB != 10 {
			t.Errorf("with A dead, %d of 10 calls answered right and B served %d", ok, servedB)
		}
		out := followJobOn(ctx, t, c, token, id)
		t.Logf("job %s started on A, followed to its end through the balancer after A's death: %q, %v after it started", id, out, time.Since(began).Round(time.Millisecond))
	})
}

// checkPreviewAcross serves a page from a server in the sandbox through a preview made
// on a, which b serves too (it finds the preview in storage); exposing the port again
// through b keeps its URL; unexposed through a, the preview answers 404 on b within a
// few seconds, and a stream b had open through it ends.
func checkPreviewAcross(ctx context.Context, t *testing.T, a, b *instance, site *testsite.Site, token string) {
	(&previewSite{Site: site}).copyIn(t)
	if _, err := a.execute(ctx, token, "setsid nohup /usr/local/bin/previewserver -addr 127.0.0.1:8000 -dir /sandbox/site >/dev/null 2>&1 </dev/null & for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null && break; sleep 0.1; done", 30); err != nil {
		t.Fatal(err)
	}
	expose := func(in *instance, tool string) map[string]any {
		t.Helper()
		res, err := in.rpc(ctx, token, "tools/call", map[string]any{"name": tool, "arguments": map[string]any{"port": 8000}})
		if err != nil {
			t.Fatal(err)
		}
		st, _ := res["structuredContent"].(map[string]any)
		if res["isError"] == true || st == nil {
			t.Fatalf("%s through %s: %v", tool, in.name, res)
		}
		return st
	}
	u, _ := expose(a, "expose_port")["url"].(string)
	pu, err := url.Parse(u)
	if err != nil || !strings.HasSuffix(pu.Hostname(), ".localhost") {
		t.Fatalf("expose_port through A: url %q", u)
	}
	host := pu.Hostname()
	// get asks in for path of the preview, at its own address with the preview's host.
	get := func(in *instance, path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", in.url+path, nil)
		if err != nil {
			return nil, err
		}
		req.Host = host
		return in.http.Do(req)
	}
	began := time.Now()
	for _, in := range []*instance{b, a} {
		resp, err := get(in, "/hello")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "hello from the sandbox") {
			t.Fatalf("the preview made through A, through %s: %d %q", in.name, resp.StatusCode, body)
		}
	}
	t.Logf("preview made through A served by B (first request %v after expose_port answered) and A", time.Since(began).Round(time.Millisecond))
	if again, _ := expose(b, "expose_port")["url"].(string); again != u {
		t.Errorf("exposed again through B: %s, was %s", again, u)
	}

	// An open stream through B, then unexpose_port through A.
	sresp, err := get(b, "/sse?count=600")
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	streamEnded := make(chan time.Time, 1)
	go func() {
		_, _ = io.Copy(io.Discard, sresp.Body)
		streamEnded <- time.Now()
	}()
	time.Sleep(200 * time.Millisecond)
	unexposed := time.Now()
	if st := expose(a, "unexpose_port"); st["was_exposed"] != true {
		t.Fatalf("unexpose_port through A: %v", st)
	}
	var gone time.Duration
	for {
		resp, err := get(b, "/hello")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			gone = time.Since(unexposed)
			break
		}
		if time.Since(unexposed) > 10*time.Second {
			t.Fatalf("B still serves the preview 10 s after it was unexposed through A: %d", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case at := <-streamEnded:
		t.Logf("unexposed through A: B answers 404 after %v, its open SSE stream ended after %v",
			gone.Round(time.Millisecond), at.Sub(unexposed).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatalf("B answers 404 after %v, but its open SSE stream goes on", gone.Round(time.Millisecond))
	}
	if gone > 3*time.Second {
		t.Errorf("B served the preview %v after it was unexposed through A; want within about 2 s", gone.Round(time.Millisecond))
	}
	if st := expose(b, "unexpose_port"); st["was_exposed"] != false {
		t.Errorf("unexpose_port through B after A's: %v", st)
	}
}

// checkTypeScriptSpread makes twelve execute calls in one session of the official
// TypeScript SDK through the balancer c: every one must answer its own output, and
// both a and b must have served some (the session id is signed, so either instance
// takes any request of the session).
func checkTypeScriptSpread(t *testing.T, a, b, c *instance, token string) {
	const n = 12
	calls := make([]tsCall, n)
	for i := range calls {
		calls[i] = tsCall{Tool: "execute", Args: map[string]any{"command": fmt.Sprintf("echo %d", i+1), "wait": 30}}
	}
	beforeA, beforeB := a.toolCalls(t), b.toolCalls(t)
	began := time.Now()
	res := runTSCalls(t, &testsite.Site{T: t, URL: c.url, Key: token}, calls...)
	took := time.Since(began)
	servedA, servedB := a.toolCalls(t)-beforeA, b.toolCalls(t)-beforeB
	ok := 0
	for i, r := range res.Results {
		if r.Error == "" && !r.IsError && r.Structured["stdout"] == fmt.Sprintf("%d\n", i+1) && r.Structured["exit_code"] == 0.0 {
			ok++
		} else {
			t.Logf("TypeScript call #%d: %+v", i+1, r)
		}
	}
	t.Logf("TypeScript SDK through the balancer: %d of %d answered right in %v (session, connect and close included); A served %d, B served %d",
		ok, n, took.Round(time.Millisecond), servedA, servedB)
	if ok != n || len(res.Results) != n {
		t.Errorf("%d of %d TypeScript calls answered right (%d results)", ok, n, len(res.Results))
	}
	if servedA+servedB != n || servedA == 0 || servedB == 0 {
		t.Errorf("A served %d TypeScript calls and B %d: want both, %d in all", servedA, servedB, n)
	}
}

// checkEgressAskAcross follows egress questions from one instance to the other, in
// raw 2026-07-28 JSON-RPC: a question asked on a, a tampered answer refused on b with
// the host not reached, the real answer given on b applied to the connection a holds;
// then "allow always" given on a lets b's next command through without a question.
func checkEgressAskAcross(ctx context.Context, t *testing.T, a, b *instance, token string, up *egressUpstream) {
	get := func(host string) string { return "wget -q -O - http://" + host + ":" + up.port + "/hi" }
	hello := func(host string) string { return "hello from " + host + ":" + up.port + "/hi\n" }
	// Each instance's proxy listens in the sandbox once it has run a command there.
	for _, in := range []*instance{a, b} {
		if _, err := in.execute(ctx, token, waitProxy, 30); err != nil {
			t.Fatal(err)
		}
	}

	// (a) Asked on A: the call ends with the question, while A holds the connection.
	once := get("once.test")
	state := askOn(ctx, t, a, b, token, once, "once.test:"+up.port)

	// (b) The retry on B with one byte of the signed state changed: refused, and the
	// host is not reached.
	res := answerOn(ctx, t, b, token, once, flipByte(state), "allow_once")
	if res["isError"] != true || !strings.Contains(resultText(res), "signature does not match") {
		t.Fatalf("a tampered requestState on B: %s", resultText(res))
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("a tampered answer on B reached the host: %d requests", n)
	}
	t.Logf("a tampered requestState on B: refused, %q; the host got 0 requests", clip(toolText(res), 160))

	// (c) The retry on B with the state as given: B hands the answer over through the
	// storage to A, which lets the held connection through; B follows the job to its end.
	began := time.Now()
	res = answerOn(ctx, t, b, token, once, state, "allow_once")
	sc, _ := res["structuredContent"].(map[string]any)
	if sc["exit_code"] != 0.0 || sc["stdout"] != hello("once.test") {
		t.Fatalf("allow once on B: %s", resultText(res))
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("after allow once on B the host got %d requests, want 1", n)
	}
	t.Logf("allow once on B for A's question: the command ended in %v with %q; the host got 1 request",
		time.Since(began).Round(time.Millisecond), sc["stdout"])

	// (d) Allow always, asked and answered on A.
	always := get("always.test")
	state = askOn(ctx, t, a, b, token, always, "always.test:"+up.port)
	res = answerOn(ctx, t, a, token, always, state, "allow_always")
	if sc, _ := res["structuredContent"].(map[string]any); sc["exit_code"] != 0.0 || sc["stdout"] != hello("always.test") {
		t.Fatalf("allow always on A: %s", resultText(res))
	}
	answered := time.Now()
	// B reads the approvals through the storage, fresh within 2 s: a command that is
	// still asked about is refused (which ends its question, so that it does not hold
	// the host's next connection) and sent again, for up to 5 s.
	for attempt := 1; ; attempt++ {
		res, err := b.rpc(ctx, token, "tools/call", map[string]any{"name": "execute", "arguments": map[string]any{"command": always, "wait": 30}})
		if err != nil {
			t.Fatal(err)
		}
		if res["resultType"] == "input_required" {
			if time.Since(answered) > 5*time.Second {
				t.Fatalf("B still asks about always.test %v after allow always on A: %s", time.Since(answered).Round(time.Millisecond), resultText(res))
			}
			t.Logf("attempt %d on B, %v after allow always on A: still asked", attempt, time.Since(answered).Round(time.Millisecond))
			state, _ := res["requestState"].(string)
			answerOn(ctx, t, b, token, always, state, "deny")
			continue
		}
		sc, _ := res["structuredContent"].(map[string]any)
		if sc["exit_code"] != 0.0 || sc["stdout"] != hello("always.test") {
			t.Fatalf("always.test on B after allow always on A: %s", resultText(res))
		}
		t.Logf("always.test on B after allow always on A: through with no question at attempt %d, %v after the answer",
			attempt, time.Since(answered).Round(time.Millisecond))
		break
	}
	if n := len(up.requests()); n != 3 {
		t.Fatalf("the host got %d requests, want 3", n)
	}
}

// askOn runs command on in, which must end with one egress question naming hostport,
// and returns the requestState to answer it with.
//
// Each instance's proxy listens on the sandbox's proxy port, and the kernel hands
// each connection to one of them: when other's takes it, other has no call waiting
// for the job and refuses the host at once, without a question (docs/operations.md,
// "Several instances"). Such an attempt, recognised by other's log, is logged and the
// command is sent again, up to 10 times; any other answer fails the test.
func askOn(ctx context.Context, t *testing.T, in, other *instance, token, command, hostport string) string {
	t.Helper()
	began := time.Now()
	res, err := in.rpc(ctx, token, "tools/call", map[string]any{"name": "execute", "arguments": map[string]any{"command": command, "wait": 30}})
	if err != nil {
		t.Fatal(err)
	}
	if res["resultType"] != "input_required" {
		// Whichever instance's proxy took the connection, the question must reach the
		// call: through storage when it is the other one.
		sc, _ := res["structuredContent"].(map[string]any)
		job, _ := sc["job_id"].(string)
		t.Fatalf("a command to an unlisted host on %s was not asked about (the other instance refused it unasked: %v): %s",
			in.name, job != "" && other.refusedUnasked(job), resultText(res))
	}
	reqs, _ := res["inputRequests"].(map[string]any)
	q, _ := reqs[questionKey26].(map[string]any)
	params, _ := q["params"].(map[string]any)
	msg, _ := params["message"].(string)
	state, _ := res["requestState"].(string)
	if len(reqs) != 1 || q["method"] != "elicitation/create" || !strings.Contains(msg, hostport) || state == "" {
		t.Fatalf("the question on %s: %s", in.name, resultText(res))
	}
	t.Logf("%s on %s: input_required after %v, one elicitation: %q", command, in.name, time.Since(began).Round(time.Millisecond), clip(msg, 160))
	return state
}

// refusedUnasked reports whether the instance's log shows a connection of job refused
// because no call there waited for it.
func (in *instance) refusedUnasked(job string) bool {
	b, err := os.ReadFile(in.log)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `"egress refused"`) && strings.Contains(line, `"job":"`+job+`"`) && strings.Contains(line, "nobody could be asked") {
			return true
		}
	}
	return false
}

// answerOn retries command's call on in with decision as the answer and state as the
// requestState, and returns the result.
func answerOn(ctx context.Context, t *testing.T, in *instance, token, command, state, decision string) map[string]any {
	t.Helper()
	res, err := in.rpc(ctx, token, "tools/call", map[string]any{
		"name":           "execute",
		"arguments":      map[string]any{"command": command, "wait": 30},
		"requestState":   state,
		"inputResponses": map[string]any{questionKey26: map[string]any{"action": "accept", "content": map[string]any{"decision": decision}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// flipByte changes one character in the middle of the signed part of a requestState
// to another base64url character, so that the state still decodes but its signature
// no longer matches.
func flipByte(state string) string {
	b := []byte(state)
	i := strings.IndexByte(state, '.') / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// toolText is the text of a tool result's content.
func toolText(res map[string]any) string {
	var out []string
	content, _ := res["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok && m["type"] == "text" {
			out = append(out, fmt.Sprint(m["text"]))
		}
	}
	return strings.Join(out, "\n")
}

// clip is s cut to at most n bytes, for a log line.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// startJobOn starts on in a command that outlasts its call, and returns its job id.
func startJobOn(ctx context.Context, t *testing.T, in *instance, token string) string {
	t.Helper()
	st, err := in.execute(ctx, token, "echo started; sleep 8; echo done", 1)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := st["job_id"].(string)
	if st["running"] != true || id == "" || st["stdout"] != "started\n" {
		t.Fatalf("a job started on %s: %v", in.name, st)
	}
	return id
}

// followJobOn calls job_output on in until the job id has ended, and returns what those
// calls delivered, which must be the rest of the job's output and a zero exit code.
func followJobOn(ctx context.Context, t *testing.T, in *instance, token, id string) string {
	t.Helper()
	var out strings.Builder
	for polls := 0; ; polls++ {
		if polls == 5 {
			t.Fatalf("job %s still running after %d job_output calls on %s", id, polls, in.name)
		}
		res, err := in.rpc(ctx, token, "tools/call", map[string]any{"name": "job_output", "arguments": map[string]any{"job_id": id, "wait": 30}})
		if err != nil {
			t.Fatal(err)
		}
		st, _ := res["structuredContent"].(map[string]any)
		if res["isError"] == true || st == nil {
			t.Fatalf("job_output on %s: %v", in.name, res)
		}
		fmt.Fprint(&out, st["stdout"])
		if st["running"] == false {
			if st["exit_code"] != 0.0 || out.String() != "done\n" {
				t.Fatalf("job %s followed on %s: delivered %q, %v", id, in.name, out.String(), st)
			}
			return out.String()
		}
	}
}

// executeMany runs `echo i` for i = 1..n through in, one after another, and returns how
// many answered with exactly that output, and how long they took; each failure is
// logged.
func executeMany(ctx context.Context, t *testing.T, in *instance, token string, n int) (ok int, took time.Duration) {
	t.Helper()
	began := time.Now()
	for i := 1; i <= n; i++ {
		st, err := in.execute(ctx, token, fmt.Sprintf("echo %d", i), 30)
		if err == nil && st["stdout"] == fmt.Sprintf("%d\n", i) && st["exit_code"] == 0.0 {
			ok++
		} else {
			t.Logf("execute #%d through %s: %v %v", i, in.name, st, err)
		}
	}
	return ok, time.Since(began)
}

// instance is one Caddy process run from the binary [caddyBinary] builds.
type instance struct {
	name   string
	url    string // http://127.0.0.1:port
	log    string // Caddy's log file, as its Caddyfile names it
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited
	http   *http.Client  // its own connections, so that no other process's are reused
}

// startInstance writes caddyfile to dir and runs `caddy run` on it, and returns once
// the process answers HTTP on port. The process is stopped when the test ends; when
// the test failed, the end of its output and of its log are logged.
func startInstance(t testing.TB, bin, dir, name string, port int, caddyfile string) *instance {
	t.Helper()
	config := filepath.Join(dir, name+".Caddyfile")
	if err := os.WriteFile(config, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	output, err := os.Create(filepath.Join(dir, name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{
		name:   name,
		url:    fmt.Sprintf("http://127.0.0.1:%d", port),
		log:    filepath.Join(dir, name+".log"),
		cmd:    exec.Command(bin, "run", "--config", config, "--adapter", "caddyfile"),
		exited: make(chan struct{}),
		http:   &http.Client{Transport: &http.Transport{}, Timeout: 2 * time.Minute},
	}
	in.cmd.Stdout, in.cmd.Stderr = output, output
	// A test binary killed at its timeout runs no cleanup: the processes go with it.
	in.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = in.cmd.Wait()
		output.Close()
		close(in.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-in.exited:
		default:
			// A graceful stop, so that Caddy ends what it does in the engine.
			_ = in.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-in.exited:
			case <-time.After(20 * time.Second):
				_ = in.cmd.Process.Kill()
				<-in.exited
			}
		}
		in.http.CloseIdleConnections()
		if t.Failed() {
			for _, f := range []string{name + ".out", name + ".log"} {
				t.Logf("%s, last lines:\n%s", f, lastLines(filepath.Join(dir, f), 30))
			}
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := in.http.Get(in.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			return in
		}
		select {
		case <-in.exited:
			t.Fatalf("Caddy %s exited: %v\n%s", name, in.cmd.ProcessState, lastLines(filepath.Join(dir, name+".out"), 30))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("Caddy %s does not answer on %s: %v", name, in.url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill ends the process with SIGKILL, as a crash would, and returns once it is gone
// (its sockets closed by the kernel).
func (in *instance) kill(t *testing.T) {
	t.Helper()
	if err := in.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-in.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("Caddy %s still runs 10s after SIGKILL", in.name)
	}
}

// toolCalls is how many tool calls the instance has served, from its metrics.
func (in *instance) toolCalls(t *testing.T) int {
	t.Helper()
	n, _ := testsite.MetricSum(testsite.Metrics(t, in.http, in.url), "caddy_mcp_sandbox_person_calls_total", nil)
	return int(n)
}

// getJSON decodes the JSON document at path on the instance.
func (in *instance) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := in.http.Get(in.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s on %s: %d %v", path, in.name, resp.StatusCode, err)
	}
}

// execute runs command with execute's wait and returns the result's structured content.
func (in *instance) execute(ctx context.Context, token, command string, wait int) (map[string]any, error) {
	res, err := in.rpc(ctx, token, "tools/call", map[string]any{"name": "execute", "arguments": map[string]any{"command": command, "wait": wait}})
	if err != nil {
		return nil, err
	}
	st, _ := res["structuredContent"].(map[string]any)
	if res["isError"] == true || st == nil {
		return st, fmt.Errorf("execute %q on %s: %v", command, in.name, res)
	}
	return st, nil
}

// rpcIDs numbers the requests of this file's JSON-RPC calls.
var rpcIDs atomic.Int64

// rpc sends method with params as a 2026-07-28 client does (no session; version,
// client info and capabilities in _meta; the routing headers) with token as bearer,
// and returns the JSON-RPC result.
func (in *instance) rpc(ctx context.Context, token, method string, params map[string]any) (map[string]any, error) {
	// This client answers egress questions (form elicitation) by retrying the call.
	p := map[string]any{"_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "instances-e2e", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{"form": map[string]any{}}},
	}}
	for k, v := range params {
		p[k] = v
	}
	id := rpcIDs.Add(1)
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": p})
	req, err := http.NewRequestWithContext(ctx, "POST", in.url+"/mcp", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := in.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s through %s: %w", method, in.name, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s through %s: reading the answer: %w", method, in.name, err)
	}
	if resp.Header.Get("Mcp-Session-Id") != "" {
		return nil, fmt.Errorf("%s through %s: a 2026-07-28 request got a session id", method, in.name)
	}
	res, failed, ok := rpcAnswer(raw, resp.Header.Get("Content-Type"), id)
	if ok && failed {
		return nil, fmt.Errorf("%s through %s answered %d %s", method, in.name, resp.StatusCode, raw)
	}
	if ok {
		return res, nil
	}
	return nil, fmt.Errorf("no answer to %s through %s: %d %s", method, in.name, resp.StatusCode, raw)
}

// The Caddy binary is built once per run of the test binary, into the directory
// testsite.Main removes at the end (XDG_DATA_HOME), so no copy is left behind.
var (
	caddyBuild    sync.Once
	caddyBin      string
	caddyBuildErr error
)

// caddyBinary builds ./cmd/caddy (Caddy with the plugin and the Kubernetes engine) from
// the module's root, once, and returns its path. It is static (CGO_ENABLED=0), so that
// the same binary also runs in the image of the Caddy pods on the test cluster, which
// has no C library.
func caddyBinary(t testing.TB) string {
	t.Helper()
	caddyBuild.Do(func() {
		dir, err := os.MkdirTemp(os.Getenv("XDG_DATA_HOME"), "caddy-build-")
		if err != nil {
			caddyBuildErr = err
			return
		}
		caddyBin = filepath.Join(dir, "caddy")
		began := time.Now()
		build := exec.Command("go", "build", "-o", caddyBin, "./cmd/caddy")
		build.Dir = ".." // this package's directory is integration/, under the module's root
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			caddyBuildErr = fmt.Errorf("go build ./cmd/caddy: %w\n%s", err, out)
			return
		}
		t.Logf("built Caddy with the plugin in %v", time.Since(began).Round(time.Millisecond))
	})
	if caddyBuildErr != nil {
		t.Fatal(caddyBuildErr)
	}
	return caddyBin
}

// lastLines is the end of the file at path, at most n lines, or why it cannot be read.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
