package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestBackgroundBecomesJob: a command whose main process ends while a process it
// started still runs with its output open returns at once with the main process's exit
// code and a note naming the job that process became. That job outlives the command's
// timeout, job_list shows it running, job_output delivers its further output and
// job_kill ends it, leaving nothing of it.
func TestBackgroundBecomesJob(t *testing.T) {
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	procs := func() string { return s.TryExec("ps -o args | grep -e '^sleep 4001' -e 'tick-[4]' || true") }
	// The container and its agent are made first: the time below is the command's.
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"})

	start := time.Now()
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo pre; sleep 4001 &", "timeout": 3})
	took := time.Since(start)
	st := testsite.Structured(t, res)
	bg, _ := st["background_job_id"].(string)
	t.Logf("returned after %v: %q", took, testsite.ResultText(res))
	if st["exit_code"] != float64(0) || st["running"] != false || st["stdout"] != "pre\n" || bg == "" || bg == st["job_id"] || took > 2*time.Second {
		t.Fatalf("after %v: %v", took, st)
	}
	if want := "runs on in the background as job " + bg + `; its output: job_output with job_id "` + bg + `"; stop it: job_kill]`; !strings.Contains(testsite.ResultText(res), "(sleep 4001) "+want) {
		t.Errorf("note %q, want it to say %q", testsite.ResultText(res), want)
	}
	// Past the command's timeout, the job runs on.
	time.Sleep(6 * time.Second)
	list := testsite.Structured(t, testsite.Call(ctx, t, c, "job_list", map[string]any{}))
	found := false
	for _, j := range list["jobs"].([]any) {
		if j := j.(map[string]any); j["job_id"] == bg {
			found = j["state"] == "running" && j["command"] == "sleep 4001"
		}
	}
	if !found || !strings.Contains(procs(), "sleep 4001") {
		t.Fatalf("6 s later, job_list %v, processes %q", list, procs())
	}
	out := testsite.Structured(t, testsite.Call(ctx, t, c, "job_output", map[string]any{"job_id": bg, "wait": 0}))
	if out["running"] != true || out["stdout"] != "" || out["exit_code"] != nil {
		t.Errorf("job_output %v", out)
	}
	k := testsite.Structured(t, testsite.Call(ctx, t, c, "job_kill", map[string]any{"job_id": bg}))
	if k["killed"] != true || k["exit_code"] != float64(137) {
		t.Errorf("job_kill %v", k)
	}
	if got := procs(); got != "" {
		t.Errorf("after job_kill, left: %q", got)
	}

	// A loop in the background: job_output returns what it prints later, once each.
	res = testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo start; (while :; do echo tick-4; sleep 1; done) &", "timeout": 3})
	st = testsite.Structured(t, res)
	bg, _ = st["background_job_id"].(string)
	if st["exit_code"] != float64(0) || bg == "" || !strings.HasPrefix(st["stdout"].(string), "start\n") {
		t.Fatalf("loop: %v", st)
	}
	seen := strings.Count(st["stdout"].(string), "tick-4\n")
	time.Sleep(4 * time.Second)
	out = testsite.Structured(t, testsite.Call(ctx, t, c, "job_output", map[string]any{"job_id": bg, "wait": 0}))
	n := strings.Count(out["stdout"].(string), "tick-4\n")
	if out["running"] != true || n < 3 || n > 6 || strings.Contains(out["stdout"].(string), "start") {
		t.Errorf("job_output after %d ticks: %v", seen, out)
	}
	testsite.Call(ctx, t, c, "job_kill", map[string]any{"job_id": bg})
	testenv.WaitFor(t, 5*time.Second, "the loop to end", func() bool { return procs() == "" })
}
