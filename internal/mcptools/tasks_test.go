package mcptools

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// These tests run mcp-go's own MCP server with the task store wired in as the handler
// wires it (taskStore.serverOptions, taskStore.request around each message), with
// tools of their own instead of the sandbox: no Docker, milliseconds each.

type fakeSession struct{ id string }

func (fakeSession) Initialize()                                         {}
func (fakeSession) Initialized() bool                                   { return true }
func (fakeSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return nil }
func (f fakeSession) SessionID() string                                 { return f.id }

type taskHarness struct {
	t       testing.TB
	store   *taskStore
	srv     *server.MCPServer
	release chan struct{} // the "wait" tool returns when this is closed
	stopped atomic.Int64  // "wait" calls that ended on tasks/cancel
	ids     atomic.Int64
}

func newTaskHarness(t testing.TB, maxTTL time.Duration, perSession, total int) *taskHarness {
	h := &taskHarness{t: t, store: newTaskStore(maxTTL, perSession, total), release: make(chan struct{})}
	hooks := &server.Hooks{}
	h.srv = server.NewMCPServer("tasks-test", "1",
		append(h.store.serverOptions(hooks), server.WithToolCapabilities(false), server.WithHooks(hooks))...)
	h.srv.AddTool(mcp.NewTool("big", mcp.WithTaskSupport(mcp.TaskSupportOptional), mcp.WithNumber("n")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			text := strings.Repeat("a", req.GetInt("n", 0))
			return mcp.NewToolResultStructured(map[string]any{"stdout": text}, text), nil
		})
	h.srv.AddTool(mcp.NewTool("wait", mcp.WithTaskSupport(mcp.TaskSupportOptional)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			ctx, cancel := taskContext(ctx)
			defer cancel()
			select {
			case <-h.release:
				return mcp.NewToolResultText("released"), nil
			case <-ctx.Done():
				h.stopped.Add(1)
				return mcp.NewToolResultText("cancelled"), nil
			}
		})
	h.srv.AddTool(mcp.NewTool("plain"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("plain"), nil
	})
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
		h.store.close()
	})
	return h
}

// send handles one JSON-RPC request of session as serveMCP does and returns the
// response as generic JSON.
func (h *taskHarness) send(session, method string, params any) map[string]any {
	h.t.Helper()
	msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": h.ids.Add(1), "method": method, "params": params})
	if err != nil {
		h.t.Fatal(err)
	}
	return h.sendRaw(session, msg)
}

func (h *taskHarness) sendRaw(session string, msg []byte) map[string]any {
	h.t.Helper()
	return h.sendRawAs("", session, msg)
}

// sendAs is send by person ("" for the operator).
func (h *taskHarness) sendAs(person, session, method string, params any) map[string]any {
	h.t.Helper()
	msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": h.ids.Add(1), "method": method, "params": params})
	if err != nil {
		h.t.Fatal(err)
	}
	return h.sendRawAs(person, session, msg)
}

