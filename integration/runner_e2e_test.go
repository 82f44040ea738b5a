package integration

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestRunnerCommandLinesShort: the job runner's processes, which live as long as their
// jobs, carry short command lines: with a job running, every process's arguments
// together are under 2 KB (the runner script itself is over 10 KB).
func TestRunnerCommandLinesShort(t *testing.T) {
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client(ctx)
	st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "sleep 30", "wait": 1}))
	if st["running"] != true {
		t.Fatalf("job not running: %v", st)
	}
	args := s.ContainerExec("ps -eo args")
	// The runner is the agent's "sandbox-agent-<hash> jobs" (with --announce when the
	// container's main process started it), or on the fallback "mcpjob run".
	agent := strings.Contains(args, "sandbox-agent") && (strings.Contains(args, " jobs\n") || strings.Contains(args, " jobs --announce\n"))
	if !(strings.Contains(args, "mcpjob run") || agent) || !strings.Contains(args, "sleep 30") {
		t.Fatalf("ps shows no runner:\n%s", args)
	}
	if len(args) >= 2000 {
		t.Errorf("ps -eo args is %d bytes with a job running, want under 2000:\n%.3000s", len(args), args)
	}
	t.Logf("ps -eo args: %d bytes", len(args))
	testsite.Call(ctx, t, c, "job_kill", map[string]any{"job_id": st["job_id"]})
}

// TestCutMarkerNamesLines: the marker in the middle of a cut output names the lines
// left out and the read_file call that reads them, for the first delivery of a job and
// for a later one, which counts on from the lines delivered before; the read_file call
// it names returns the first line left out.
func TestCutMarkerNamesLines(t *testing.T) {
	s := testsite.Start(t, testsite.Options{Directive: []string{"yield_after 5s", "max_output 20000"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	markerRe := regexp.MustCompile(`(?m)^\[\.\.\. lines (\d+)–(\d+) left out \((\d+) bytes\)(?:; that is a lot: search it first with execute, e\.g\. grep -n PATTERN \S+ \| head -50)?; read them with read_file path=(\S+) offset=(\d+) limit=\d+ \.\.\.\]\n`)
	check := func(st map[string]any, first int) (from, to int, file string) {
		t.Helper()
		out := st["stdout"].(string)
		m := markerRe.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no marker in %.300q", out)
		}
		from, _ = strconv.Atoi(m[1])
		to, _ = strconv.Atoi(m[2])
		head, tail, _ := strings.Cut(out, m[0])
		hl := strings.Split(strings.TrimSuffix(head, "\n"), "\n")
		tl := strings.Split(strings.TrimSuffix(tail, "\n"), "\n")
		// seq prints line n as n: the lines around the marker name its numbers.
		if hl[0] != strconv.Itoa(first) || hl[len(hl)-1] != strconv.Itoa(from-1) || tl[0] != strconv.Itoa(to+1) || m[5] != m[1] {
			t.Errorf("marker %q between %q and %q (delivery from line %d)", m[0], hl[len(hl)-1], tl[0], first)
		}
		return from, to, m[4]
	}
	st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "seq 1 300000"}))
	from, to, file := check(st, 1)
	t.Logf("seq 1 300000: lines %d–%d left out", from, to)
	rf := testsite.ResultText(testsite.Call(ctx, t, c, "read_file", map[string]any{"path": file, "offset": from, "limit": 2}))
	if !strings.Contains(rf, strconv.Itoa(from)) || !strings.Contains(rf, strconv.Itoa(from+1)) {
		t.Errorf("read_file at the marker's offset: %.200q", rf)
	}
	// A job: the first delivery is cut, then a later one counts on.
	st = testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "seq 1 100000; sleep 7; seq 100001 200000", "wait": 3}))
	if st["running"] != true {
		t.Fatalf("job not running: %v", st)
	}
	check(st, 1)
	var last map[string]any
	for i := 0; i < 10; i++ {
		last = testsite.Structured(t, testsite.Call(ctx, t, c, "job_output", map[string]any{"job_id": st["job_id"]}))
		if strings.Contains(last["stdout"].(string), "100001\n") {
			break
		}
	}
	check(last, 100001)
}

// TestNoteSaysJobTime: a job of about 14 s, followed with job_output, ends with a note
// giving the job's running time, not the last call's; while it runs, the notes give
// its age and, apart, how long the call waited.
func TestNoteSaysJobTime(t *testing.T) {
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client(ctx)
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "sleep 14; echo done"})
	st := testsite.Structured(t, res)
	if st["running"] != true {
		t.Fatalf("not running: %v", st)
	}
	id := st["job_id"].(string)
	time.Sleep(2 * time.Second)
	poll := testsite.Call(ctx, t, c, "job_output", map[string]any{"job_id": id, "wait": 1})
	m := regexp.MustCompile(`still running as job ` + id + ` for (\d+)s \(this call waited (\d+)s\)`).FindStringSubmatch(testsite.ResultText(poll))
	if m == nil {
		t.Fatalf("running note: %q", testsite.ResultText(poll))
	}
	if age, _ := strconv.Atoi(m[1]); age < 7 || age > 11 || (m[2] != "1" && m[2] != "2") {
		t.Errorf("running note %q: want the job about 8s old, the call 1s", m[0])
	}
	_, _, last := followJob(ctx, t, c, testsite.Structured(t, poll))
	note := last["note"].(string)
	m = regexp.MustCompile(`^\[exit code 0, ran (\d+\.\d\d)s\]`).FindStringSubmatch(note)
	if m == nil {
		t.Fatalf("final note %q", note)
	}
	if ran, _ := strconv.ParseFloat(m[1], 64); ran < 13.9 || ran > 15.5 {
		t.Errorf("final note %q: want about 14 s", note)
	}
	t.Logf("final note: %s", note)
	list := testsite.Structured(t, testsite.Call(ctx, t, c, "job_list", nil))
	if !strings.Contains(fmt.Sprint(list["jobs"]), id) {
		t.Errorf("job_list lost the job: %v", list)
	}
}

