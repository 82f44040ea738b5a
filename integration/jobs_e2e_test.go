package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// jobsSite is a site that yields after 5 s, so tests of jobs stay short.
func jobsSite(t *testing.T, extra ...string) *testsite.Site {
	return testsite.Start(t, testsite.Options{Directive: append([]string{"yield_after 5s"}, extra...)})
}

// followJob calls job_output until the job ends and returns everything it delivered.
func followJob(ctx context.Context, t *testing.T, c *mcpclient.Client, first map[string]any) (stdout, stderr string, last map[string]any) {
	t.Helper()
	st := first
	for i := 0; ; i++ {
		stdout += st["stdout"].(string)
		stderr += st["stderr"].(string)
		if st["running"] != true {
			return stdout, stderr, st
		}
		if i > 200 {
			t.Fatalf("job %v still running after %d polls", st["job_id"], i)
		}
		st = testsite.Structured(t, testsite.Call(ctx, t, c, "job_output", map[string]any{"job_id": st["job_id"]}))
	}
}

// TestJobFollow: a command longer than yield_after comes back running with a job id;
// job_output polls deliver every line exactly once, in order, then the exit code; the
// job's file holds the whole output, and job_list shows the job.
func TestJobFollow(t *testing.T) {
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	start := time.Now()
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "for i in $(seq 1 40); do echo line-$i; echo err-$i >&2; sleep 0.25; done; exit 7"})
	took := time.Since(start)
	st := testsite.Structured(t, res)
	if st["running"] != true || st["exit_code"] != nil || !regexp.MustCompile(`^j[0-9a-f]{12}$`).MatchString(st["job_id"].(string)) {
		t.Fatalf("first result %v", st)
	}
	if took < 4*time.Second || took > 8*time.Second {
		t.Errorf("execute returned after %v, want about yield_after (5s)", took)
	}
	if txt := testsite.ResultText(res); !strings.Contains(txt, "still running as job "+st["job_id"].(string)) || !strings.Contains(txt, "job_output") {
		t.Errorf("running text %q", txt)
	}
	id := st["job_id"].(string)
	list := testsite.Structured(t, testsite.Call(ctx, t, c, "job_list", nil))
	if !strings.Contains(fmt.Sprint(list["jobs"]), id) || !strings.Contains(fmt.Sprint(list["jobs"]), "running") {
		t.Errorf("job_list = %v", list)
	}
	stdout, stderr, last := followJob(ctx, t, c, st)
	var wantOut, wantErr strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&wantOut, "line-%d\n", i)
		fmt.Fprintf(&wantErr, "err-%d\n", i)
	}
	if stdout != wantOut.String() || stderr != wantErr.String() {
		t.Errorf("delivered output differs:\n%q\n%q", stdout, stderr)
	}
	if last["exit_code"] != float64(7) || last["stdout_bytes"] != float64(wantOut.Len()) {
		t.Errorf("last result %v", last)
	}
	// After the end, a poll returns nothing new and the exit code again.
	again := testsite.Structured(t, testsite.Call(ctx, t, c, "job_output", map[string]any{"job_id": id, "wait": 1}))
	if again["stdout"] != "" || again["exit_code"] != float64(7) || again["running"] != false {
		t.Errorf("poll after the end: %v", again)
	}
	if got := s.ContainerExec("cat " + last["stdout_file"].(string)); got != wantOut.String() {
		t.Errorf("job file holds %q", got)
	}
	// wait 0 starts a command and returns at once.
	start = time.Now()
	st = testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "sleep 2; echo late", "wait": 0}))
	if time.Since(start) > time.Second || st["running"] != true {
		t.Fatalf("wait 0: %v after %v", st, time.Since(start))
	}
	stdout, _, last = followJob(ctx, t, c, st)
	if stdout != "late\n" || last["exit_code"] != float64(0) {
		t.Errorf("wait 0 job: %q %v", stdout, last)
	}
}