func (h *taskHarness) sendRawAs(person, session string, msg []byte) map[string]any {
	h.t.Helper()
	ctx := WithCaller(context.Background(), Caller{Person: person})
	if session != "" {
		ctx = h.srv.WithContext(ctx, fakeSession{session})
	}
	ctx, done := h.store.request(ctx)
	resp := h.srv.HandleMessage(ctx, msg)
	done()
	b, err := json.Marshal(resp)
	if err != nil {
		h.t.Fatalf("encoding the response to %s: %v", msg, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		h.t.Fatal(err)
	}
	return m
}

// task makes a task-augmented call; ttl < 0 sends no ttl. It returns the task, or
// fails the test with the error.
func (h *taskHarness) task(session, tool string, args map[string]any, ttl float64) map[string]any {
	h.t.Helper()
	task, errMsg := h.tryTask(session, tool, args, ttl)
	if errMsg != "" {
		h.t.Fatalf("task-augmented %s: %s", tool, errMsg)
	}
	return task
}

func (h *taskHarness) tryTask(session, tool string, args map[string]any, ttl float64) (map[string]any, string) {
	h.t.Helper()
	tp := map[string]any{}
	if ttl >= 0 {
		tp["ttl"] = ttl
	}
	m := h.send(session, "tools/call", map[string]any{"name": tool, "arguments": args, "task": tp})
	if e, ok := m["error"].(map[string]any); ok {
		return nil, fmt.Sprint(e["message"])
	}
	task, ok := m["result"].(map[string]any)["task"].(map[string]any)
	if !ok {
		h.t.Fatalf("no task in %v", m)
	}
	return task, ""
}

// result fetches a task's result: the result, or the error message.
func (h *taskHarness) result(session, id string) (map[string]any, string) {
	h.t.Helper()
	m := h.send(session, "tasks/result", map[string]any{"taskId": id})
	if e, ok := m["error"].(map[string]any); ok {
		return nil, fmt.Sprint(e["message"])
	}
	return m["result"].(map[string]any), ""
}

func (h *taskHarness) counts() (tasks, reserved int, sessions map[string]int) {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	s := map[string]int{}
	for k, v := range h.store.sessions {
		s[k] = v
	}
	return len(h.store.tasks), h.store.reserved, s
}

// TestTaskTTLCapped: a ttl beyond max_task_ttl, none, or one not positive comes back
// as max_task_ttl; a shorter one is kept.
func TestTaskTTLCapped(t *testing.T) {
	h := newTaskHarness(t, time.Hour, 100, 1000)
	for _, tc := range []struct {
		ttl  float64
		want float64
	}{{1e12, 3600000}, {-1, 3600000}, {0, 3600000}, {-5, 3600000}, {5000, 5000}, {3600000, 3600000}} {
		args := map[string]any{"n": 1}
		var task map[string]any
		if tc.ttl == -1 {
			task = h.task("s", "big", args, -1) // no ttl at all
		} else {
			m := h.send("s", "tools/call", map[string]any{"name": "big", "arguments": args, "task": map[string]any{"ttl": tc.ttl}})
			task = m["result"].(map[string]any)["task"].(map[string]any)
		}
		if task["ttl"] != tc.want {
			t.Errorf("ttl %v: the task says ttl %v, want %v", tc.ttl, task["ttl"], tc.want)
		}
		got := h.send("s", "tasks/get", map[string]any{"taskId": task["taskId"]})
		if got["result"].(map[string]any)["ttl"] != tc.want {
			t.Errorf("ttl %v: tasks/get says %v", tc.ttl, got["result"])
		}
	}
}

// TestTaskLimits: a session beyond max_tasks, and the server beyond its total, get a
// JSON-RPC error that names the limit and says what to do; other sessions go on.
func TestTaskLimits(t *testing.T) {
	h := newTaskHarness(t, time.Hour, 3, 5)
	for i := 0; i < 3; i++ {
		h.task("a", "big", map[string]any{"n": 10}, 1e12)
	}
	_, msg := h.tryTask("a", "big", map[string]any{"n": 10}, 1e12)
	for _, want := range []string{"already holds 3 tasks", "max_tasks", "at most 1h", "tasks/result", "DELETE /mcp", "tasks/cancel", "without a task"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error for a session over max_tasks lacks %q: %q", want, msg)
		}
	}
	h.task("b", "big", map[string]any{"n": 10}, 1e12)
	h.task("b", "big", map[string]any{"n": 10}, 1e12)
	_, msg = h.tryTask("c", "big", map[string]any{"n": 10}, 1e12)
	if !strings.Contains(msg, "server already keeps 5 tasks") || !strings.Contains(msg, "max_tasks") {
		t.Errorf("the error for the server over its total: %q", msg)
	}
	// Plain calls are not tasks and are not counted.
	if m := h.send("c", "tools/call", map[string]any{"name": "plain"}); m["error"] != nil {
		t.Errorf("a plain call at the limit: %v", m)
	}
	if n, r, s := h.counts(); n != 5 || r != 0 || s["a"] != 3 || s["b"] != 2 || len(s) != 2 {
		t.Errorf("counts: %d tasks, %d reserved, sessions %v", n, r, s)
	}
}

