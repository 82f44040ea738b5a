package mcpsandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcphttp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

func TestExecuteThroughCaddy(t *testing.T) {
	s := startSite(t, siteOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.client(ctx)

	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	// The file tools answer with text or image content only, so they have no output
	// schema; the job tools return execute's result and say so instead of repeating
	// its schema.
	textOnly := map[string]bool{"read_file": true, "write_file": true, "edit_file": true,
		"job_output": true, "job_input": true, "job_kill": true}
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || !textOnly[tool.Name] && tool.OutputSchema.Type == "" && tool.RawOutputSchema == nil {
			t.Errorf("tool %s lacks a description or output schema", tool.Name)
		}
	}
	for _, want := range []string{"execute", "share_file", "read_file", "write_file", "edit_file", "upload_link", "job_output", "job_input", "job_kill", "job_list"} {
		if !slices.Contains(names, want) {
			t.Fatalf("tools = %v, want %s among them", names, want)
		}
	}

	res := call(ctx, t, c, "execute", map[string]any{"command": "echo out; echo err >&2; exit 3"})
	st := structured(t, res)
	if st["stdout"] != "out\n" || st["stderr"] != "err\n" || st["exit_code"] != float64(3) {
		t.Fatalf("structured result = %v", st)
	}
	if txt := resultText(res); !strings.Contains(txt, "out") || !strings.Contains(txt, "err") || !strings.Contains(txt, "exit code 3") {
		t.Fatalf("text result = %q", txt)
	}
	if res.IsError {
		t.Fatal("a failing command is a result, not a tool error")
	}

	// The working directory is /sandbox and state does not carry between calls.
	res = call(ctx, t, c, "execute", map[string]any{"command": "pwd; cd /tmp; export FOO=1"})
	if got := structured(t, res)["stdout"]; got != "/sandbox\n" {
		t.Fatalf("pwd = %q", got)
	}
	res = call(ctx, t, c, "execute", map[string]any{"command": "pwd; echo ${FOO:-unset}"})
	if got := structured(t, res)["stdout"]; got != "/sandbox\nunset\n" {
		t.Fatalf("state carried over: %q", got)
	}
}

// TestExecuteBadArguments: through a real Caddy and sandbox, bad arguments and paths
// are tool errors that say what to do, and the sandbox works on. Every argument error
// is also checked without Docker in internal/mcptools (TestArgumentErrors); a few stay
// here to cover the whole path.
func TestExecuteBadArguments(t *testing.T) {
	s := startSite(t, siteOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client(ctx)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"execute", map[string]any{"command": "   "}, `needs "command"`},
		{"execute", map[string]any{"command": 42}, `"command" must be a string`},
		{"execute", map[string]any{"command": "pwd", "cwdd": "/tmp"}, `does not take the argument "cwdd"; it accepts: command,`},
		{"share_file", map[string]any{"path": "relative.txt"}, "/sandbox/relative.txt does not exist"},
		{"share_file", map[string]any{"path": "/sandbox/none-such"}, "does not exist"},
		{"share_file", map[string]any{"path": "/sandbox/./none-such"}, "/sandbox/none-such does not exist"},
		{"share_file", map[string]any{"path": "/sandbox/a", "expires_in": "7d"}, `"expires_in" must be`},
		{"share_file", map[string]any{"path": "/sandbox/a", "expires_in": 1e9}, "max_link_ttl"},
		{"read_file", map[string]any{"path": "notes.txt"}, "/sandbox/notes.txt does not exist"},
		{"read_file", map[string]any{"path": "/sandbox/none-such"}, "does not exist"},
		{"read_file", map[string]any{"path": "/sandbox"}, "is a directory"},
		{"read_file", map[string]any{"path": "/etc/passwd", "lines": 5}, `does not take the argument "lines"`},
		{"write_file", map[string]any{"path": "", "content": "a"}, `needs "path"`},
		{"write_file", map[string]any{"path": "/sandbox", "content": "a"}, "is a directory"},
		{"edit_file", map[string]any{"path": "/sandbox/none-such", "old_text": "a", "new_text": "b"}, "does not exist"},
		{"edit_file", map[string]any{"path": "/etc/passwd", "old_text": "root", "new_text": "root"}, "the same"},
		{"edit_file", map[string]any{"path": "/etc/passwd", "old_text": "no such text", "new_text": "x"}, "not found"},
	} {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = tc.tool, tc.args
		res, err := c.CallTool(ctx, req)
		if err != nil {
			// Schema validation in the client or server is an acceptable clear answer too.
			if !strings.Contains(err.Error(), "timeout") && !strings.Contains(err.Error(), "command") {
				t.Errorf("%s(%v): protocol error %v", tc.tool, tc.args, err)
			}
			continue
		}
		if !res.IsError || !strings.Contains(resultText(res), tc.want) {
			t.Errorf("%s(%v) = error %v %q, want a tool error containing %q", tc.tool, tc.args, res.IsError, resultText(res), tc.want)
		}
	}
	// A directory is shared as a zip now, not refused.
	if st := structured(t, call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox"})); st["name"] != "sandbox.zip" || st["directory"] != true {
		t.Errorf("share_file /sandbox = %v, want a zip link", st)
	}
	// The sandbox still works after all that, and numbers sent as strings are accepted.
	if got := structured(t, call(ctx, t, c, "execute", map[string]any{"command": "echo fine", "timeout": "5"}))["stdout"]; got != "fine\n" {
		t.Fatalf("after bad calls: %q", got)
	}
	// Every tool's input schema refuses unknown properties, so clients that validate
	// see the rule before calling.
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.InputSchema.AdditionalProperties != false {
			t.Errorf("%s: input schema additionalProperties = %v, want false", tool.Name, tool.InputSchema.AdditionalProperties)
		}
	}
}

