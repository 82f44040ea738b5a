package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestKeepProcessesEngineRestart: the Docker engine restarts while a sandbox's
// processes are saved (keep_processes, alice's sandbox stopped from the console): the next call
// starts it from the save, and a counting job goes on from where it was. It stops
// dockerd, so `make test` runs it on its own after the other packages
// (MCP_SANDBOX_RESTART_DOCKER=1); elsewhere it is skipped.
func TestKeepProcessesEngineRestart(t *testing.T) {
	if os.Getenv("MCP_SANDBOX_RESTART_DOCKER") != "1" {
		t.Skip("restarts the Docker engine: set MCP_SANDBOX_RESTART_DOCKER=1 (make test does, in a step of its own)")
	}
	rt := testengine.GVisorMemory(t, testengine.DockerClient(t))
	p := startPeopleSite(t, []string{"alice"}, "runtime "+rt, "keep_processes on")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := p.client(ctx, "alice")
	st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{
		"command": countingJob, "wait": 0}))
	if st["running"] != true {
		t.Fatalf("counter: %v", st)
	}
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(p.Storage, "caddy.log"))
			for _, l := range strings.Split(string(log), "\n") {
				if strings.Contains(l, "processes") || strings.Contains(l, "direct channel") {
					t.Logf("caddy: %s", l)
				}
			}
		}
	})
	// Only what descends from the container's main process is saved: the job's runner
	// is one it started, not the agent (an exec).
	if r := stdoutOf(ctx, t, c, testenv.ParentArgs("count.new; mv")); !strings.HasSuffix(r, " jobs --announce ") {
		t.Errorf("the counter's runner is %q, want one the container's main process started (jobs --announce)", r)
	}
	time.Sleep(2 * time.Second)
	count := func() int {
		out := strings.TrimSpace(stdoutOf(ctx, t, c, "cat /tmp/count"))
		n, err := strconv.Atoi(out)
		if err != nil {
			t.Fatalf("count: %q", out)
		}
		return n
	}
	before := count()
	if code, body := consoleAct(t, p.Site, "/sandboxes/alice/stop"); code != 200 {
		t.Fatalf("console stop: %d %s", code, body)
	}
	if out, err := exec.Command("pkill", "-TERM", "-x", "dockerd").CombinedOutput(); err != nil {
		t.Fatalf("stopping dockerd: %v %s", err, out)
	}
	testenv.WaitFor(t, 60*time.Second, "dockerd to stop", func() bool { return exec.Command("pgrep", "-x", "dockerd").Run() != nil })
	if out, err := exec.Command("../scripts/docker-up.sh").CombinedOutput(); err != nil {
		t.Fatalf("starting dockerd again: %v %s", err, out)
	}
	after := count()
	time.Sleep(time.Second)
	later := count()
	if after < before || after > before+200 || later <= after {
		t.Errorf("the counter was at %d before the stop and the engine's restart, %d after, %d a second later: it did not go on from where it was", before, after, later)
	}
	jobs := testsite.Structured(t, testsite.Call(ctx, t, c, "job_list", map[string]any{}))["jobs"].([]any)
	found := false
	for _, j := range jobs {
		if j := j.(map[string]any); j["job_id"] == st["job_id"] {
			found = j["state"] == "running"
		}
	}
	if !found {
		t.Errorf("job_list after the restart: %v, want %v running", jobs, st["job_id"])
	}
}
