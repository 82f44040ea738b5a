package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"go.uber.org/zap"
)

// These tests drive the tools through mcp-go's server, as a client would, over a fake
// sandbox: no Docker, milliseconds each. The end-to-end tests (../../integration)
// judge the same tools through a real Caddy and container.

// fakeBox answers like a sandbox with one file (/sandbox/a.txt), one directory
// (/sandbox/d) and one running job (j000000000001). It records what was asked of it.
type fakeBox struct {
	mu      sync.Mutex
	calls   []string
	cpus    float64 // what CPUs says; 0: 3, the default cpus
	runtime boxapi.Runtime

	egress  *Egress
	blocked map[string][]string
}

func (b *fakeBox) Egress() *Egress { return b.egress }

func (b *fakeBox) TakeNote() string { return "" }

func (b *fakeBox) Blocked(job string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	list := b.blocked[job]
	delete(b.blocked, job)
	return list
}

const fakeJob = "j000000000001"

func (b *fakeBox) record(call string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, call)
}

func (b *fakeBox) called() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

func (b *fakeBox) stat(p string) (boxapi.FileInfo, error) {
	switch p {
	case "/sandbox/a.txt":
		return boxapi.FileInfo{Path: p, Name: "a.txt", Size: 6, ModTime: time.Unix(1_800_000_000, 0)}, nil
	case "/sandbox", "/sandbox/d":
		return boxapi.FileInfo{Path: p}, boxapi.ErrIsDir
	}
	return boxapi.FileInfo{}, boxapi.ErrNotFound
}

func (b *fakeBox) Exec(_ context.Context, command string, o boxapi.ExecOptions) (*boxapi.ExecResult, error) {
	b.record("exec " + command)
	if o.Cwd != "" {
		b.record("cwd " + o.Cwd)
	}
	b.record(fmt.Sprint("max_output ", o.MaxOutput))
	b.record(fmt.Sprint("wait ", o.Wait))
	if o.TTY {
		if command == "no-agent" {
			return nil, boxapi.ErrNoTTY
		}
		b.record("tty")
	}
	if o.Wait == boxapi.NoWait {
		return &boxapi.ExecResult{JobID: fakeJob, Running: true, ExitCode: -1}, nil
	}
	return &boxapi.ExecResult{JobID: "j000000000002", Stdout: "hi\n", Stderr: "warn\n", ExitCode: 3,
		StdoutBytes: 3, StderrBytes: 5, StdoutFile: "/f/out", StderrFile: "/f/err", Duration: time.Second}, nil
}

func (b *fakeBox) job(id string) (*boxapi.ExecResult, error) {
	if id != fakeJob {
		return nil, boxapi.ErrJobNotFound
	}
	return &boxapi.ExecResult{JobID: id, Running: true, ExitCode: -1, Stdout: "more\n"}, nil
}

func (b *fakeBox) JobOutput(_ context.Context, id string, wait time.Duration, _ *string, maxOutput int, _ func(boxapi.Stream, []byte)) (*boxapi.ExecResult, error) {
	b.record("job_output " + id)
	b.record(fmt.Sprint("wait ", wait))
	b.record(fmt.Sprint("max_output ", maxOutput))
	return b.job(id)
}

func (b *fakeBox) KillJob(_ context.Context, id string, maxOutput int) (*boxapi.ExecResult, error) {
	b.record("kill " + id)
	b.record(fmt.Sprint("max_output ", maxOutput))
	res, err := b.job(id)
	if err == nil {
		res.Running, res.Killed, res.ExitCode = false, true, 137
	}
	return res, err
}

func (b *fakeBox) ListJobs(context.Context) ([]boxapi.JobInfo, error) {
	b.record("list")
	return []boxapi.JobInfo{{ID: fakeJob, State: "running", ExitCode: -1, Started: time.Unix(1_800_000_000, 0), Command: "cat"},
		{ID: "j000000000002", State: "done", ExitCode: 3, Started: time.Unix(1_800_000_000, 0), Command: "exit 3"}}, nil
}

