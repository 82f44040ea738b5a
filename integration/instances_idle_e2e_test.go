package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestIdleStopAcrossInstances: two Caddy processes with the same site, `idle_stop 8s`
// and one shared storage. A command through A makes the sandbox; then it is used
// through B only, reading a file every 2 s (no job, nothing A could see in the
// sandbox) for 24 s: A does not stop it meanwhile (the container is not restarted,
// and A's log says no idle stop). Once nobody uses it, it is stopped within idle_stop
// and a check or two.
func TestIdleStopAcrossInstances(t *testing.T) {
	site, a, b := startPair(t, "idle_stop 8s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	if _, err := a.execute(ctx, site.Key, "echo kept > /sandbox/note.txt", 30); err != nil {
		t.Fatal(err)
	}
	started := func() string {
		info, err := site.Docker.ContainerInspect(ctx, site.Container)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.StartedAt
	}
	first := started()
	for end := time.Now().Add(24 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Second) {
		res, err := b.rpc(ctx, site.Key, "tools/call", map[string]any{"name": "read_file", "arguments": map[string]any{"path": "/sandbox/note.txt"}})
		if err != nil || res["isError"] == true {
			t.Fatalf("read_file through B: %v %v", res, err)
		}
	}
	if !testsite.ContainerRunning(t, site.Docker, site.Container) || started() != first {
		t.Errorf("the sandbox in use through B was stopped meanwhile (started %s, first %s)", started(), first)
	}
	logA, _ := os.ReadFile(a.log)
	if strings.Contains(string(logA), "stopped an idle sandbox") {
		t.Error("A stopped the sandbox in use through B for idleness")
	}
	begin := time.Now()
	testenv.WaitFor(t, 30*time.Second, "the sandbox nobody uses to stop", func() bool { return !testsite.ContainerRunning(t, site.Docker, site.Container) })
	t.Logf("stopped %v after the last use through B", time.Since(begin).Round(100*time.Millisecond))
}
