package mcpsandbox

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestUsesCountAsActivity: a download, an upload, a preview connection and a tool
// call's sandbox each count as a use; a command under way keeps the sandbox busy until
// it returns. No Docker: the uses fail, but count.
func TestUsesCountAsActivity(t *testing.T) {
	cli, err := client.NewClientWithOpts(client.WithHost("unix:///nonexistent/docker.sock"), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	sb, err := sandbox.New(cli, sandbox.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newSandboxEntry(sb, cli, Engine{}, zap.NewNop())
	h := &Handler{entry: e, logger: zap.NewNop()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, use := range map[string]func(){
		"download or upload link": func() { _, _ = h.linkFiles(ctx, "") },
		"preview":                 func() { _, _ = h.dialPreview(ctx, h.previewOwner(""), 8000) },
		"tool call":               func() { _, _ = boxes{h}.For(ctx) },
	} {
		e.idle.last.Store(time.Now().Add(-time.Hour).UnixNano())
		use()
		if d := e.idleFor(); d > time.Minute {
			t.Errorf("%s: idle for %v after it", name, d)
		}
	}
	e.idle.last.Store(time.Now().Add(-time.Hour).UnixNano())
	done := e.begin()
	e.idle.last.Store(time.Now().Add(-time.Hour).UnixNano())
	if d := e.idleFor(); d != 0 {
		t.Errorf("idle for %v while a command runs", d)
	}
	done()
	if d := e.idleFor(); d > time.Minute {
		t.Errorf("idle for %v right after a command", d)
	}
}

func TestIdleCheckEvery(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		2 * time.Second: time.Second, 20 * time.Second: 5 * time.Second, 30 * time.Minute: time.Minute,
	} {
		if got := idleCheckEvery(d); got != want {
			t.Errorf("idleCheckEvery(%v) = %v, want %v", d, got, want)
		}
	}
}