func (b *fakeBox) Stat(_ context.Context, p string) (boxapi.FileInfo, error) {
	b.record("stat " + p)
	return b.stat(p)
}

func (b *fakeBox) OpenRange(_ context.Context, p string, _, _ int64) (*boxapi.File, error) {
	b.record("open " + p)
	if _, err := b.stat(p); err != nil {
		return nil, err
	}
	return nil, errors.New("not in this fake")
}

func (b *fakeBox) ReadLines(_ context.Context, p string, _, _ int64, _, _ int) (*boxapi.Lines, error) {
	b.record("read " + p)
	return nil, errors.New("not in this fake")
}

func (b *fakeBox) WriteFile(_ context.Context, p string, _ []byte) (boxapi.FileInfo, bool, error) {
	b.record("write " + p)
	fi, err := b.stat(p)
	return fi, false, err
}

func (b *fakeBox) EditFile(_ context.Context, p, _, _ string) (boxapi.EditResult, error) {
	b.record("edit " + p)
	fi, err := b.stat(p)
	return boxapi.EditResult{FileInfo: fi, Line: 1}, err
}

func (b *fakeBox) MakeDir(_ context.Context, dir string) error {
	b.record("mkdir " + dir)
	return nil
}

func (b *fakeBox) DialPort(_ context.Context, port int) (net.Conn, error) {
	b.record("dial")
	return nil, boxapi.ErrNoListener
}

func (b *fakeBox) Facts(context.Context, time.Duration) *boxapi.Facts { return nil }

func (b *fakeBox) CPUs() float64 {
	if b.cpus == 0 {
		return 3
	}
	return b.cpus
}
func (b *fakeBox) ImageMissing() string      { return "the image is being built" }
func (b *fakeBox) EngineDown(err error) bool { return boxapi.EngineDown(err) }
func (b *fakeBox) Unreachable() string       { return "the Docker engine" }
func (b *fakeBox) Runtime() boxapi.Runtime   { return b.runtime }

type oneBox struct{ b Box }

func (o oneBox) For(context.Context) (Box, error) { return o.b, nil }

type fakeLinks struct{}

func (fakeLinks) Download(_ context.Context, p string, ttl time.Duration) (string, time.Time) {
	return "/files/1.sig" + p, time.Unix(1_800_000_000, 0).Add(ttl)
}

func (fakeLinks) Upload(_ context.Context, dir string, ttl time.Duration) (string, time.Time) {
	return "/uploads/1.sig" + dir + "/", time.Unix(1_800_000_000, 0).Add(ttl)
}

type fakePreviews struct{}

func (fakePreviews) Expose(_ context.Context, port int, origin string) (string, time.Time) {
	return "http://p8000.localhost", time.Unix(1_800_000_000, 0)
}
func (fakePreviews) Unexpose(context.Context, int) bool { return true }
func (fakePreviews) FrameDomain(string) string          { return "http://*.localhost" }

type fakeAudit struct {
	mu      sync.Mutex
	entries []audit.Entry
}

func (a *fakeAudit) Record(e audit.Entry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entries = append(a.entries, e)
}

// toolsHarness is the tools over a fake box, with yield_after 5s.
type toolsHarness struct {
	t     testing.TB
	tools *Tools
	box   *fakeBox
	audit *fakeAudit
	ids   int
	// client is the OAuth client name calls carry; "" is "test".
	client string
}

