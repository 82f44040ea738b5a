package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// rawCall26 sends tools/call as a 2026-07-28 client does (no session; version, client
// info and capabilities in _meta; the routing headers), with params added, and
// returns the JSON-RPC result.
func rawCall26(ctx context.Context, t *testing.T, s *testsite.Site, id int, tool string, args map[string]any, extra map[string]any) map[string]any {
	t.Helper()
	params := map[string]any{"name": tool, "arguments": args, "_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw-mrtr", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{"form": map[string]any{}}},
	}}
	for k, v := range extra {
		params[k] = v
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/mcp", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+s.Key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Mcp-Session-Id") != "" {
		t.Errorf("a 2026-07-28 request got a session id")
	}
	res, failed, ok := rpcAnswer(raw, resp.Header.Get("Content-Type"), int64(id))
	if ok && failed {
		t.Fatalf("%s answered %d %s", tool, resp.StatusCode, raw)
	}
	if ok {
		return res
	}
	t.Fatalf("no answer to %s: %d %s", tool, resp.StatusCode, raw)
	return nil
}

// rpcAnswer finds the answer to request id in a response body: a JSON body, or a
// stream whose message with that id answers it. failed says the answer is an error
// (or has no result); ok says an answer was found.
func rpcAnswer(raw []byte, contentType string, id int64) (result map[string]any, failed, ok bool) {
	msgs := []string{string(raw)}
	if strings.HasPrefix(contentType, "text/event-stream") {
		msgs = nil
		for _, line := range strings.Split(string(raw), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				msgs = append(msgs, d)
			}
		}
	}
	for _, m := range msgs {
		var out struct {
			ID     any            `json:"id"`
			Result map[string]any `json:"result"`
			Error  map[string]any `json:"error"`
		}
		if json.Unmarshal([]byte(m), &out) != nil || out.ID != float64(id) {
			continue
		}
		return out.Result, out.Error != nil || out.Result == nil, true
	}
	return nil, false, false
}

// resultText is the text of a tool result as raw JSON.
func resultText(res map[string]any) string {
	b, _ := json.Marshal(res)
	return string(b)
}

// Through a real Caddy, raw 2026-07-28 JSON-RPC (no session, no server-initiated
// requests): a command to an unlisted host gives input_required with one
// elicitation/create naming the host; a retry with a tampered requestState is refused,
// its connection refused, and the host never reached; a retry with "allow once" and
// the state as given runs the command to its end, and the host is reached.
func TestEgressAskMRTR(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	up := newEgressUpstream(t)
	s := testsite.Start(t, testsite.Options{Directive: askDirective()})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	get := "wget -q -O - http://once.test:" + up.port + "/hi"
	answer := func(decision string) map[string]any {
		return map[string]any{questionKey26: map[string]any{"action": "accept", "content": map[string]any{"decision": decision}}}
	}

	rawCall26(ctx, t, s, 1, "execute", map[string]any{"command": waitProxy}, nil)
	ask := func(id int) (state string) {
		t.Helper()
		began := time.Now()
		res := rawCall26(ctx, t, s, id, "execute", map[string]any{"command": get}, nil)
		if res["resultType"] != "input_required" {
			t.Fatalf("a command to an unlisted host: %s", resultText(res))
		}
		reqs, _ := res["inputRequests"].(map[string]any)
		q, _ := reqs[questionKey26].(map[string]any)
		params, _ := q["params"].(map[string]any)
		msg, _ := params["message"].(string)
		schema, _ := json.Marshal(params["requestedSchema"])
		if len(reqs) != 1 || q["method"] != "elicitation/create" || params["mode"] != "form" ||
			!strings.Contains(msg, "once.test:"+up.port) || !strings.Contains(string(schema), `"enum":["allow_once","allow_always","deny"]`) {
			t.Fatalf("the question: %s", resultText(res))
		}
		state, _ = res["requestState"].(string)
		if state == "" || time.Since(began) > 20*time.Second {
			t.Fatalf("no requestState, or asked late (%v): %s", time.Since(began), resultText(res))
		}
		return state
	}

	// A tampered state: refused, saying what to do; the connection is refused.
	state := ask(2)
	body, sig, _ := strings.Cut(state, ".")
	var st map[string]any
	b, _ := jsonB64(body)
	_ = json.Unmarshal(b, &st)
	job, _ := st["j"].(string)
	st["h"] = "other.test"
	forged, _ := json.Marshal(st)
	res := rawCall26(ctx, t, s, 3, "execute", map[string]any{"command": get},
		map[string]any{"requestState": b64(forged) + "." + sig, "inputResponses": answer("allow_once")})
	if res["isError"] != true || !strings.Contains(resultText(res), "signature does not match") || !strings.Contains(resultText(res), "Run the command again") {
		t.Fatalf("a tampered requestState: %s", resultText(res))
	}
	out := rawCall26(ctx, t, s, 4, "job_output", map[string]any{"job_id": job, "wait": 30}, nil)
	sc, _ := out["structuredContent"].(map[string]any)
	if sc["running"] == true || sc["exit_code"] == 0.0 || !strings.Contains(fmt.Sprint(sc["note"]), "once.test (refused by the person)") {
		t.Fatalf("the command after a tampered answer: %s", resultText(out))
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("a tampered answer reached the host: %d requests", n)
	}

	// Allow once, with the state as given: the retry follows the command to its end.
	state = ask(5)
	res = rawCall26(ctx, t, s, 6, "execute", map[string]any{"command": get},
		map[string]any{"requestState": state, "inputResponses": answer("allow_once")})
	sc, _ = res["structuredContent"].(map[string]any)
	if sc["exit_code"] != 0.0 || !strings.Contains(fmt.Sprint(sc["stdout"]), "hello from once.test") {
		t.Fatalf("allow once: %s", resultText(res))
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("the upstream got %d requests, want 1", n)
	}
	// The same state again: the question is gone, and nothing runs twice.
	res = rawCall26(ctx, t, s, 7, "execute", map[string]any{"command": get},
		map[string]any{"requestState": state, "inputResponses": answer("allow_once")})
	if sc, _ = res["structuredContent"].(map[string]any); sc["exit_code"] != 0.0 || len(up.requests()) != 1 {
		t.Fatalf("a replayed answer: %s", resultText(res))
	}
}

// questionKey26 is the key of the question among inputRequests.
const questionKey26 = "egress"

func jsonB64(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