// TestJobOutputWaits: job_output waits until the job ends or its wait passes, not until
// the first new output, and returns everything printed meanwhile; the new output
// reaches a client that asked for progress while it waits. wait 0 returns at once.
func TestJobOutputWaits(t *testing.T) {
	s := testsite.Start(t, testsite.Options{Directive: []string{"yield_after 8s"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client(ctx)
	var mu sync.Mutex
	var msgs []string
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			mu.Lock()
			defer mu.Unlock()
			msg, _ := n.Params.AdditionalFields["message"].(string)
			msgs = append(msgs, msg)
		}
	})
	st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "for i in $(seq 1 30); do echo tick-$i; sleep 1; done", "wait": 0}))
	if st["running"] != true {
		t.Fatalf("not running: %v", st)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "job_output"
	req.Params.Arguments = map[string]any{"job_id": st["job_id"], "wait": 8}
	req.Params.Meta = &mcp.Meta{ProgressToken: "p-1"}
	start := time.Now()
	res, err := c.CallTool(ctx, req)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	out := testsite.Structured(t, res)
	lines := strings.Count(out["stdout"].(string), "\n")
	t.Logf("job_output(wait 8) returned after %v with %d lines", took, lines)
	if took < 7500*time.Millisecond || took > 11*time.Second || out["running"] != true {
		t.Errorf("job_output(wait 8) returned after %v, running %v", took, out["running"])
	}
	if lines < 7 || !strings.HasPrefix(out["stdout"].(string), "tick-1\n") {
		t.Errorf("job_output(wait 8) brought %d lines: %q", lines, out["stdout"])
	}
	mu.Lock()
	joined := strings.Join(msgs, "\n")
	mu.Unlock()
	if !strings.Contains(joined, "tick-5") {
		t.Errorf("no live output in the progress notifications: %q", msgs)
	}
	start = time.Now()
	st = testsite.Structured(t, testsite.Call(ctx, t, c, "job_output", map[string]any{"job_id": st["job_id"], "wait": 0}))
	if took := time.Since(start); took > 2*time.Second || st["running"] != true {
		t.Errorf("job_output(wait 0) took %v: %v", took, st)
	}
	testsite.Call(ctx, t, c, "job_kill", map[string]any{"job_id": st["job_id"]})
}

// TestCancelledCallMarked: a call the client gave up on kills its job, and the job says
// why: job_list shows it cancelled by the client, and so does job_output's note.
func TestCancelledCallMarked(t *testing.T) {
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client(ctx)
	cancelCall(ctx, t, s, c, "echo started; sleep 4322", "sleep 4322")
	var job map[string]any
	testenv.WaitFor(t, 15*time.Second, "the job to end", func() bool {
		for _, j := range testsite.Structured(t, testsite.Call(ctx, t, c, "job_list", nil))["jobs"].([]any) {
			if j := j.(map[string]any); strings.Contains(j["command"].(string), "sleep 4322") && j["state"] == "done" {
				job = j
				return true
			}
		}
		return false
	})
	if job["killed_by"] != "client" || job["exit_code"] != float64(137) {
		t.Errorf("job_list entry %v", job)
	}
	list := testsite.ResultText(testsite.Call(ctx, t, c, "job_list", nil))
	if !strings.Contains(list, "exit code 137: cancelled by the client") {
		t.Errorf("job_list text %q", list)
	}
	res := testsite.Call(ctx, t, c, "job_output", map[string]any{"job_id": job["job_id"], "wait": 0})
	st := testsite.Structured(t, res)
	if st["cancelled"] != true || !strings.Contains(testsite.ResultText(res), "[cancelled by the client: the command and its child processes were killed (exit code 137") {
		t.Errorf("job_output after the cancel: %q, %v", testsite.ResultText(res), st)
	}
}

// cancelCall starts execute(command), waits until a process whose command line holds
// marker runs in the sandbox, and gives the call up as a client does.
func cancelCall(ctx context.Context, t *testing.T, s *testsite.Site, c *mcpclient.Client, command, marker string) {
	t.Helper()
	callCtx, callCancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name = "execute"
		req.Params.Arguments = map[string]any{"command": command}
		_, err := c.CallTool(callCtx, req)
		errc <- err
	}()
	testenv.WaitFor(t, 20*time.Second, marker+" to start", func() bool {
		return strings.Contains(s.TryExec("ps -o args"), marker)
	})
	callCancel()
	<-errc
}