func newToolsHarness(t testing.TB, tune ...func(*Options)) *toolsHarness {
	// The sandbox's defaults, with no network.
	cfg := Config{Memory: 3 << 30, CPUs: 3, PidsLimit: 4096, NetworkMode: "none",
		ExecTimeout: time.Hour, MaxOutput: 200000, FileTTL: 168 * time.Hour}
	h := &toolsHarness{t: t, box: &fakeBox{}, audit: &fakeAudit{}}
	o := Options{
		Config: cfg, Boxes: oneBox{h.box}, Links: fakeLinks{}, Previews: fakePreviews{}, Audit: h.audit,
		Logger: zap.NewNop(), Version: "test",
		LinkTTL: 24 * time.Hour, MaxLinkTTL: 7 * 24 * time.Hour, MaxUpload: 1 << 30, DefaultOutput: 30000,
		Yield: 5 * time.Second, MaxJobs: 32, Keepalive: 5 * time.Second, PreviewTTL: 24 * time.Hour,
		MaxTaskTTL: time.Hour, MaxTasks: 100, MaxTasksTotal: 1000,
	}
	for _, f := range tune {
		f(&o)
	}
	h.tools = New(o)
	t.Cleanup(h.tools.Close)
	return h
}

// rpc sends one JSON-RPC request and returns its result (or error) as generic JSON.
func (h *toolsHarness) rpc(method string, params any) map[string]any {
	h.t.Helper()
	h.ids++
	msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": h.ids, "method": method, "params": params})
	client := h.client
	if client == "" {
		client = "test"
	}
	ctx := WithCaller(context.Background(), Caller{ClientName: client, Label: "test", Origin: "https://sandbox.example"})
	ctx, done := h.tools.Request(ctx)
	resp := h.tools.MCPServer().HandleMessage(ctx, msg)
	done()
	b, _ := json.Marshal(resp)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		h.t.Fatal(err)
	}
	if r, ok := m["result"].(map[string]any); ok {
		return r
	}
	h.t.Fatalf("%s: %s", method, b)
	return nil
}

// call calls a tool and returns whether it failed, its text and its structured result.
func (h *toolsHarness) call(tool string, args any) (isError bool, text string, structured any) {
	h.t.Helper()
	r := h.rpc("tools/call", map[string]any{"name": tool, "arguments": args})
	for _, c := range r["content"].([]any) {
		if c, _ := c.(map[string]any); c["type"] == "text" {
			text += c["text"].(string)
		}
	}
	return r["isError"] == true, text, r["structuredContent"]
}

// errorCase is a call and a text its tool error must contain.
type errorCase struct {
	tool string
	args any
	want string
}

// wantErrors makes each call and checks it fails with a text containing want.
func (h *toolsHarness) wantErrors(t *testing.T, cases []errorCase) {
	t.Helper()
	for _, tc := range cases {
		isErr, text, _ := h.call(tc.tool, tc.args)
		if !isErr || !strings.Contains(text, tc.want) {
			t.Errorf("%s(%v) = error %v %q, want a tool error containing %q", tc.tool, tc.args, isErr, text, tc.want)
		}
	}
}

