package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// askDirective is an egress block that asks, with hosts mapped to the loopback
// upstream and none of them allowed.
func askDirective() []string {
	return []string{`egress {
			ask
			host once.test 127.0.0.1
			host always.test 127.0.0.1
			host other.test 127.0.0.1
		}`}
}

// waitProxy is a command that returns once the egress proxy listens in the sandbox.
const waitProxy = `for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && break; sleep 0.1; done`

// tsElicitSession is what elicit.mjs printed.
type tsElicitSession struct {
	Questions []struct {
		Message    string         `json:"message"`
		Schema     map[string]any `json:"schema"`
		ID         any            `json:"id"`         // the request's JSON-RPC id
		AnsweredAt float64        `json:"answeredAt"` // Unix milliseconds
	} `json:"questions"`
	Results []tsCallResult `json:"results"`
	Error   string         `json:"error"`
}

// runTSElicit runs commands in one session of the official TypeScript SDK, which
// answers questions with answers (nil: it declares no elicitation).
func runTSElicit(t *testing.T, s *testsite.Site, answers []map[string]string, commands ...string) tsElicitSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	calls := []map[string]any{}
	for _, c := range commands {
		calls = append(calls, map[string]any{"tool": "execute", "args": map[string]any{"command": c}})
	}
	in, _ := json.Marshal(map[string]any{"elicitation": answers != nil, "answers": answers, "calls": calls})
	cmd := exec.CommandContext(ctx, "node", "testdata/ts-client/elicit.mjs", s.URL, s.Key)
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.Output()
	var res tsElicitSession
	if jerr := json.Unmarshal(out, &res); jerr != nil || res.Error != "" {
		t.Fatalf("TypeScript client (%v) printed %q: %v %s (run scripts/test-deps.sh if the SDK is missing)", err, out, jerr, res.Error)
	}
	if len(res.Results) != len(commands) {
		t.Fatalf("%d results for %d calls: %+v", len(res.Results), len(commands), res)
	}
	return res
}

// egressAPI is GET /console/api/egress.
type egressAPI struct {
	Refusals  []console.EgressRefusal  `json:"refusals"`
	Approvals []console.EgressApproval `json:"approvals"`
}

func getEgressAPI(t *testing.T, s *testsite.Site) egressAPI {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+"/console/api/egress", nil)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out egressAPI
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /console/api/egress: %d %v", resp.StatusCode, err)
	}
	return out
}

