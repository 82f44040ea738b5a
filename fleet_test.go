package mcpsandbox

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestUsesCountAsActivity: a download, an upload, a preview connection and a tool
// call's sandbox each count as a use. No Docker: the uses fail, but count.
func TestUsesCountAsActivity(t *testing.T) {
	dc, err := client.NewClientWithOpts(client.WithHost("unix:///nonexistent/docker.sock"), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	cli := sandbox.Docker(dc)
	defer cli.Close()
	sb, err := sandbox.New(cli, sandbox.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := fleet.NewEntry(fleet.EntryOptions{Sandbox: sb, Client: cli})
	f, err := fleet.New(fleet.Options{Base: sb.Config(), Acquire: func(fleet.Engine, sandbox.Config) (*fleet.Entry, func() error, error) {
		return e, func() error { return nil }, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{fleet: f, logger: zap.NewNop()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, use := range map[string]func(){
		"download or upload link": func() { _, _ = h.linkFiles(ctx, "") },
		"preview":                 func() { _, _ = h.dialPreview(ctx, h.previewOwner(""), 8000) },
		"tool call":               func() { _, _ = boxes{h}.For(ctx) },
		"command":                 func() { _, _ = toolBox{Sandbox: sb, e: e, h: h}.Exec(ctx, "true", boxapi.ExecOptions{}) },
	} {
		before := time.Now()
		use()
		if last := e.LastUse(); last.Before(before) {
			t.Errorf("%s: last use %v, before it began (%v)", name, last, before)
		}
	}
}
