package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// A client that makes MCP tasks and never lets go of them must not grow Caddy's memory
// without bound: through a real Caddy and a real sandbox, task-augmented execute calls
// whose results hold 400 KB each, with a ttl of 1e12 ms.

// rawMCP is a session of a hand-rolled MCP client (protocol 2025-11-25), so the test
// controls every field it sends (a ttl of 1e12, a DELETE of the session).
type rawMCP struct {
	t   testing.TB
	s   *testsite.Site
	key string // the bearer token: the site's API key unless set
	sid string
	ids atomic.Int64
}

// rpcError is a JSON-RPC error.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func rawSession(s *testsite.Site, t testing.TB) *rawMCP {
	t.Helper()
	return rawSessionAs(s, t, s.Key)
}

// rawSessionAs is rawSession with key as the bearer token (a person's key).
func rawSessionAs(s *testsite.Site, t testing.TB, key string) *rawMCP {
	t.Helper()
	c := &rawMCP{t: t, s: s, key: key}
	resp, _, rerr := c.post("initialize", map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "hostile-tasks", "version": "1"},
	})
	if rerr != nil {
		t.Fatalf("initialize: %s", rerr.Message)
	}
	c.sid = resp.Header.Get("Mcp-Session-Id")
	if c.sid == "" {
		t.Fatal("initialize: no Mcp-Session-Id")
	}
	return c
}

// call sends one request and returns its result, or its JSON-RPC error.
func (c *rawMCP) call(method string, params any) (json.RawMessage, *rpcError) {
	c.t.Helper()
	_, res, rerr := c.post(method, params)
	return res, rerr
}

func (c *rawMCP) post(method string, params any) (*http.Response, json.RawMessage, *rpcError) {
	c.t.Helper()
	id := c.ids.Add(1)
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	req, _ := http.NewRequest("POST", c.s.URL+"/mcp", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.sid != "" {
		req.Header.Set("Mcp-Session-Id", c.sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	// The answer is one JSON body, or an event stream whose message with our id is it.
	var payloads [][]byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			if d, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
				payloads = append(payloads, bytes.Clone(d))
			}
		}
	} else {
		b, _ := io.ReadAll(resp.Body)
		payloads = append(payloads, b)
	}
	for _, p := range payloads {
		var msg struct {
			ID     any             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *rpcError       `json:"error"`
		}
		if json.Unmarshal(p, &msg) == nil && fmt.Sprint(msg.ID) == fmt.Sprint(id) {
			return resp, msg.Result, msg.Error
		}
	}
	c.t.Fatalf("%s: HTTP %d, no answer with id %d in %.500q", method, resp.StatusCode, id, payloads)
	return nil, nil, nil
}

// end ends the session with DELETE /mcp.
func (c *rawMCP) end() {
	c.t.Helper()
	req, _ := http.NewRequest("DELETE", c.s.URL+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Mcp-Session-Id", c.sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("DELETE /mcp: %d", resp.StatusCode)
	}
}

type createdTask struct {
	ID  string  `json:"taskId"`
	TTL float64 `json:"ttl"`
}