// TestArgumentErrors: every argument a tool cannot use is a tool error that names it
// and says what is accepted, and nothing reaches the sandbox.
func TestArgumentErrors(t *testing.T) {
	h := newToolsHarness(t)
	h.wantErrors(t, []errorCase{
		{"execute", map[string]any{}, `execute needs "command": a non-empty bash command line`},
		{"execute", map[string]any{"command": "   "}, `execute needs "command"`},
		{"execute", map[string]any{"command": 42}, `"command" must be a string, got 42`},
		{"execute", map[string]any{"command": "true", "timeout": -1}, `"timeout" must be a number of seconds between 1 and 86400, got -1`},
		{"execute", map[string]any{"command": "true", "timeout": 1e9}, `"timeout" must be`},
		{"execute", map[string]any{"command": "true", "timeout": "soon"}, `"timeout" must be a number of seconds between 1 and 86400, got "soon"`},
		{"execute", map[string]any{"command": "true", "timeout": true}, `got true`},
		{"execute", map[string]any{"command": "true", "timeout": "NaN"}, `"timeout" must be`},
		{"execute", map[string]any{"command": "true", "wait": -1}, `"wait" must be a number of seconds from 0 to 5 (the server's yield_after: no call waits longer; for longer, call job_output again), got -1`},
		{"execute", map[string]any{"command": "true", "wait": "later"}, `"wait" must be a number of seconds from 0 to 5`},
		{"execute", map[string]any{"command": "true", "interactive": "yes"}, `"interactive" must be true or false, got "yes"`},
		{"execute", map[string]any{"command": "true", "tty": 1}, `"tty" must be true or false, got 1`},
		{"execute", map[string]any{"command": "true", "max_output": 10}, `"max_output" must be a number of bytes between 1024 and`},
		{"execute", map[string]any{"command": "true", "max_output": 2048.5}, `a whole number between 1024 and`},
		{"execute", map[string]any{"command": "true", "cwd": []any{"/"}}, `"cwd" must be a string, got an array`},
		{"execute", map[string]any{"command": "pwd", "cwdd": "/tmp"}, `execute does not take the argument "cwdd"; it accepts: command, cwd, interactive, max_output, timeout, tty, wait`},
		{"execute", []any{"ls"}, "execute takes its arguments as a JSON object"},
		{"share_file", map[string]any{"path": "/sandbox/a", "ttl": "7d"}, `share_file does not take the argument "ttl"`},
		{"share_file", map[string]any{"path": ""}, `share_file needs "path": the path of a file or directory`},
		{"share_file", map[string]any{"path": "/sandbox/a.txt", "expires_in": "7d"}, `"expires_in" must be a number of seconds (at most 7d, the server's max_link_ttl)`},
		{"share_file", map[string]any{"path": "/sandbox/a.txt", "expires_in": 1e9}, "max_link_ttl"},
		{"job_output", map[string]any{"job_id": "12; rm -rf /"}, "like j6940a1f03f2a"},
		{"job_output", map[string]any{"job_id": fakeJob, "wait": -5}, "yield_after"},
		{"job_input", map[string]any{"job_id": "J00", "input": "x"}, "like j6940a1f03f2a"},
		{"job_kill", map[string]any{}, "job_id"},
		{"read_file", map[string]any{}, `needs "path"`},
		{"read_file", map[string]any{"path": ""}, `read_file needs "path"`},
		{"read_file", map[string]any{"path": "/etc/passwd", "offset": 0}, `"offset" must be`},
		{"read_file", map[string]any{"path": "/etc/passwd", "limit": 1e6}, `"limit" must be`},
		{"read_file", map[string]any{"path": "/etc/passwd", "lines": 5}, `does not take the argument "lines"`},
		{"write_file", map[string]any{"path": "/sandbox/x.txt"}, `needs "content"`},
		{"write_file", map[string]any{"path": "/sandbox/x.txt", "content": 5}, `"content" must be a string`},
		{"edit_file", map[string]any{"path": "/etc/passwd", "old_text": "", "new_text": "b"}, `needs "old_text"`},
		{"edit_file", map[string]any{"path": "/etc/passwd", "old_text": "root"}, `needs "new_text"`},
		{"edit_file", map[string]any{"path": "/etc/passwd", "old_text": "root", "new_text": "root"}, "the same"},
		{"upload_link", map[string]any{"directory": "/sandbox/a\nb"}, "without control characters"},
		{"upload_link", map[string]any{"expires_in": 10}, `"expires_in" must be a number of seconds between 60 and`},
		{"expose_port", map[string]any{"port": 0}, "port"},
		{"expose_port", map[string]any{"port": 70000}, "port"},
		{"expose_port", map[string]any{"port": "http"}, "port"},
		{"unexpose_port", map[string]any{}, "port"},
	})
	if got := h.box.called(); len(got) > 0 {
		t.Errorf("bad arguments reached the sandbox: %q", got)
	}
}

