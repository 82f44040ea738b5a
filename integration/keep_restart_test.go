package integration

import (
	"context"
	"os"
	"os/exec"
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
	if after < before || after > before+200 {
		t.Errorf("the counter was at %d before the stop and the engine's restart, %d after: it did not go on from where it was", before, after)
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