// TestJobInput: job_input drives an interactive program; non-interactive and finished
// jobs refuse input, saying why, and lose no output.
func TestJobInput(t *testing.T) {
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{
		"command": "echo ready; while read l; do [ \"$l\" = quit ] && break; echo got $l; done; echo bye; exit 4", "interactive": true, "wait": 1}))
	if st["running"] != true || st["stdout"] != "ready\n" {
		t.Fatalf("interactive start: %v", st)
	}
	id := st["job_id"]
	for _, in := range []string{"hello", "two words\n"} {
		r := testsite.Structured(t, testsite.Call(ctx, t, c, "job_input", map[string]any{"job_id": id, "input": in, "wait": 5}))
		if want := "got " + strings.TrimSuffix(in, "\n") + "\n"; r["stdout"] != want || r["running"] != true {
			t.Fatalf("job_input(%q) = %v, want %q", in, r, want)
		}
	}
	r := testsite.Structured(t, testsite.Call(ctx, t, c, "job_input", map[string]any{"job_id": id, "input": "quit", "wait": 5}))
	if r["stdout"] != "bye\n" || r["running"] != false || r["exit_code"] != float64(4) {
		t.Fatalf("quit: %v", r)
	}
	// Input to a job that has ended.
	res := testsite.Call(ctx, t, c, "job_input", map[string]any{"job_id": id, "input": "more"})
	if !res.IsError || !strings.Contains(testsite.ResultText(res), "already ended") {
		t.Errorf("input to a finished job: %v %q", res.IsError, testsite.ResultText(res))
	}
	// Input to a job whose stdin is closed: refused, and its output is still there.
	st = testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo a; sleep 3; echo b", "wait": 1}))
	res = testsite.Call(ctx, t, c, "job_input", map[string]any{"job_id": st["job_id"], "input": "x"})
	if !res.IsError || !strings.Contains(testsite.ResultText(res), "interactive: true") {
		t.Errorf("input to a non-interactive job: %q", testsite.ResultText(res))
	}
	stdout, _, _ := followJob(ctx, t, c, st)
	if stdout != "a\nb\n" {
		t.Errorf("output around the refused input: %q", stdout)
	}
	// Without interactive, stdin is empty: a program reading it does not hang.
	st = testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "cat; echo eof"}))
	if st["stdout"] != "eof\n" || st["running"] != false {
		t.Errorf("cat with empty stdin: %v", st)
	}
}

// TestJobKillLeavesNothing: job_kill, the timeout and cancellation kill every process
// of the job, also those started under env -i (which carry no marker in their
// environment), and each result says killed; a process detached with setsid survives.
// The output of a cancelled call is not lost: job_output returns it.
func TestJobKillLeavesNothing(t *testing.T) {
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	procs := func() string { return s.TryExec("ps -o args | grep '^sleep 33' || true") }

	st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{
		"command": "env -i bash -c 'sleep 3331 & sleep 3332' & sleep 3333 & setsid sleep 3334 & echo started; wait", "wait": 1}))
	if st["running"] != true || st["stdout"] != "started\n" {
		t.Fatalf("start: %v", st)
	}
	testenv.WaitFor(t, 10*time.Second, "the sleeps to start", func() bool { return strings.Count(procs(), "sleep 333") == 4 })
	k := testsite.Call(ctx, t, c, "job_kill", map[string]any{"job_id": st["job_id"]})
	ks := testsite.Structured(t, k)
	if ks["killed"] != true || ks["exit_code"] != float64(137) || !strings.Contains(testsite.ResultText(k), "SIGKILL") {
		t.Errorf("job_kill result %v %q", ks, testsite.ResultText(k))
	}
	if got := procs(); strings.TrimSpace(got) != "sleep 3334" {
		t.Errorf("after job_kill, left: %q (want only the setsid one)", got)
	}
	s.TryExec("pkill -f 'sleep 3334' || kill $(pidof sleep) 2>/dev/null")

	// The timeout, kept inside the container, with a process under env -i.
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "env -i bash -c 'sleep 3341 & sleep 3342'", "timeout": 2})
	st = testsite.Structured(t, res)
	if st["timed_out"] != true || st["killed"] != true || st["exit_code"] != float64(137) || !strings.Contains(testsite.ResultText(res), "timed out") {
		t.Errorf("timeout result %v %q", st, testsite.ResultText(res))
	}
	if got := procs(); got != "" {
		t.Errorf("after the timeout, left: %q", got)
	}

	// Cancellation while the call waits.
	callCtx, callCancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := mcp.CallToolRequest{}
		req.Params.Name = "execute"
		req.Params.Arguments = map[string]any{"command": "echo before-cancel; env -i bash -c 'sleep 3351 & sleep 3352'"}
		_, _ = c.CallTool(callCtx, req)
	}()
	testenv.WaitFor(t, 10*time.Second, "the sleeps to start", func() bool { return strings.Count(procs(), "sleep 335") == 2 })
	time.Sleep(time.Second)
	callCancel()
	<-done
	testenv.WaitFor(t, 15*time.Second, "cancelled sleeps to be killed", func() bool { return procs() == "" })
	// The cancelled call's output reached nobody: job_output returns it, with the kill
	// and the job's own running time.
	var id any
	for _, j := range testsite.Structured(t, testsite.Call(ctx, t, c, "job_list", nil))["jobs"].([]any) {
		if j := j.(map[string]any); strings.HasPrefix(j["command"].(string), "echo before-cancel") {
			id = j["job_id"]
		}
	}
	st = testsite.Structured(t, testsite.Call(ctx, t, c, "job_output", map[string]any{"job_id": id, "wait": 5}))
	if st["stdout"] != "before-cancel\n" || st["cancelled"] != true || st["killed"] != true || st["duration_seconds"].(float64) < 1 {
		t.Errorf("job_output after the cancelled call: %v", st)
	}
}