// bigTask asks for a task-augmented execute whose stdout is size bytes, with a ttl of
// 1e12 ms. It returns the task, or the error that refused it.
func (c *rawMCP) bigTask(size int) (*createdTask, *rpcError) {
	c.t.Helper()
	res, rerr := c.call("tools/call", map[string]any{
		"name":      "execute",
		"arguments": map[string]any{"command": fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a`, size), "max_output": size},
		"task":      map[string]any{"ttl": 1_000_000_000_000},
	})
	if rerr != nil {
		return nil, rerr
	}
	var out struct {
		Task createdTask `json:"task"`
	}
	if err := json.Unmarshal(res, &out); err != nil || out.Task.ID == "" {
		c.t.Fatalf("no task in %.300s: %v", res, err)
	}
	return &out.Task, nil
}

// stdoutOf waits for a task's result and returns its stdout, or the error.
func (c *rawMCP) stdoutOf(id string) (string, *rpcError) {
	c.t.Helper()
	res, rerr := c.call("tasks/result", map[string]any{"taskId": id})
	if rerr != nil {
		return "", rerr
	}
	var out struct {
		StructuredContent struct {
			Stdout string `json:"stdout"`
		} `json:"structuredContent"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(res, &out); err != nil || out.IsError {
		c.t.Fatalf("tasks/result: %.300s (%v)", res, err)
	}
	return out.StructuredContent.Stdout, nil
}

// rssGuard fails the test once the process's RSS has grown by more than 1 GB over
// base (kB; 4 GB under the race detector), so a run of unbounded code stops before it
// hurts the machine.
func rssGuard(t testing.TB, base int64) {
	t.Helper()
	limit := int64(1 << 20)
	if raceEnabled {
		limit *= 4
	}
	if grown := procStatus(t)["VmRSS"] - base; grown > limit {
		t.Fatalf("RSS grew by %d MB: stopping", grown>>10)
	}
}

// makeTasks runs n task calls of c, workers at a time, each followed by tasks/result.
// It returns the tasks made and the errors of the calls refused.
func makeTasks(t *testing.T, c *rawMCP, n, workers, size int, base int64) (made []*createdTask, refused []*rpcError) {
	t.Helper()
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				task, rerr := c.bigTask(size)
				if rerr != nil {
					mu.Lock()
					refused = append(refused, rerr)
					mu.Unlock()
					continue
				}
				out, rerr := c.stdoutOf(task.ID)
				if rerr != nil {
					t.Errorf("tasks/result of a new task: %s", rerr.Message)
				} else if len(out) != size {
					t.Errorf("a task's stdout has %d bytes, want %d", len(out), size)
				}
				mu.Lock()
				made = append(made, task)
				check := len(made)%20 == 0
				mu.Unlock()
				if check {
					rssGuard(t, base)
				}
			}
		}()
	}
	wg.Wait()
	return made, refused
}

// heapAfterGC is the live heap, in bytes.
// TestHostileTasksBounded: a client that makes task after task with a ttl of 1e12 gets
// the ttl cut to max_task_ttl, is refused beyond max_tasks with an error that says what
// to do, and its results are freed when its session ends. 400 finished tasks of 400 KB
// grow Caddy's RSS by far less than they would hold.
func TestHostileTasksBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker: runs task-augmented execute calls through a real Caddy and sandbox")
	}
	const size = 400_000
	s := testsite.Start(t, testsite.Options{Directive: []string{"max_output 400000"}})
	// The sandbox starts on the first call: let it, so the baseline includes it.
	warm := rawSession(s, t)
	if _, rerr := warm.call("tools/call", map[string]any{"name": "execute", "arguments": map[string]any{"command": "true"}}); rerr != nil {
		t.Fatalf("execute: %s", rerr.Message)
	}
	warm.end()
	debug.FreeOSMemory()
	base := procStatus(t)["VmRSS"]
	resetPeakRSS(t)
	stop, samples := sampleRSS()
	start := time.Now()

	// One session asks for 150 tasks and never ends: 100 (max_tasks) are made.
	hostile := rawSession(s, t)
	heap0 := int64(testenv.HeapAfterGC())
	made, refused := makeTasks(t, hostile, 150, 8, size, base)
	if len(made) != 100 || len(refused) != 50 {
		t.Errorf("one session: %d tasks made, %d refused; want 100 and 50 (max_tasks 100)", len(made), len(refused))
	}
	for _, task := range made {
		if task.TTL != 3_600_000 {
			t.Errorf("a ttl of 1e12 came back as %v, want 3600000 (max_task_ttl 1h)", task.TTL)
			break
		}
	}
	if len(refused) > 0 {
		rerr := refused[0]
		for _, want := range []string{"already holds 100 tasks", "max_tasks", "tasks/result", "DELETE /mcp", "tasks/cancel"} {
			if !strings.Contains(rerr.Message, want) {
				t.Errorf("the refusal lacks %q: %q", want, rerr.Message)
			}
		}
	}
	if len(made) == 0 {
		t.Fatal("no task was made")
	}
	var got struct {
		TTL float64 `json:"ttl"`
	}
	if res, rerr := hostile.call("tasks/get", map[string]any{"taskId": made[0].ID}); rerr != nil || json.Unmarshal(res, &got) != nil || got.TTL != 3_600_000 {
		t.Errorf("tasks/get: ttl %v (%v)", got.TTL, rerr)
	}

	// Ending the session frees its results at once.
	heapHeld := int64(testenv.HeapAfterGC())
	hostile.end()
	heapAfter := int64(testenv.HeapAfterGC())
	t.Logf("live heap: %d MB before, %d MB with the session's %d results, %d MB after DELETE /mcp",
		heap0>>20, heapHeld>>20, len(made), heapAfter>>20)
	if freed := heapHeld - heapAfter; freed < int64(len(made))*size*3/4 {
		t.Errorf("DELETE /mcp freed %d MB of the %d results of 400 KB", freed>>20, len(made))
	}
	if _, rerr := hostile.stdoutOf(made[0].ID); rerr == nil || !strings.Contains(rerr.Message, "its session ended") {
		t.Errorf("tasks/result after DELETE /mcp: %v", rerr)
	}

	// Three more sessions of 100 tasks, each ended: 400 finished task calls in all.
	finished := len(made)
	for i := 0; i < 3; i++ {
		c := rawSession(s, t)
		made, refused := makeTasks(t, c, 100, 8, size, base)
		if len(refused) > 0 {
			t.Errorf("session %d: %d task calls refused: %s", i+2, len(refused), refused[0].Message)
		}
		finished += len(made)
		c.end()
	}
	peak := max(stop(), procStatus(t)["VmHWM"])
	elapsed := time.Since(start)
	t.Logf("%d finished tasks of 400 KB in %s; RSS %d MB at the start, peak %d MB (+%d MB; %d samples; race detector: %v)",
		finished, elapsed.Round(time.Second), base>>10, peak>>10, (peak-base)>>10, *samples, raceEnabled)
	if finished != 400 {
		t.Errorf("%d tasks finished, want 400", finished)
	}
	if grown := peak - base; grown > 256<<10 && !raceEnabled {
		t.Errorf("RSS grew by %d MB for tasks whose results should be bounded (limit 256 MB)", grown>>10)
	}
}