// TestSandboxErrorsSayWhatToDo: errors from the sandbox become results that name the
// path and the next step.
func TestSandboxErrorsSayWhatToDo(t *testing.T) {
	h := newToolsHarness(t)
	h.wantErrors(t, []errorCase{
		{"execute", map[string]any{"command": "no-agent", "tty": true}, "The command was not started: tty needs the sandbox agent, which cannot run in this container; run the command without tty"},
		{"share_file", map[string]any{"path": "/sandbox/none-such"}, "/sandbox/none-such does not exist in the sandbox; check the path with ls"},
		{"share_file", map[string]any{"path": "/sandbox/./none-such"}, "/sandbox/none-such does not exist"},
		{"read_file", map[string]any{"path": "/sandbox/none-such"}, "does not exist"},
		{"read_file", map[string]any{"path": "/sandbox/d"}, "is a directory"},
		{"write_file", map[string]any{"path": "/sandbox/d", "content": "a"}, "is a directory"},
		{"edit_file", map[string]any{"path": "/sandbox/none-such", "old_text": "a", "new_text": "b"}, "does not exist"},
		{"job_output", map[string]any{"job_id": "j000000000000"}, "no job j000000000000"},
		{"job_kill", map[string]any{"job_id": "j000000000000"}, "job_list"},
	})
}

// outputTypes are the structured results, by tool.
var outputTypes = map[string]reflect.Type{
	"execute":         reflect.TypeFor[ExecuteOutput](),
	"job_list":        reflect.TypeFor[jobListOutput](),
	"share_file":      reflect.TypeFor[shareOutput](),
	"upload_link":     reflect.TypeFor[uploadLinkOutput](),
	"expose_port":     reflect.TypeFor[exposeOutput](),
	"unexpose_port":   reflect.TypeFor[unexposeOutput](),
	"checkpoint":      reflect.TypeFor[checkpointOutput](),
	"checkpoint_list": reflect.TypeFor[checkpointListOutput](),
	"restore":         reflect.TypeFor[restoreOutput](),
}

// jsonFields are the JSON names of a struct's fields, and which of them are omitempty.
func jsonFields(t reflect.Type) (names, optional []string) {
	for i := range t.NumField() {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
		if strings.Contains(opts, "omitempty") {
			optional = append(optional, name)
		}
	}
	return names, optional
}

// sharesSchema are the tools whose result is execute's: they declare no schema of their
// own, so tools/list carries it once, and their descriptions say so.
var sharesSchema = map[string]string{"job_output": "execute", "job_input": "execute", "job_kill": "execute"}

// TestOutputSchemasMatchStructs: each tool's declared outputSchema has a property per
// field of its result struct and no other, requires every field that is always sent,
// and the results the tools return carry only declared fields (those of the tool whose
// schema they share, for the job tools).
func TestOutputSchemasMatchStructs(t *testing.T) {
	h := newToolsHarness(t)
	list := h.rpc("tools/list", map[string]any{})
	declared := map[string]map[string]any{}
	for _, tool := range list["tools"].([]any) {
		tool := tool.(map[string]any)
		if s, ok := tool["outputSchema"].(map[string]any); ok {
			declared[tool["name"].(string)] = s
		}
	}
	for name, typ := range outputTypes {
		s := declared[name]
		if s == nil {
			t.Errorf("%s declares no output schema", name)
			continue
		}
		delete(declared, name)
		names, optional := jsonFields(typ)
		var props, required []string
		for p := range s["properties"].(map[string]any) {
			props = append(props, p)
		}
		for _, r := range s["required"].([]any) {
			required = append(required, r.(string))
		}
		var want []string
		for _, n := range names {
			if !slices.Contains(optional, n) {
				want = append(want, n)
			}
		}
		slices.Sort(names)
		slices.Sort(props)
		slices.Sort(required)
		slices.Sort(want)
		if !slices.Equal(props, names) || !slices.Equal(required, want) || s["additionalProperties"] != false {
			t.Errorf("%s: schema properties %q (required %q, additionalProperties %v), struct %s has %q (required %q)",
				name, props, required, s["additionalProperties"], typ, names, want)
		}
	}
	for name := range declared {
		t.Errorf("%s declares an output schema this test does not know: add it to outputTypes", name)
	}

	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"execute", map[string]any{"command": "echo hi"}},
		{"execute", map[string]any{"command": "cat", "wait": 0}},
		{"job_output", map[string]any{"job_id": fakeJob}},
		{"job_input", map[string]any{"job_id": fakeJob, "input": "y"}},
		{"job_kill", map[string]any{"job_id": fakeJob}},
		{"job_list", nil},
		{"share_file", map[string]any{"path": "/sandbox/a.txt"}},
		{"share_file", map[string]any{"path": "/sandbox/d"}},
		{"upload_link", nil},
		{"expose_port", map[string]any{"port": 8000}},
		{"unexpose_port", map[string]any{"port": 8000}},
	} {
		isErr, text, st := h.call(c.tool, c.args)
		if isErr || st == nil {
			t.Errorf("%s(%v): error %v, structured %v: %s", c.tool, c.args, isErr, st, text)
			continue
		}
		schema := h.schema(c.tool)
		if other, ok := sharesSchema[c.tool]; ok {
			if schema != nil || !strings.Contains(h.description(c.tool), "execute's fields") {
				t.Errorf("%s declares a schema of its own, or does not say it returns %s's fields", c.tool, other)
			}
			schema = h.schema(other)
		}
		if extra := testenv.Undeclared(schema, st, c.tool); len(extra) > 0 {
			t.Errorf("%s returns undeclared fields %q", c.tool, extra)
		}
	}
}

