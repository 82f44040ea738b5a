package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// derivedImage builds an image from the test image and the Dockerfile lines, removed
// when the test ends, and returns its tag.
func derivedImage(ctx context.Context, t *testing.T, lines string) string {
	t.Helper()
	cli := testengine.DockerClient(t)
	tag := "mcp-sandbox-derived-" + testenv.RandomHex(4) + ":latest"
	if err := sandbox.BuildImage(ctx, sandbox.Docker(cli), tag, []byte("FROM "+testengine.Image()+"\n"+lines+"\n"), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	return tag
}

// TestCommandsRunPythonUnbuffered: commands get PYTHONUNBUFFERED=1, so Python's output
// shows while it runs; an image that sets PYTHONUNBUFFERED itself keeps its value.
func TestCommandsRunPythonUnbuffered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	own := derivedImage(ctx, t, "ENV PYTHONUNBUFFERED=0")
	for _, tc := range []struct{ image, want string }{{"", "1\n"}, {own, "0\n"}} {
		s := testsite.Start(t, testsite.Options{Image: tc.image})
		res := testsite.Call(ctx, t, s.Client(ctx), "execute", map[string]any{"command": "echo $PYTHONUNBUFFERED"})
		if got := testsite.Structured(t, res)["stdout"]; got != tc.want {
			t.Errorf("image %q: PYTHONUNBUFFERED is %q, want %q", tc.image, got, tc.want)
		}
	}
}

// TestFirstSessionKnowsWhatIsInstalled: detection starts with the app (creating the
// container for it) and initialize waits briefly for it, so the first session of a
// fresh site, with nothing detected before and nothing in storage, is told what is
// installed.
func TestFirstSessionKnowsWhatIsInstalled(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	time.Sleep(2 * time.Second) // a client connecting soon after the start
	start := time.Now()
	instructions, tools := mcpSession(ctx, t, s, mcp.LATEST_LEGACY_PROTOCOL_VERSION)
	const base = "Installed: only the base system"
	if !strings.Contains(instructions, base) || !strings.Contains(tools, base) {
		t.Errorf("the first session was not told what is installed:\ninstructions: %q\ntools: %q", instructions, tools)
	}
	t.Logf("first session's initialize and tools/list took %v", time.Since(start))
}

// TestToolsListChangedOnceDetected: a session that began before the installed tools
// were known (here: the image was missing until the test tagged it) is sent tools/list_changed when they
// are, and then lists them.
func TestToolsListChangedOnceDetected(t *testing.T) {
	tag := "mcp-sandbox-lazyfacts-" + testenv.RandomHex(4) + ":latest"
	s := testsite.Start(t, testsite.Options{Image: tag})
	t.Cleanup(func() {
		_, _ = s.Docker.ImageRemove(context.Background(), tag, image.RemoveOptions{})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := mcpclient.NewStreamableHttpClient(s.URL+"/mcp",
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + s.Key}),
		transport.WithContinuousListening()) //nolint:staticcheck // SA1019: the test needs the legacy GET stream
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 8)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == mcp.MethodNotificationToolsListChanged {
			changed <- struct{}{}
		}
	})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "e2e-test", Version: "1"}
	ir, err := c.Initialize(ctx, init)
	if err != nil {
		t.Fatal(err)
	}
	if ir.Capabilities.Tools == nil || !ir.Capabilities.Tools.ListChanged {
		t.Errorf("the server does not declare tools.listChanged: %+v", ir.Capabilities.Tools)
	}
	if strings.Contains(ir.Instructions, "Installed:") {
		t.Fatalf("the image is missing, yet the instructions name what is installed: %q", ir.Instructions)
	}
	if r := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"}); !r.IsError {
		t.Fatalf("a call with the image missing worked: %q", testsite.ResultText(r))
	}
	// The image appears, as when an operator builds it.
	if err := s.Docker.ImageTag(ctx, testengine.Image(), tag); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 90*time.Second, "the image", func() bool {
		r := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"})
		return !r.IsError
	})
	testenv.WaitFor(t, 30*time.Second, "tools/list_changed", func() bool {
		if _, err := c.ListTools(ctx, mcp.ListToolsRequest{}); err != nil { // starts the detection
			t.Fatal(err)
		}
		select {
		case <-changed:
			return true
		default:
			return false
		}
	})
	lr, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(lr.Tools); !strings.Contains(string(b), "Installed: ") {
		t.Errorf("after tools/list_changed, the tools do not say what is installed: %s", b)
	}
}