// Through a real Caddy, with the official TypeScript SDK answering questions: allow
// once lets one command through and the next asks again; deny refuses with the host
// named; allow always lets later commands through without asking, also after a Caddy
// restart, and the console lists it and revokes it; a client without elicitation is
// refused within seconds, the host named.
func TestEgressAskTypeScript(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and the TypeScript SDK")
	}
	up := newEgressUpstream(t)
	opts := testsite.Options{Directive: askDirective()}
	s := testsite.Start(t, opts)
	get := func(host string) string { return "wget -q -O - http://" + host + ":" + up.port + "/hi" }
	hello := func(host string) string { return "hello from " + host + ":" + up.port + "/hi\n" }

	res := runTSElicit(t, s, []map[string]string{
		{"action": "accept", "decision": "allow_once"},
		{"action": "accept", "decision": "deny"},
		{"action": "accept", "decision": "allow_always"},
	}, waitProxy, get("once.test")+" && "+get("once.test"), get("once.test"), get("always.test"), get("always.test"))
	if len(res.Questions) != 3 {
		t.Fatalf("%d questions, want 3: %+v", len(res.Questions), res.Questions)
	}
	q := res.Questions[0]
	if !strings.Contains(q.Message, "once.test:"+up.port) || !strings.Contains(q.Message, "wget -q -O - http://once.test") {
		t.Fatalf("the question does not name the host, port and command: %q", q.Message)
	}
	enum, _ := json.Marshal(q.Schema["properties"].(map[string]any)["decision"].(map[string]any)["enum"])
	if string(enum) != `["allow_once","allow_always","deny"]` {
		t.Fatalf("schema: %v", q.Schema)
	}
	r := res.Results
	if r[1].Structured["stdout"] != hello("once.test")+hello("once.test") {
		t.Fatalf("allow once: %s", r[1].Text)
	}
	note, _ := r[2].Structured["note"].(string)
	if r[2].Structured["exit_code"] == 0.0 || !strings.Contains(note, "once.test (refused by the person)") || !strings.Contains(note, "operator allow the host") {
		t.Fatalf("the next command after allow once, denied: %s", r[2].Text)
	}
	if r[3].Structured["stdout"] != hello("always.test") || r[4].Structured["stdout"] != hello("always.test") {
		t.Fatalf("allow always: %s / %s", r[3].Text, r[4].Text)
	}
	api := getEgressAPI(t, s)
	if len(api.Approvals) != 1 || api.Approvals[0].Host != "always.test" || api.Approvals[0].Person != "" || api.Approvals[0].ID == "" {
		t.Fatalf("approvals: %+v", api.Approvals)
	}

	// After a restart, a client that declares no elicitation: the approved host is
	// reached, another is refused at once with its name in the note.
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	s.Load(opts)
	res = runTSElicit(t, s, nil, waitProxy, get("always.test"), get("other.test"))
	if res.Results[1].Structured["stdout"] != hello("always.test") {
		t.Fatalf("allow always after a restart: %s", res.Results[1].Text)
	}
	note, _ = res.Results[2].Structured["note"].(string)
	if res.Results[2].MS > 10000 || !strings.Contains(note, "other.test (not allowed by the operator, and nobody could be asked)") {
		t.Fatalf("without elicitation (%v ms): %s", res.Results[2].MS, res.Results[2].Text)
	}
	if api := getEgressAPI(t, s); len(api.Approvals) != 1 || api.Approvals[0].Host != "always.test" {
		t.Fatalf("approvals after a restart: %+v", api.Approvals)
	}

	// Revoked in the console, the host is refused at the next connection.
	req, _ := http.NewRequest("DELETE", s.URL+"/console/api/egress/approvals/"+api.Approvals[0].ID, nil)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("revoke: %v %v", resp, err)
	}
	resp.Body.Close()
	res = runTSElicit(t, s, nil, get("always.test"))
	if note, _ := res.Results[0].Structured["note"].(string); !strings.Contains(note, "always.test (") {
		t.Fatalf("after revoking: %s", res.Results[0].Text)
	}
	if api := getEgressAPI(t, s); len(api.Approvals) != 0 {
		t.Fatalf("approvals after revoking: %+v", api.Approvals)
	}
	if n := len(up.requests()); n != 5 {
		t.Fatalf("the upstream got %d requests, want 5", n)
	}
}

// elicitFunc is an mcp-go elicitation handler.
type elicitFunc func(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error)

func (f elicitFunc) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	return f(ctx, req)
}

// elicitClient is an mcp-go client that declares elicitation and answers with f, on
// protocol 2025-11-25 (2026-07-28 has no server-initiated requests).
func elicitClient(ctx context.Context, t *testing.T, s *testsite.Site, f elicitFunc) (*mcpclient.Client, string) {
	return elicitClientOn(ctx, t, s, mcp.ProtocolVersion20251125, f)
}

func elicitClientOn(ctx context.Context, t *testing.T, s *testsite.Site, version string, f elicitFunc) (*mcpclient.Client, string) {
	t.Helper()
	return elicitClientAs(ctx, t, s, s.Key, version, f)
}

// elicitClientAs is elicitClientOn signed in with key (a person's).
func elicitClientAs(ctx context.Context, t *testing.T, s *testsite.Site, key, version string, f elicitFunc) (*mcpclient.Client, string) {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(s.URL+"/mcp", transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + key}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, mcpclient.WithElicitationHandler(f))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = version
	init.Params.ClientInfo = mcp.Implementation{Name: "elicit-e2e", Version: "1"}
	init.Params.Capabilities.Elicitation = &mcp.ElicitationCapability{Form: &struct{}{}}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c, tr.GetSessionId()
}

func accept(decision string) *mcp.ElicitationResult {
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{
		Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"decision": decision}}}
}