// TestJobSurvivesReloadAndRestart: a running job goes on through a config reload and a
// Caddy restart; afterwards job_list shows it and job_output delivers the rest of its
// output, nothing twice, and its exit code.
func TestJobSurvivesReloadAndRestart(t *testing.T) {
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "for i in $(seq 1 16); do echo tick-$i; sleep 0.5; done; exit 5", "wait": 1}))
	if st["running"] != true {
		t.Fatalf("start: %v", st)
	}
	id := st["job_id"].(string)
	got := st["stdout"].(string)

	s.Load(testsite.Options{Directive: []string{"yield_after 4s", "link_ttl 2h"}})
	c2 := s.Client(ctx)
	r := testsite.Structured(t, testsite.Call(ctx, t, c2, "job_output", map[string]any{"job_id": id, "wait": 1}))
	got += r["stdout"].(string)

	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	s.Load(testsite.Options{Directive: []string{"yield_after 5s"}})
	c3 := s.Client(ctx)
	list := testsite.Structured(t, testsite.Call(ctx, t, c3, "job_list", nil))
	if !strings.Contains(fmt.Sprint(list["jobs"]), id) {
		t.Fatalf("job_list after restart: %v", list)
	}
	stdout, _, last := followJob(ctx, t, c3, testsite.Structured(t, testsite.Call(ctx, t, c3, "job_output", map[string]any{"job_id": id})))
	got += stdout
	var want strings.Builder
	for i := 1; i <= 16; i++ {
		fmt.Fprintf(&want, "tick-%d\n", i)
	}
	if got != want.String() || last["exit_code"] != float64(5) {
		t.Errorf("across reload and restart: %q, last %v", got, last)
	}
}

// TestJobBadInput: malformed and unknown ids, negative waits, and too many jobs are
// tool errors that say what to do; running jobs are not disturbed.
func TestJobBadInput(t *testing.T) {
	s := jobsSite(t, "max_jobs 2")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	bad := func(tool string, args map[string]any, want string) {
		t.Helper()
		res := testsite.Call(ctx, t, c, tool, args)
		if !res.IsError || !strings.Contains(testsite.ResultText(res), want) {
			t.Errorf("%s(%v): error %v, %q; want %q", tool, args, res.IsError, testsite.ResultText(res), want)
		}
	}
	bad("job_output", map[string]any{"job_id": "12; rm -rf /"}, "like j6940a1f03f2a")
	bad("job_output", map[string]any{"job_id": "j000000000000"}, "no job j000000000000")
	bad("job_kill", map[string]any{"job_id": "j000000000000"}, "job_list")
	bad("job_input", map[string]any{"job_id": "J00", "input": "x"}, "like j6940a1f03f2a")
	bad("execute", map[string]any{"command": "true", "wait": -1}, `"wait" must be a number of seconds from 0 to 5 (the server's yield_after`)
	// A longer wait is refused as the schema says (its maximum is yield_after).
	bad("execute", map[string]any{"command": "true", "wait": 60}, `"wait" must be a number of seconds from 0 to 5 (the server's yield_after: no call waits longer; for longer, call job_output again), got 60`)
	bad("execute", map[string]any{"command": "true", "cwd": "/nonexistent"}, "not a directory")

	a := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo a1; sleep 4; echo a2", "wait": 0}))
	b := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo b1; sleep 4; echo b2", "wait": 0}))
	bad("job_output", map[string]any{"job_id": a["job_id"], "wait": -2}, "yield_after")
	bad("execute", map[string]any{"command": "echo third"}, "max_jobs")
	for _, st := range []map[string]any{a, b} {
		out, _, last := followJob(ctx, t, c, st)
		p := strings.TrimSuffix(out, "\n")
		if p != fmt.Sprintf("%c1\n%c2", out[0], out[0]) || last["exit_code"] != float64(0) {
			t.Errorf("job beside the refusals: %q %v", out, last)
		}
	}
	if st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo third"})); st["stdout"] != "third\n" {
		t.Errorf("after the jobs ended: %v", st)
	}
}