// description is a tool's description as tools/list gives it.
func (h *toolsHarness) description(tool string) string {
	for _, t := range h.rpc("tools/list", map[string]any{})["tools"].([]any) {
		if t := t.(map[string]any); t["name"] == tool {
			return t["description"].(string)
		}
	}
	return ""
}

func (h *toolsHarness) schema(tool string) map[string]any {
	for _, t := range h.rpc("tools/list", map[string]any{})["tools"].([]any) {
		if t := t.(map[string]any); t["name"] == tool {
			s, _ := t["outputSchema"].(map[string]any)
			return s
		}
	}
	return nil
}

// TestAuditRecordsCalls: every call, refused or not, is one entry in the activity log
// with the caller, the outcome and the exit code.
func TestAuditRecordsCalls(t *testing.T) {
	h := newToolsHarness(t)
	h.call("execute", map[string]any{"command": "echo hi"})
	h.call("execute", map[string]any{})
	h.audit.mu.Lock()
	defer h.audit.mu.Unlock()
	if len(h.audit.entries) != 2 {
		t.Fatalf("%d entries, want 2: %+v", len(h.audit.entries), h.audit.entries)
	}
	ran, refused := h.audit.entries[0], h.audit.entries[1]
	if ran.Client != "test" || ran.Tool != "execute" || ran.Outcome != audit.OutcomeNonZero || ran.ExitCode == nil || *ran.ExitCode != 3 || ran.Bytes != 8 {
		t.Errorf("the run: %+v", ran)
	}
	if refused.Outcome != audit.OutcomeError || !strings.Contains(refused.Error, "needs") {
		t.Errorf("the refusal: %+v", refused)
	}
}

// TestToolListSmall: every tool has a title, and tools/list with every tool on stays
// under 20 KB, since a client puts all of it in the model's context in every turn.
func TestToolListSmall(t *testing.T) {
	h := newToolsHarness(t)
	list := h.rpc("tools/list", map[string]any{})
	tools := list["tools"].([]any)
	if len(tools) != 15 {
		t.Errorf("%d tools listed, want all 15", len(tools))
	}
	for _, tool := range tools {
		if tool := tool.(map[string]any); tool["title"] == nil || tool["title"] == "" {
			t.Errorf("%s has no title", tool["name"])
		}
	}
	b, _ := json.Marshal(list)
	if len(b) > 20_000 {
		t.Errorf("tools/list is %d bytes, want at most 20000", len(b))
	}
	t.Logf("tools/list: %d bytes", len(b))
}

// asked is a call and one thing it must ask the sandbox (as fakeBox records it).
type asked struct {
	tool string
	args map[string]any
	want string
}