// TestHostileTasksExpire: with a short max_task_ttl, a ttl of 1e12 comes back cut to it,
// and when it passes the results are freed and the session's places are free again.
func TestHostileTasksExpire(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker: runs task-augmented execute calls through a real Caddy and sandbox")
	}
	const size, n = 400_000, 10
	s := testsite.Start(t, testsite.Options{Directive: []string{"max_output 400000", "max_task_ttl 30s", "max_tasks 10"}})
	c := rawSession(s, t)
	heap0 := int64(testenv.HeapAfterGC())
	var tasks []*createdTask
	for i := 0; i < n; i++ {
		task, rerr := c.bigTask(size)
		if rerr != nil {
			t.Fatalf("task %d: %s", i, rerr.Message)
		}
		if task.TTL != 30_000 {
			t.Fatalf("a ttl of 1e12 came back as %v, want 30000 (max_task_ttl 30s)", task.TTL)
		}
		tasks = append(tasks, task)
	}
	created := time.Now()
	for _, task := range tasks {
		if out, rerr := c.stdoutOf(task.ID); rerr != nil || len(out) != size {
			t.Fatalf("tasks/result before the ttl: %d bytes (%v)", len(out), rerr)
		}
	}
	heapHeld := int64(testenv.HeapAfterGC())
	if _, rerr := c.bigTask(size); rerr == nil || !strings.Contains(rerr.Message, "max_tasks") {
		t.Fatalf("an 11th task with max_tasks 10: %v", rerr)
	}

	time.Sleep(time.Until(created.Add(31 * time.Second)))
	heapAfter := int64(testenv.HeapAfterGC())
	t.Logf("live heap: %d MB before, %d MB with %d results, %d MB after their ttl", heap0>>20, heapHeld>>20, n, heapAfter>>20)
	if freed := heapHeld - heapAfter; freed < n*size*3/4 {
		t.Errorf("the ttl freed %d MB of %d results of 400 KB", freed>>20, n)
	}
	if _, rerr := c.stdoutOf(tasks[n-1].ID); rerr == nil || !strings.Contains(rerr.Message, "expired") {
		t.Errorf("tasks/result after the ttl: %v", rerr)
	}
	if _, rerr := c.bigTask(size); rerr != nil {
		t.Errorf("a task after the others expired: %s", rerr.Message)
	}
}