// TestTaskLimitsConcurrent: the limit holds for calls that arrive at once.
func TestTaskLimitsConcurrent(t *testing.T) {
	h := newTaskHarness(t, time.Hour, 5, 1000)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, msg := h.tryTask("s", "big", map[string]any{"n": 1}, 1e12); msg == "" {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 5 {
		t.Errorf("%d of 40 concurrent task calls were accepted, want max_tasks = 5", ok.Load())
	}
}

// TestTaskAdmissionReadsLikeMCPGo: a task field spelled in another case is a task to
// mcp-go (encoding/json matches names without regard to case), so it is counted too;
// task calls that create no task give their admission back.
func TestTaskAdmissionReadsLikeMCPGo(t *testing.T) {
	h := newTaskHarness(t, time.Hour, 1, 1000)
	m := h.sendRaw("s", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"big","arguments":{"n":1},"TASK":{"ttl":1000000000000}}}`))
	result, _ := m["result"].(map[string]any)
	task, _ := result["task"].(map[string]any)
	if task == nil || task["ttl"] != float64(3600000) {
		t.Fatalf("a TASK field: %v", m)
	}
	if _, msg := h.tryTask("s", "big", map[string]any{"n": 1}, 1e12); !strings.Contains(msg, "max_tasks") {
		t.Errorf("the task made with TASK was not counted: %q", msg)
	}

	h = newTaskHarness(t, time.Hour, 1, 1000)
	if _, msg := h.tryTask("s", "missing", nil, 1e12); msg == "" {
		t.Fatal("a task call of a missing tool was accepted")
	}
	// A tool without task support runs as a plain call, task field or not.
	m = h.send("s", "tools/call", map[string]any{"name": "plain", "task": map[string]any{"ttl": 1000}})
	if resultText := fmt.Sprint(m["result"]); !strings.Contains(resultText, "text:plain") {
		t.Fatalf("a task call of a tool without task support: %v", m)
	}
	if n, r, s := h.counts(); n != 0 || r != 0 || len(s) != 0 {
		t.Errorf("after task calls that made no task: %d tasks, %d reserved, sessions %v", n, r, s)
	}
	h.task("s", "big", map[string]any{"n": 1}, 1e12)
}

// TestTaskResultsDroppedWithSession: a result is served as the tool made it; when its
// session ends the memory is freed at once (not at the ttl), tasks/result says why,
// and the session may make tasks again.
func TestTaskResultsDroppedWithSession(t *testing.T) {
	const n, size = 20, 1 << 20
	h := newTaskHarness(t, time.Hour, n, 1000)
	base := testenv.HeapAfterGC()
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, h.task("a", "big", map[string]any{"n": size}, 1e12)["taskId"].(string))
	}
	for _, id := range ids {
		res, msg := h.result("a", id)
		if msg != "" {
			t.Fatalf("tasks/result: %s", msg)
		}
		text := res["content"].([]any)[0].(map[string]any)["text"].(string)
		sc := res["structuredContent"].(map[string]any)["stdout"].(string)
		if len(text) != size || len(sc) != size || res["isError"] != nil {
			t.Fatalf("tasks/result: text %d bytes, structured %d bytes, isError %v", len(text), len(sc), res["isError"])
		}
	}
	other := h.task("b", "big", map[string]any{"n": 10}, 1e12)["taskId"].(string)
	held := testenv.HeapAfterGC()
	// Each result is held at least once; other garbage collected between the two
	// readings makes the figure a little lower than n*size, so ask for three quarters.
	if held < base+n*size*3/4 {
		t.Fatalf("the heap grew by %d bytes for %d results of %d bytes: the test measures nothing", held-base, n, size)
	}
	if _, msg := h.tryTask("a", "big", nil, 1e12); !strings.Contains(msg, "max_tasks") {
		t.Fatalf("session a at its limit: %q", msg)
	}

	h.store.endSession("a")
	after := testenv.HeapAfterGC()
	t.Logf("heap: %d MB before, %d MB with %d results of 1 MiB, %d MB after the session ended", base>>20, held>>20, n, after>>20)
	if after > base+n*size/4 {
		t.Errorf("ending the session freed %d of %d MB", (held-after)>>20, (held-base)>>20)
	}
	_, msg := h.result("a", ids[0])
	if !strings.Contains(msg, "no longer kept: its session ended") || !strings.Contains(msg, ids[0]) {
		t.Errorf("tasks/result after the session ended: %q", msg)
	}
	if res, msg := h.result("b", other); msg != "" || res["content"].([]any)[0].(map[string]any)["text"] != strings.Repeat("a", 10) {
		t.Errorf("another session's result: %v %q", res, msg)
	}
	// mcp-go keeps the records until their ttl: they still count in all, not per session.
	if tasks, _, s := h.counts(); tasks != n+1 || s["a"] != 0 || s["b"] != 1 {
		t.Errorf("after the session ended: %d tasks, sessions %v", tasks, s)
	}
	h.task("a", "big", map[string]any{"n": 1}, 1e12)
}

// TestTaskResultsExpire: when the ttl passes the result is freed and forgotten, by mcp-go
// and here, and its place is free again.
func TestTaskResultsExpire(t *testing.T) {
	const n, size = 10, 1 << 20
	h := newTaskHarness(t, 5*time.Second, n, 1000)
	base := testenv.HeapAfterGC()
	var ids []string
	for i := 0; i < n; i++ {
		task := h.task("a", "big", map[string]any{"n": size}, 1e12)
		if task["ttl"] != float64(5000) {
			t.Fatalf("ttl %v, want 5000", task["ttl"])
		}
		ids = append(ids, task["taskId"].(string))
	}
	if _, msg := h.result("a", ids[0]); msg != "" {
		t.Fatalf("tasks/result before the ttl: %s", msg)
	}
	testenv.WaitFor(t, 5*time.Second, "the results to be held", func() bool {
		h.store.mu.Lock()
		defer h.store.mu.Unlock()
		for _, t := range h.store.tasks {
			if t.result == nil {
				return false
			}
		}
		return true
	})
	held := testenv.HeapAfterGC()
	if held < base+n*size*3/4 {
		t.Fatalf("the heap grew by %d bytes for %d results of %d bytes: the test measures nothing", held-base, n, size)
	}
	if _, msg := h.tryTask("a", "big", nil, 1e12); !strings.Contains(msg, "max_tasks") {
		t.Fatalf("session at its limit: %q", msg)
	}
	testenv.WaitFor(t, 10*time.Second, "the tasks to expire", func() bool { tasks, _, _ := h.counts(); return tasks == 0 })
	after := testenv.HeapAfterGC()
	t.Logf("heap: %d MB before, %d MB with %d results of 1 MiB, %d MB after their ttl", base>>20, held>>20, n, after>>20)
	if after > base+n*size/4 {
		t.Errorf("the ttl freed %d of %d MB", (held-after)>>20, (held-base)>>20)
	}
	// The server's own record of the task goes on its own timer, a moment after ours
	// on a loaded machine.
	var msg string
	testenv.WaitFor(t, 10*time.Second, "tasks/result to say the task expired", func() bool {
		_, msg = h.result("a", ids[0])
		return strings.Contains(msg, "expired") || strings.Contains(msg, "not found")
	})
	if _, _, s := h.counts(); len(s) != 0 {
		t.Errorf("sessions still counted after the ttl: %v", s)
	}
	h.task("a", "big", map[string]any{"n": 1}, 1e12)
}

// TestTaskCancelFreesItsPlace: a cancelled task holds no result, so it no longer counts
// against its session, and its tool sees the cancellation.
func TestTaskCancelFreesItsPlace(t *testing.T) {
	h := newTaskHarness(t, time.Hour, 1, 1000)
	id := h.task("a", "wait", nil, 1e12)["taskId"].(string)
	if _, msg := h.tryTask("a", "big", nil, 1e12); !strings.Contains(msg, "max_tasks") {
		t.Fatalf("session at its limit: %q", msg)
	}
	if m := h.send("a", "tasks/cancel", map[string]any{"taskId": id}); m["error"] != nil {
		t.Fatalf("tasks/cancel: %v", m)
	}
	h.task("a", "big", map[string]any{"n": 1}, 1e12)
	testenv.WaitFor(t, 5*time.Second, "the cancelled tool to stop", func() bool { return h.stopped.Load() == 1 })
}

// TestTaskResultDroppedWhileRunning: a task whose session ends before its tool returns
// keeps no result; the tool's output is replaced by a note.
func TestTaskResultDroppedWhileRunning(t *testing.T) {
	h := newTaskHarness(t, time.Hour, 5, 1000)
	id := h.task("a", "wait", nil, 1e12)["taskId"].(string)
	h.store.endSession("a")
	close(h.release)
	testenv.WaitFor(t, 5*time.Second, "the task to finish", func() bool {
		m := h.send("a", "tasks/get", map[string]any{"taskId": id})
		return m["result"].(map[string]any)["status"] == "completed"
	})
	h.store.mu.Lock()
	kept := h.store.tasks[id].result
	h.store.mu.Unlock()
	if kept != nil {
		t.Errorf("a result was kept for a task of an ended session")
	}
}

// TestTaskStoreClose: unloading the configuration drops every result.
func TestTaskStoreClose(t *testing.T) {
	h := newTaskHarness(t, time.Hour, 5, 1000)
	id := h.task("a", "big", map[string]any{"n": 100}, 1e12)["taskId"].(string)
	if _, msg := h.result("a", id); msg != "" {
		t.Fatal(msg)
	}
	h.store.mu.Lock()
	r := h.store.tasks[id].result
	h.store.mu.Unlock()
	h.store.close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.content != nil || r.structured != nil {
		t.Errorf("a result is still held after close")
	}
}

// TestHeldResultEncoding: a handle encodes exactly as the result it stands for, and as
// a note once dropped.
func TestHeldResultEncoding(t *testing.T) {
	res := mcp.NewToolResultStructured(map[string]any{"stdout": "x<y>\n", "exit_code": 2}, "text <b>\n")
	res.IsError = true
	r := &taskResult{content: res.Content, structured: res.StructuredContent}
	want, _ := json.Marshal(res)
	got, _ := json.Marshal(r.handle(res))
	if string(got) != string(want) {
		t.Errorf("handle encodes as\n%s\nwant\n%s", got, want)
	}
	r.drop("its session ended")
	got, _ = json.Marshal(r.handle(res))
	if !strings.Contains(string(got), "no longer kept: its session ended") || strings.Contains(string(got), "stdout") {
		t.Errorf("dropped handle encodes as %s", got)
	}
}

// FuzzAsksForTask: every tools/call that mcp-go decodes with a task is counted by
// admit, however its fields are spelled, escaped or repeated; otherwise a client could
// make tasks past max_tasks. Each input is decoded twice by encoding/json, so its
// allocations are bounded by a small multiple of its size (checked below).
func FuzzAsksForTask(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute","task":{"ttl":5}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute","TASK":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute","t\u0061sk":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"task":{},"task":null}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"task":null,"Task":{"ttl":1}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"task":{}}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"task":"no"}}`,
		`{"method":"tools/call","params":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ours := asksForTask(msg)
		runtime.ReadMemStats(&after)
		if grown := after.TotalAlloc - before.TotalAlloc; grown > uint64(64*len(msg)+64<<10) {
			t.Errorf("%d bytes allocated for a message of %d", grown, len(msg))
		}
		var req mcp.CallToolRequest
		if json.Unmarshal(msg, &req) == nil && req.Params.Task != nil && !ours {
			t.Errorf("mcp-go decodes a task from %q, admit does not count it", msg)
		}
	})
}
