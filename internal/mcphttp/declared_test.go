package mcphttp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// TestDeclaredInSessionID: what a client declared at initialize rides in its session
// id and reads back whole for its person only; an id with its record altered belongs
// to no one; ids without a record (minted before records existed) still belong;
// names and extensions are bounded.
func TestDeclaredInSessionID(t *testing.T) {
	ids := NewSessionIDs("the-api-key-0123456789", personOf)
	var p mcp.InitializeParams
	p.ProtocolVersion = mcp.ProtocolVersion20251125
	p.ClientInfo.Name = strings.Repeat("é", 40) // 80 bytes
	p.Capabilities.Elicitation = &mcp.ElicitationCapability{Form: &struct{}{}}
	p.Capabilities.Extensions = map[string]any{"io.modelcontextprotocol/ui": map[string]any{"mimeTypes": []string{"text/html"}},
		"a": 1, "b": 2, "c": 3, "d": 4, "bad name!": 5}
	d := declaredOf(p)
	id := ids.Mint("alice", d)
	got, ok := ids.Declared(id, "alice")
	if !ok || got.Version != mcp.ProtocolVersion20251125 || got.Caps != "Ef" || len(got.Name) != 64 || !strings.HasPrefix(p.ClientInfo.Name, got.Name) {
		t.Fatalf("Declared(%s) = %+v, %v", id, got, ok)
	}
	if strings.Join(got.Extensions, " ") != "a b c d" {
		t.Errorf("extensions %v: want the first four valid names", got.Extensions)
	}
	caps := got.Capabilities()
	if caps.Elicitation == nil || caps.Elicitation.Form == nil || caps.Elicitation.URL != nil || caps.Sampling != nil || caps.Roots != nil {
		t.Errorf("capabilities %+v", caps)
	}
	if _, ok := ids.Declared(id, "bob"); ok || ids.Belongs(id, "bob") {
		t.Error("alice's id reads for bob")
	}
	dot := strings.IndexByte(id, '.')
	altered := []byte(id)
	altered[dot+5] = map[bool]byte{true: 'B', false: 'A'}[altered[dot+5] == 'A']
	if _, ok := ids.Declared(string(altered), "alice"); ok || ids.Belongs(string(altered), "alice") {
		t.Error("an id whose record was altered still belongs")
	}
	if plain := ids.Mint("alice", Declared{}); strings.Contains(plain, ".") || !ids.Belongs(plain, "alice") {
		t.Errorf("an id with nothing declared: %s", plain)
	} else if _, ok := ids.Declared(plain, "alice"); ok {
		t.Error("an id with nothing declared reads a record")
	}
	// A 2026-07-28 version asked at initialize is agreed on as 2025-11-25, as mcp-go does.
	p.ProtocolVersion = mcp.ProtocolVersion20260728
	if v := declaredOf(p).Version; v != mcp.ProtocolVersion20251125 {
		t.Errorf("version %q", v)
	}
}

// instance is one server of TestElicitationAcrossServers: its own mcp-go, with the
// site's session ids and replies, served as the site serves /mcp.
func instance(t *testing.T, store ReplyStore) *httptest.Server {
	t.Helper()
	ids := NewSessionIDs("the-api-key-0123456789", personOf)
	m := server.NewMCPServer("test", "1")
	m.AddTool(mcp.NewTool("ask"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s, _ := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo)
		if s == nil || s.GetClientCapabilities().Elicitation == nil {
			return mcp.NewToolResultText("no elicitation declared"), nil
		}
		res, err := m.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{
			Mode: mcp.ElicitationModeForm, Message: "Allow?",
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"decision": map[string]any{"type": "string"}}},
		}})
		if err != nil {
			return mcp.NewToolResultText("asking: " + err.Error()), nil
		}
		content, _ := res.Content.(map[string]any)
		return mcp.NewToolResultText(fmt.Sprintf("%v from %s", content["decision"], s.GetClientInfo().Name)), nil
	})
	h := server.NewStreamableHTTPServer(m, server.WithSessionIdManagerResolver(ids), server.WithHTTPContextFunc(ids.RestoreDeclared))
	replies := NewReplies(ReplyOptions{Key: []byte("replies-test-key"), Store: store, MCP: h, WithPerson: withPerson, Poll: 10 * time.Millisecond})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		person := r.Header.Get("X-Person")
		if !ids.Admit(w, r, person) {
			return
		}
		session := r.Header.Get(server.HeaderKeySessionID)
		body, _ := io.ReadAll(r.Body)
		body, ok := replies.Route(r.Context(), w, body, session, person)
		if !ok {
			return
		}
		sw := NewStreamWriter(w, time.Minute)
		out, end := replies.Writer(sw, session, person)
		defer end()
		ctx := WithInitialize(withPerson(r.Context(), person), body)
		h.Handle(out, &server.HTTPRequest{Method: r.Method, URL: r.URL, Header: r.Header, Body: body, Context: ctx})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// post sends a JSON-RPC message as alice in session (none: "").