// checkAsked makes each call and checks what it asked the sandbox.
func (h *toolsHarness) checkAsked(calls []asked) {
	h.t.Helper()
	for _, c := range calls {
		before := len(h.box.called())
		h.call(c.tool, c.args)
		if got := h.box.called()[before:]; !slices.Contains(got, c.want) {
			h.t.Errorf("%s(%v) asked the sandbox %q, want %q", c.tool, c.args, got, c.want)
		}
	}
}

// TestRelativePaths: every path argument may be relative to /sandbox, and the
// sandbox is asked for the absolute, cleaned path.
func TestRelativePaths(t *testing.T) {
	h := newToolsHarness(t)
	h.checkAsked([]asked{
		{"read_file", map[string]any{"path": "a.txt"}, "open /sandbox/a.txt"},
		{"write_file", map[string]any{"path": "d/../x.txt", "content": "a"}, "write /sandbox/x.txt"},
		{"edit_file", map[string]any{"path": "./a.txt", "old_text": "a", "new_text": "b"}, "edit /sandbox/a.txt"},
		{"share_file", map[string]any{"path": "a.txt"}, "stat /sandbox/a.txt"},
		{"upload_link", map[string]any{"directory": "data/"}, "mkdir /sandbox/data"},
		{"execute", map[string]any{"command": "pwd", "cwd": "d"}, "cwd /sandbox/d"},
		{"execute", map[string]any{"command": "vi", "tty": true}, "tty"},
		{"read_file", map[string]any{"path": "/etc/hostname"}, "open /etc/hostname"},
	})
	for _, tool := range h.rpc("tools/list", map[string]any{})["tools"].([]any) {
		tool := tool.(map[string]any)
		props := tool["inputSchema"].(map[string]any)["properties"].(map[string]any)
		for _, name := range []string{"path", "directory", "cwd"} {
			if p, ok := props[name].(map[string]any); ok && !strings.Contains(p["description"].(string), "relative to /sandbox") {
				t.Errorf("%s: %s says nothing of relative paths: %q", tool["name"], name, p["description"])
			}
		}
	}
}

// TestDefaultOutput: a call returns default_output bytes per stream unless its
// max_output asks for another amount, up to max_output; the job tools return
// default_output too.
func TestDefaultOutput(t *testing.T) {
	h := newToolsHarness(t)
	h.checkAsked([]asked{
		{"execute", map[string]any{"command": "seq 1 300000"}, "max_output 30000"},
		{"execute", map[string]any{"command": "seq 1 300000", "max_output": 200000}, "max_output 200000"},
		{"execute", map[string]any{"command": "seq 1 300000", "max_output": 2000}, "max_output 2000"},
		{"job_output", map[string]any{"job_id": fakeJob}, "max_output 30000"},
		{"job_input", map[string]any{"job_id": fakeJob, "input": "x"}, "max_output 30000"},
		{"job_kill", map[string]any{"job_id": fakeJob}, "max_output 30000"},
	})
	if isErr, text, _ := h.call("execute", map[string]any{"command": "true", "max_output": 300000}); !isErr || !strings.Contains(text, "between 1024 and 200000") {
		t.Errorf("max_output above the server's: %v %q", isErr, text)
	}
	// The description offers more only when there is more to ask for.
	for def, want := range map[int]string{30000: "at most 30000 bytes (head and tail) unless max_output asks for more;", 200000: "at most 200000 bytes (head and tail);"} {
		h := newToolsHarness(t, func(o *Options) { o.DefaultOutput = def })
		if desc := h.description("execute"); !strings.Contains(desc, want) {
			t.Errorf("default_output %d: the description does not say %q: %q", def, want, desc)
		}
	}
}

// downBox is a sandbox whose engine does not answer: every call fails with err.
type downBox struct {
	fakeBox
	err error
}