// Bad answers: one outside the choices, one after the call returned, and one from
// another session are all refusals, and none is kept as an approval.
func TestEgressAskBadAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	up := newEgressUpstream(t)
	s := testsite.Start(t, testsite.Options{Directive: askDirective()})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	get := func(host string) string { return "wget -q -O - http://" + host + ":" + up.port + "/hi" }
	note := func(res *mcp.CallToolResult) string { n, _ := testsite.Structured(t, res)["note"].(string); return n }

	// An answer outside the enum.
	c, _ := elicitClient(ctx, t, s, func(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
		return accept("allow_forever"), nil
	})
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": waitProxy})
	if n := note(testsite.Call(ctx, t, c, "execute", map[string]any{"command": get("once.test")})); !strings.Contains(n, "once.test (refused by the person)") {
		t.Fatalf("an answer outside the choices: %q", n)
	}

	// On protocol 2026-07-28 the question comes as input_required, which mcp-go's
	// client answers with its handler and retries: an answer outside the choices is a
	// refusal there too.
	c26, _ := elicitClientOn(ctx, t, s, mcp.LATEST_PROTOCOL_VERSION, func(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
		return accept("allow_forever"), nil
	})
	if n := note(testsite.Call(ctx, t, c26, "execute", map[string]any{"command": get("once.test")})); !strings.Contains(n, "once.test (refused by the person)") {
		t.Fatalf("a client on 2026-07-28: %q", n)
	}

	// An answer that comes after the call returned (it waited 2 s).
	late := make(chan struct{})
	c, _ = elicitClient(ctx, t, s, func(ctx context.Context, _ mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
		select {
		case <-time.After(6 * time.Second):
		case <-ctx.Done():
		}
		close(late)
		return accept("allow_always"), nil
	})
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": get("always.test"), "wait": 2})
	job, _ := testsite.Structured(t, res)["job_id"].(string)
	<-late
	out := testsite.Call(ctx, t, c, "job_output", map[string]any{"job_id": job, "wait": 20})
	if st := testsite.Structured(t, out); st["exit_code"] == 0.0 || st["stdout"] != "" {
		t.Fatalf("the host was reached after the call returned: %s", testsite.ResultText(out))
	}

	// Another session answers this session's question (mcp-go numbers a session's
	// requests from 1); the asked session then declines.
	var asked atomic.Int32
	release := make(chan struct{})
	c, _ = elicitClient(ctx, t, s, func(ctx context.Context, _ mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
		asked.Add(1)
		<-release
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionDecline}}, nil
	})
	_, otherSession := elicitClient(ctx, t, s, func(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
		return accept("deny"), nil
	})
	done := make(chan string, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = "execute", map[string]any{"command": get("other.test")}
		res, err := c.CallTool(ctx, req)
		if err != nil {
			done <- err.Error()
			return
		}
		m, _ := res.StructuredContent.(map[string]any)
		n, _ := m["note"].(string)
		done <- n
	}()
	for i := 0; asked.Load() == 0 && i < 200; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	for id := 1; id <= 3; id++ {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"action":"accept","content":{"decision":"allow_always"}}}`, id)
		req, _ := http.NewRequest("POST", s.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+s.Key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", otherSession)
		req.Header.Set("Mcp-Protocol-Version", mcp.ProtocolVersion20251125)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	time.Sleep(time.Second)
	close(release)
	if n := <-done; !strings.Contains(n, "other.test (refused by the person)") {
		t.Fatalf("another session's answer counted: %q", n)
	}
	if api := getEgressAPI(t, s); len(api.Approvals) != 0 {
		t.Fatalf("a bad answer was kept: %+v", api.Approvals)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
}

// "Allow once" lasts as long as the command that asked: a later command that reuses
// its proxy user name (the job id, which the sandbox can read and choose) is not let
// through, and nobody is asked on its behalf.
func TestEgressAskOnceEndsWithCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	up := newEgressUpstream(t)
	s := testsite.Start(t, testsite.Options{Directive: askDirective()})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var asked atomic.Int32
	c, _ := elicitClient(ctx, t, s, func(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
		asked.Add(1)
		return accept("allow_once"), nil
	})
	get := "wget -q -O - http://once.test:" + up.port + "/hi"
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": waitProxy})
	first := testsite.Call(ctx, t, c, "execute", map[string]any{"command": get + ` && printf %s "$http_proxy" > /sandbox/once-proxy`})
	if st := testsite.Structured(t, first); st["exit_code"] != 0.0 || asked.Load() != 1 {
		t.Fatalf("allow once (asked %d): %s", asked.Load(), testsite.ResultText(first))
	}
	second := testsite.Call(ctx, t, c, "execute", map[string]any{"command": `grep -q '^http://j[0-9a-f]*:' /sandbox/once-proxy && http_proxy=$(cat /sandbox/once-proxy) ` + get})
	if st := testsite.Structured(t, second); st["exit_code"] == 0.0 || st["stdout"] != "" || asked.Load() != 1 {
		t.Fatalf("a later command with the first one's proxy user name (asked %d): %s", asked.Load(), testsite.ResultText(second))
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("the upstream got %d requests, want 1", n)
	}
}