func post(t *testing.T, srv *httptest.Server, session, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Person", "alice")
	if session != "" {
		req.Header.Set(server.HeaderKeySessionID, session)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// initialize opens a session on srv, declaring elicitation or not.
func initialize(t *testing.T, srv *httptest.Server, elicitation bool) string {
	t.Helper()
	caps := `{}`
	if elicitation {
		caps = `{"elicitation":{"form":{}}}`
	}
	resp := post(t, srv, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":`+caps+`,"clientInfo":{"name":"pair-test","version":"1"}}}`)
	defer resp.Body.Close()
	session := resp.Header.Get(server.HeaderKeySessionID)
	if resp.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, session)
	}
	return session
}

// callAsk calls the ask tool on srv and answers its question, if one comes, on
// answerOn; it returns the tool's text.
func callAsk(t *testing.T, srv, answerOn *httptest.Server, session string) string {
	t.Helper()
	resp := post(t, srv, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask","arguments":{}}}`)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		// An event stream's data lines, or a plain JSON answer.
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok && !strings.HasPrefix(data, "{") {
			continue
		}
		var msg struct {
			ID     any    `json:"id"`
			Method string `json:"method"`
			Result struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"result"`
		}
		if err := json.Unmarshal([]byte(data), &msg); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		if msg.Method == "elicitation/create" {
			id, _ := json.Marshal(msg.ID)
			r := post(t, answerOn, session, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"action":"accept","content":{"decision":"allow_once"}}}`)
			r.Body.Close()
			if r.StatusCode != http.StatusAccepted {
				t.Fatalf("the reply: %d", r.StatusCode)
			}
			continue
		}
		if len(msg.Result.Content) == 1 {
			// Read the stream to its end, so that the call's handler has returned
			// before the next call: mcp-go unregisters a session when a call of it
			// ends, and one still ending as the next call of the session starts
			// takes the next call's registration with it (its question's reply then
			// finds no session).
			_, _ = io.Copy(io.Discard, resp.Body)
			return msg.Result.Content[0].Text
		}
	}
	t.Fatalf("the call's stream ended without a result: %v", sc.Err())
	return ""
}

// TestElicitationAcrossServers: two mcp-go servers over one store, as two Caddy
// instances serve one site. A session initialized on A calls a tool on B, which
// knows from the session id that the client declared elicitation and its name, and
// asks; the reply reaches A, which hands it over, and B's tool gets the answer. The
// same with the reply on B itself; and a client that declared no elicitation is not
// asked on B.
func TestElicitationAcrossServers(t *testing.T) {
	store := newMemStore()
	a, b := instance(t, store), instance(t, store)
	session := initialize(t, a, true)
	post(t, b, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	for _, tc := range []struct {
		name     string
		answerOn *httptest.Server
	}{{"reply on the other server", a}, {"reply on the server that asked", b}} {
		if got := callAsk(t, b, tc.answerOn, session); got != "allow_once from pair-test" {
			t.Errorf("%s: %q", tc.name, got)
		}
	}
	if got := callAsk(t, b, a, initialize(t, a, false)); got != "no elicitation declared" {
		t.Errorf("a client without elicitation: %q", got)
	}
}