func (b *downBox) Exec(context.Context, string, boxapi.ExecOptions) (*boxapi.ExecResult, error) {
	return nil, b.err
}
func (b *downBox) JobOutput(context.Context, string, time.Duration, *string, int, func(boxapi.Stream, []byte)) (*boxapi.ExecResult, error) {
	return nil, b.err
}
func (b *downBox) KillJob(context.Context, string, int) (*boxapi.ExecResult, error) {
	return nil, b.err
}
func (b *downBox) ListJobs(context.Context) ([]boxapi.JobInfo, error) { return nil, b.err }
func (b *downBox) Stat(context.Context, string) (boxapi.FileInfo, error) {
	return boxapi.FileInfo{}, b.err
}
func (b *downBox) OpenRange(context.Context, string, int64, int64) (*boxapi.File, error) {
	return nil, b.err
}
func (b *downBox) WriteFile(context.Context, string, []byte) (boxapi.FileInfo, bool, error) {
	return boxapi.FileInfo{}, false, b.err
}
func (b *downBox) EditFile(context.Context, string, string, string) (boxapi.EditResult, error) {
	return boxapi.EditResult{}, b.err
}
func (b *downBox) MakeDir(context.Context, string) error { return b.err }

// TestEngineDownSaysSo: when the Docker engine does not answer, every tool says so and
// to try again, instead of the raw error.
func TestEngineDownSaysSo(t *testing.T) {
	for _, down := range []error{
		errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"),
		fmt.Errorf("starting the job: %w", &net.OpError{Op: "dial", Net: "unix", Err: syscall.ECONNREFUSED}),
		fmt.Errorf("reading the output: %w", &net.OpError{Op: "read", Net: "unix", Err: syscall.ECONNRESET}),
		errors.New("the job runner failed in the sandbox: no answer"),
	} {
		h := newToolsHarness(t, func(o *Options) { o.Boxes = oneBox{&downBox{err: down}} })
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"execute", map[string]any{"command": "true"}},
			{"job_output", map[string]any{"job_id": fakeJob}},
			{"job_input", map[string]any{"job_id": fakeJob, "input": "y"}},
			{"job_kill", map[string]any{"job_id": fakeJob}},
			{"job_list", nil},
			{"read_file", map[string]any{"path": "a.txt"}},
			{"write_file", map[string]any{"path": "a.txt", "content": "x"}},
			{"edit_file", map[string]any{"path": "a.txt", "old_text": "a", "new_text": "b"}},
			{"share_file", map[string]any{"path": "a.txt"}},
			{"upload_link", nil},
		} {
			isErr, text, _ := h.call(c.tool, c.args)
			if !isErr || text != "Could not reach the sandbox (the Docker engine did not answer); try again in a few seconds." {
				t.Errorf("%s with the engine down (%v): error %v, %q", c.tool, down, isErr, text)
			}
		}
	}
}

// TestLostCommandText: a command lost with its container is told as such, without the
// advice to try again that an engine failure gets.
func TestLostCommandText(t *testing.T) {
	err := fmt.Errorf("%w: the sandbox's container stopped or was replaced while it ran (job j1)", boxapi.ErrCommandLost)
	txt := execErrorText(&fakeBox{}, err)
	if !strings.HasPrefix(txt, "The command did not finish: the command was lost with its container") || strings.Contains(txt, "Try again") {
		t.Fatalf("lost command text: %q", txt)
	}
}

// TestInstructionsNameGVisor: the instructions say, in one phrase, that a sandbox runs
// under gVisor, and say nothing of it under another runtime.
func TestInstructionsNameGVisor(t *testing.T) {
	h := newToolsHarness(t)
	instructions := func() string {
		res := h.rpc("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "test", "version": "1"}})
		s, _ := res["instructions"].(string)
		return s
	}
	if got := instructions(); strings.Contains(got, "gVisor") {
		t.Errorf("runc sandbox: the instructions name gVisor: %q", got)
	}
	h.box.runtime = boxapi.Runtime{Name: "runsc", GVisor: true}
	if got := instructions(); !strings.Contains(got, gvisorText) {
		t.Errorf("gVisor sandbox: the instructions do not say so: %q", got)
	}
}