func TestHTTPErrors(t *testing.T) {
	s := startSite(t, siteOptions{})
	post := func(auth, origin, ctype, body string) *http.Response {
		req, _ := http.NewRequest("POST", s.url+"/mcp", strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`

	resp := post("", "", "application/json", initBody)
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `resource_metadata="`+s.url+`/.well-known/oauth-protected-resource/mcp"`) {
		t.Fatalf("no token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	resp = post("wrong-"+s.key, "", "application/json", initBody)
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "invalid_token") {
		t.Fatalf("wrong token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if resp := post(s.key, "https://evil.example", "application/json", initBody); resp.StatusCode != 403 {
		t.Fatalf("foreign origin: %d, want 403", resp.StatusCode)
	}
	if resp := post(s.key, "http://localhost:6274", "application/json", initBody); resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:6274" {
		t.Fatalf("loopback origin: %d %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	if resp := post(s.key, "", "application/json", "{not json"); resp.StatusCode != 200 && resp.StatusCode != 400 {
		t.Fatalf("malformed JSON: %d", resp.StatusCode)
	}
	if resp := post(s.key, "", "text/plain", initBody); resp.StatusCode != 400 {
		t.Fatalf("wrong content type: %d", resp.StatusCode)
	}
	if resp := post(s.key, "", "application/json", `{"x":"`+strings.Repeat("a", mcphttp.MaxRequestBody)+`"}`); resp.StatusCode != 413 {
		t.Fatalf("oversized body: %d", resp.StatusCode)
	}
	// Other paths reach the next handler.
	r, err := http.Get(s.url + "/something/else")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(b) != "the next handler" {
		t.Fatalf("other path answered %q", b)
	}
}

// TestProtocolRevisions initializes with each protocol revision in use and runs a tool.
func TestProtocolRevisions(t *testing.T) {
	s := startSite(t, siteOptions{})
	for _, v := range []string{mcp.ProtocolVersion20250618, mcp.ProtocolVersion20251125, mcp.ProtocolVersion20260728} {
		t.Run(v, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := s.clientWith(ctx, s.url, v)
			if got := structured(t, call(ctx, t, c, "execute", map[string]any{"command": "echo " + v}))["stdout"]; got != v+"\n" {
				t.Fatalf("got %q", got)
			}
		})
	}
}

func TestShareFileDownload(t *testing.T) {
	s := startSite(t, siteOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.client(ctx)

	call(ctx, t, c, "execute", map[string]any{"command": `head -c 3000000 /dev/urandom > '/sandbox/my report "v2".bin' && sha256sum '/sandbox/my report "v2".bin'`})
	sum := strings.Fields(s.containerExec(`sha256sum '/sandbox/my report "v2".bin'`))[0]
	res := call(ctx, t, c, "share_file", map[string]any{"path": `/sandbox/my report "v2".bin`})
	st := structured(t, res)
	link, _ := st["url"].(string)
	if !strings.HasPrefix(link, s.url+"/files/") || st["size"] != float64(3000000) {
		t.Fatalf("share_file = %v", st)
	}

	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := sha256.Sum256(body)
	if resp.StatusCode != 200 || hex.EncodeToString(got[:]) != sum || resp.ContentLength != 3000000 {
		t.Fatalf("download: %d, %d bytes, sum match %v", resp.StatusCode, len(body), hex.EncodeToString(got[:]) == sum)
	}
	if cd := resp.Header.Get("Content-Disposition"); !strings.HasPrefix(cd, "attachment") || !strings.Contains(cd, `my report \"v2\".bin`) {
		t.Fatalf("Content-Disposition = %q", cd)
	}

	// A range, a suffix range, HEAD.
	req, _ := http.NewRequest("GET", link, nil)
	req.Header.Set("Range", "bytes=1000-1999")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 206 || !bytes.Equal(part, body[1000:2000]) || resp.Header.Get("Content-Range") != "bytes 1000-1999/3000000" {
		t.Fatalf("range: %d %q, %d bytes, equal %v", resp.StatusCode, resp.Header.Get("Content-Range"), len(part), bytes.Equal(part, body[1000:2000]))
	}
	req.Header.Set("Range", "bytes=-10")
	resp, _ = http.DefaultClient.Do(req)
	part, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 206 || !bytes.Equal(part, body[len(body)-10:]) {
		t.Fatalf("suffix range: %d", resp.StatusCode)
	}
	req.Header.Set("Range", "bytes=5000000-")
	resp, _ = http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.StatusCode != 416 || resp.Header.Get("Content-Range") != "bytes */3000000" {
		t.Fatalf("unsatisfiable range: %d %q", resp.StatusCode, resp.Header.Get("Content-Range"))
	}
	resp, _ = http.Head(link)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != 3000000 || resp.Header.Get("Accept-Ranges") != "bytes" {
		t.Fatalf("HEAD: %d %d", resp.StatusCode, resp.ContentLength)
	}

	// Tampered and truncated links are refused; nothing else of the container is reachable.
	tampered := strings.Replace(link, "my%20report", "other", 1)
	expiry, _, _ := strings.Cut(strings.TrimPrefix(link, s.url+"/files/"), ".")
	for name, bad := range map[string]string{
		"tampered path":   tampered,
		"truncated":       link[:strings.LastIndex(link, "/")],
		"no signature":    s.url + "/files/" + expiry + "/sandbox/x",
		"traversal":       strings.Replace(link, "/sandbox/", "/sandbox/../etc/", 1),
		"forged far past": s.url + "/files/99999999999.AAAA/etc/passwd",
	} {
		resp, err := http.Get(bad)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(b), "not valid") {
			t.Errorf("%s link %s: %d", name, bad, resp.StatusCode)
		}
	}

	// A file deleted since the link was made: 404 with a clear page.
	call(ctx, t, c, "execute", map[string]any{"command": `rm '/sandbox/my report "v2".bin'`})
	resp, _ = http.Get(link)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(b), "no longer a file") {
		t.Fatalf("deleted file: %d %s", resp.StatusCode, b)
	}
}