// TestExecuteOutputShape: the output the model sees (issue 13): long output cut at line
// boundaries with counts and a file holding it all, cwd, max_output, detached and
// half-detached commands, long commands, signal names.
func TestExecuteOutputShape(t *testing.T) {
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)

	// 1.6 MB of grep output.
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": `awk 'BEGIN{for(i=1;i<=80000;i++) printf "row %08d padded\n", i}' > /sandbox/data.txt`})
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "grep row /sandbox/data.txt"})
	st := testsite.Structured(t, res)
	out := st["stdout"].(string)
	m := regexp.MustCompile(`(?m)^\[\.\.\. lines (\d+)–(\d+) left out \((\d+) bytes\)(?:; that is a lot: search it first with execute, e\.g\. grep -n PATTERN \S+ \| head -50)?; read them with read_file path=(\S+) offset=(\d+) limit=\d+ \.\.\.\]\n`).FindStringSubmatchIndex(out)
	if m == nil || st["stdout_truncated"] != true || st["stdout_bytes"] != float64(1_600_000) {
		t.Fatalf("no marker in the cut output (%v bytes, truncated %v): %.200q", st["stdout_bytes"], st["stdout_truncated"], out)
	}
	head, tail := out[:m[0]], out[m[1]:]
	lineRe := regexp.MustCompile(`^(row \d{8} padded\n)+$`)
	if !lineRe.MatchString(head) || !lineRe.MatchString(tail) {
		t.Errorf("cut inside a line: head ends %q, tail starts %q", head[max(0, len(head)-30):], tail[:min(30, len(tail))])
	}
	from, _ := strconv.Atoi(out[m[2]:m[3]])
	to, _ := strconv.Atoi(out[m[4]:m[5]])
	omitted, _ := strconv.Atoi(out[m[6]:m[7]])
	file := out[m[8]:m[9]]
	lines := to - from + 1
	if from != strings.Count(head, "\n")+1 || out[m[10]:m[11]] != out[m[2]:m[3]] ||
		lines != 80000-strings.Count(head, "\n")-strings.Count(tail, "\n") || omitted != lines*20 || len(head)+len(tail) > 200000 {
		t.Errorf("marker %q; kept %d+%d bytes", out[m[0]:m[1]], len(head), len(tail))
	}
	if txt := testsite.ResultText(res); !strings.Contains(txt, "output was cut") || !strings.Contains(txt, file) {
		t.Errorf("footer does not say the output was cut: %q", txt[max(0, len(txt)-300):])
	}
	sum := strings.Fields(s.ContainerExec("sha256sum " + file))[0]
	want := strings.Fields(s.ContainerExec("grep row /sandbox/data.txt > /tmp/full.txt; sha256sum /tmp/full.txt"))[0]
	if sum != want {
		t.Errorf("%s has sha256 %s, the command's output %s", file, sum, want)
	}

	// max_output asks for less.
	st = testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "grep row /sandbox/data.txt", "max_output": 2000}))
	if n := len(st["stdout"].(string)); n > 2300 || st["stdout_truncated"] != true {
		t.Errorf("max_output 2000 kept %d bytes", n)
	}
	bad := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true", "max_output": 10_000_000})
	if !bad.IsError {
		t.Errorf("max_output above the configured maximum accepted")
	}

	// default_output: 30,000 bytes per stream unless the call asks for more, up to
	// max_output. The bytes counted are seq's lines, whatever the marker says.
	digits := regexp.MustCompile(`(?m)^\d+\n`)
	kept := func(st map[string]any) int {
		n := 0
		for _, l := range digits.FindAllString(st["stdout"].(string), -1) {
			n += len(l)
		}
		return n
	}
	st = testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "seq 1 300000"}))
	if n := kept(st); n > 30_000 || n < 29_000 || st["stdout_truncated"] != true {
		t.Errorf("seq 1 300000 returned %d bytes of its output by default, want at most 30000", n)
	}
	st = testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "seq 1 300000", "max_output": 200_000}))
	if n := kept(st); n > 200_000 || n < 195_000 {
		t.Errorf("seq 1 300000 with max_output 200000 returned %d bytes of its output", n)
	}

	// cwd.
	if st = testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "pwd", "cwd": "/tmp"})); st["stdout"] != "/tmp\n" {
		t.Errorf("cwd /tmp: %v", st)
	}

	// A detached command returns as fast as any other.
	start := time.Now()
	st = testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "setsid nohup sleep 60 > /dev/null 2>&1 &"}))
	if d := time.Since(start); d > 500*time.Millisecond || st["exit_code"] != float64(0) {
		t.Errorf("detached command took %v: %v", d, st)
	} else {
		t.Logf("detached command returned in %v", d)
	}
	// One that leaves a process holding the output returns as fast, naming the job the
	// process became (TestBackgroundBecomesJob follows such jobs).
	start = time.Now()
	res = testsite.Call(ctx, t, c, "execute", map[string]any{"command": "sleep 30 & echo main done"})
	if d := time.Since(start); d > 2*time.Second || !strings.Contains(testsite.ResultText(res), "(sleep 30) runs on in the background as job j") || testsite.Structured(t, res)["stdout"] != "main done\n" {
		t.Errorf("half-detached command: %v, %q", d, testsite.ResultText(res))
	}
	testsite.Call(ctx, t, c, "job_kill", map[string]any{"job_id": testsite.Structured(t, res)["background_job_id"]})

	// A command longer than Linux's 128 KiB argument limit.
	long := "x=" + strings.Repeat("a", 200<<10) + "; echo ${#x}"
	if st = testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": long})); st["stdout"] != "204800\n" {
		t.Errorf("200 KiB command: %v", st)
	}

	// The signal behind an exit code is named.
	if txt := testsite.ResultText(testsite.Call(ctx, t, c, "execute", map[string]any{"command": "kill -TERM $$"})); !strings.Contains(txt, "exit code 143: killed by signal 15, SIGTERM") {
		t.Errorf("signal text %q", txt)
	}
}