func TestExpiredLink(t *testing.T) {
	s := startSite(t, siteOptions{directive: []string{"link_ttl 1s"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client(ctx)
	call(ctx, t, c, "execute", map[string]any{"command": "echo hi > /sandbox/x.txt"})
	link := structured(t, call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/x.txt"}))["url"].(string)
	time.Sleep(2200 * time.Millisecond)
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 410 || !strings.Contains(string(b), "expired") {
		t.Fatalf("expired link: %d %s", resp.StatusCode, b)
	}
}

// TestProgressNotifications: a command that prints over a few seconds reports its
// output while it runs.
func TestProgressNotifications(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testProgress(t, siteOptions{}) })
	// Behind Caddy's encode the stream is compressed and must still flush each event.
	t.Run("encode", func(t *testing.T) {
		s := testProgress(t, siteOptions{site: []string{"encode gzip"}})
		// The MCP responses really are compressed there.
		tr := &http.Transport{DisableCompression: true}
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr}
		post := func(body, sid string) *http.Response {
			req, _ := http.NewRequest("POST", s.url+"/mcp", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+s.key)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Accept-Encoding", "gzip")
			if sid != "" {
				req.Header.Set("Mcp-Session-Id", sid)
				req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
		init := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`, "")
		list := post(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, init.Header.Get("Mcp-Session-Id"))
		if list.StatusCode != 200 || list.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("tools/list behind encode: %d, Content-Encoding %q", list.StatusCode, list.Header.Get("Content-Encoding"))
		}
	})
}

func testProgress(t *testing.T, opts siteOptions) *site {
	s := startSite(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client(ctx)
	// The container and its agent are made first: the times below are the command's.
	call(ctx, t, c, "execute", map[string]any{"command": "true"})
	var mu sync.Mutex
	var msgs []string
	var times []time.Time
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method != "notifications/progress" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		msg, _ := n.Params.AdditionalFields["message"].(string)
		msgs = append(msgs, msg)
		times = append(times, time.Now())
	})
	req := mcp.CallToolRequest{}
	req.Params.Name = "execute"
	req.Params.Arguments = map[string]any{"command": "for i in 1 2 3 4 5; do echo tick-$i; sleep 1; done"}
	req.Params.Meta = &mcp.Meta{ProgressToken: "p-1"}
	start := time.Now()
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	done := time.Now()
	if !strings.Contains(structured(t, res)["stdout"].(string), "tick-5") {
		t.Fatalf("result: %v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	joined := strings.Join(msgs, "\n")
	if len(msgs) < 3 || !strings.Contains(joined, "tick-1") || !strings.Contains(joined, "tick-3") {
		t.Fatalf("got %d progress notifications: %q", len(msgs), msgs)
	}
	// The first tick is due at once and the result 4 s later; on a busy machine the
	// first may come late, but never with the result.
	if times[0].Sub(start) > 4*time.Second || done.Sub(times[0]) < time.Second {
		t.Fatalf("progress did not arrive while the command ran: first after %v, result %v later", times[0].Sub(start), done.Sub(times[0]))
	}
	return s
}

// TestCancelKillsCommand: a client that gives up (closing the request) kills the
// command in the container.
func TestCancelKillsCommand(t *testing.T) {
	s := startSite(t, siteOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client(ctx)
	cancelCall(ctx, t, s, c, "sleep 4321", "sleep 4321")
	waitFor(t, 15*time.Second, "sleep 4321 to be killed", func() bool {
		return !strings.Contains(s.tryExec("ps -o args"), "sleep 4321")
	})
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, d, what, cond)
}

// TestReloadKeepsContainer: a config reload keeps the same container and a detached
// job keeps running; the sandbox works under the new config.
func TestReloadKeepsContainer(t *testing.T) {
	s := startSite(t, siteOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client(ctx)
	call(ctx, t, c, "execute", map[string]any{"command": "setsid nohup sleep 2345 >/dev/null 2>&1 & echo started"})
	id := s.containerID()

	// A standalone GET stream, as clients keep open for server notifications, on the
	// client's own session (an id the server did not issue is unknown: 404).
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.GetSessionId())
	req.Header.Set("Mcp-Protocol-Version", mcp.ProtocolVersion20250618)
	stream, err := http.DefaultClient.Do(req)
	if err != nil || stream.StatusCode != 200 {
		t.Fatalf("GET stream: %v %v", err, stream)
	}
	streamDone := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, stream.Body); close(streamDone) }()

	s.load(siteOptions{directive: []string{"link_ttl 2h", "max_output 100000"}})
	select {
	case <-streamDone: // the old config's stream ends; the client reconnects to the new one
	case <-time.After(10 * time.Second):
		t.Fatal("the old config's GET stream stayed open after the reload")
	}
	c2 := s.client(ctx)
	st := structured(t, call(ctx, t, c2, "execute", map[string]any{"command": "ps -o args | grep -c '^sleep 2345'"}))
	if st["stdout"] != "1\n" {
		t.Fatalf("detached job after reload: %v", st)
	}
	if got := s.containerID(); got != id {
		t.Fatalf("container changed across reload: %s -> %s", id, got)
	}
	// A client of the old config keeps working: sessions are not tied to one config.
	if got := structured(t, call(ctx, t, c, "execute", map[string]any{"command": "echo again"}))["stdout"]; got != "again\n" {
		t.Fatalf("old client after reload: %q", got)
	}
}

// TestRawJSONRPC drives /mcp with plain HTTP, as a minimal client would, and checks
// the content types of the answers.
func TestRawJSONRPC(t *testing.T) {
	s := startSite(t, siteOptions{})
	do := func(body string, hdr map[string]string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", s.url+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+s.key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := do(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `"protocolVersion":"2025-06-18"`) {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	hdr := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"}
	resp, body = do(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute","arguments":{"command":"echo raw"}}}`, hdr)
	var msg struct {
		Result struct {
			StructuredContent map[string]any `json:"structuredContent"`
		} `json:"result"`
	}
	payload := body
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		i := strings.LastIndex(body, "data: ")
		payload = strings.TrimSpace(body[i+6:])
	}
	if err := json.Unmarshal([]byte(payload), &msg); err != nil || msg.Result.StructuredContent["stdout"] != "raw\n" {
		t.Fatalf("tools/call: %d %q: %v", resp.StatusCode, body, err)
	}
}

func httpGetBody(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	return string(b)
}