// TestJobsConcurrentMemory: 20 jobs printing 10 MB each at once all come back right,
// and Caddy's peak RSS (this test process) stays under 256 MB.
func TestJobsConcurrentMemory(t *testing.T) {
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"})
	// Reset the peak RSS counter (VmHWM) so the measure covers this test only.
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	const n, size = 20, 10_000_000
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cmd := fmt.Sprintf("yes job-%02d | head -c %d; echo end-%02d", i, size-7, i)
			st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": cmd}))
			out, _, last := followJob(ctx, t, c, st)
			if last["stdout_bytes"] != float64(size) || last["exit_code"] != float64(0) ||
				!strings.HasPrefix(out, fmt.Sprintf("job-%02d\n", i)) || !strings.HasSuffix(out, fmt.Sprintf("end-%02d\n", i)) {
				errs <- fmt.Sprintf("job %d: %v bytes, exit %v, %.40q...%q", i, last["stdout_bytes"], last["exit_code"], out, out[max(0, len(out)-20):])
				return
			}
			sum := strings.Fields(s.ContainerExec("sha256sum " + last["stdout_file"].(string)))[0]
			h := sha256.New()
			line := fmt.Sprintf("job-%02d\n", i)
			for w := 0; w < size-7; w += len(line) {
				h.Write([]byte(line[:min(len(line), size-7-w)]))
			}
			fmt.Fprintf(h, "end-%02d\n", i)
			if hex.EncodeToString(h.Sum(nil)) != sum {
				errs <- fmt.Sprintf("job %d: file differs: %s", i, s.TryExec("ls -la "+last["stdout_file"].(string)+"; head -c 100 "+last["stdout_file"].(string)+"; tail -c 100 "+last["stdout_file"].(string)+"; grep -v job-%02d "+last["stdout_file"].(string)+" | head -5"))
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	status, _ := os.ReadFile("/proc/self/status")
	m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(status)
	if m == nil {
		t.Fatal("no VmHWM")
	}
	kb, _ := strconv.Atoi(string(m[1]))
	t.Logf("peak RSS of the process running Caddy: %d MiB (race detector: %v)", kb>>10, raceEnabled)
	if kb > 256<<10 && !raceEnabled {
		t.Errorf("peak RSS %d MiB, want under 256", kb>>10)
	}
}
