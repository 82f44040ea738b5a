package mcptools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/server"
)

// appSession is one session of the tools' MCP server whose client declared caps at
// initialize; rpc sends a request on it and returns the raw answer.
type appSession struct {
	t   *testing.T
	h   *toolsHarness
	ctx context.Context
	ids int
}

func newAppSession(t *testing.T, h *toolsHarness, id string, caps map[string]any) *appSession {
	t.Helper()
	sess := server.NewInProcessSession(id, nil)
	if err := h.tools.MCPServer().RegisterSession(context.Background(), sess); err != nil {
		t.Fatal(err)
	}
	ctx := WithCaller(context.Background(), Caller{ClientName: "test", Label: "test", Origin: "https://sandbox.example"})
	a := &appSession{t: t, h: h, ctx: h.tools.MCPServer().WithContext(ctx, sess)}
	a.rpc("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": caps,
		"clientInfo": map[string]any{"name": "test", "version": "1"}})
	return a
}

func (a *appSession) rpc(method string, params any) string {
	a.t.Helper()
	a.ids++
	msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": a.ids, "method": method, "params": params})
	b, _ := json.Marshal(a.h.tools.MCPServer().HandleMessage(a.ctx, msg))
	return string(b)
}

// TestAppsDeclaredOnlyToClientsThatRenderThem: the apps' declarations, the resources
// capability, listing and reading go to a session whose client declared the UI
// extension, and nothing of them to another; the upload app may connect to the site's
// origin only, the preview app may frame the previews only.
func TestAppsDeclaredOnlyToClientsThatRenderThem(t *testing.T) {
	h := newToolsHarness(t)
	ui := newAppSession(t, h, "ui", map[string]any{"extensions": map[string]any{uiExtension: map[string]any{}}})
	plain := newAppSession(t, h, "plain", map[string]any{})

	if got := plain.rpc("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}); strings.Contains(got, `"resources"`) {
		t.Errorf("initialize without the extension announces resources: %s", got)
	}
	if got := plain.rpc("tools/list", map[string]any{}); strings.Contains(got, "ui://") || strings.Contains(got, "_meta") {
		t.Errorf("tools/list without the extension names apps: %.300s", got)
	}
	list := ui.rpc("tools/list", map[string]any{})
	var listed struct {
		Result struct {
			Tools []struct {
				Name string         `json:"name"`
				Meta map[string]any `json:"_meta"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(list), &listed); err != nil {
		t.Fatal(err)
	}
	apps := map[string]string{}
	for _, tool := range listed.Result.Tools {
		if tool.Meta != nil {
			ui, _ := tool.Meta["ui"].(map[string]any)
			if tool.Meta["ui/resourceUri"] != ui["resourceUri"] {
				t.Errorf("%s: the two keys disagree: %v", tool.Name, tool.Meta)
			}
			apps[tool.Name], _ = ui["resourceUri"].(string)
		}
	}
	if len(list) >= 22_000 {
		t.Errorf("tools/list with the apps declared is %d bytes, want under 22000", len(list))
	}
	t.Logf("tools/list with the apps declared: %d bytes", len(list))
	if len(apps) != 3 || apps["upload_link"] != uploadAppURI || apps["expose_port"] != previewAppURI || apps["share_file"] != fileAppURI {
		t.Errorf("tools with apps: %v", apps)
	}
	if n := strings.Count(list, "ui://"); n != 6 {
		t.Errorf("tools/list names apps %d times, want 6 (three tools, two keys each)", n)
	}

	if got := plain.rpc("resources/list", map[string]any{}); strings.Contains(got, "ui://") {
		t.Errorf("resources/list without the extension: %s", got)
	}
	if got := plain.rpc("resources/read", map[string]any{"uri": uploadAppURI}); !strings.Contains(got, `"error"`) || !strings.Contains(got, uiExtension) {
		t.Errorf("resources/read without the extension: %.300s", got)
	}
	if got := ui.rpc("resources/list", map[string]any{}); !strings.Contains(got, uploadAppURI) || !strings.Contains(got, previewAppURI) || !strings.Contains(got, fileAppURI) {
		t.Errorf("resources/list with the extension: %s", got)
	}
	up := ui.rpc("resources/read", map[string]any{"uri": uploadAppURI})
	if !strings.Contains(up, `"_meta":{"ui":{"csp":{"connectDomains":["https://sandbox.example"]},"prefersBorder":true}}`) ||
		!strings.Contains(up, `"mimeType":"text/html;profile=mcp-app"`) {
		t.Errorf("upload app: %.400s", up)
	}
	if f := ui.rpc("resources/read", map[string]any{"uri": fileAppURI}); !strings.Contains(f, `"csp":{"connectDomains":["https://sandbox.example"],"resourceDomains":["https://sandbox.example"]}`) ||
		strings.Contains(f, "frameDomains") || !strings.Contains(f, `sandbox=\"allow-scripts\"`) {
		t.Errorf("file app: %.400s", f)
	}
	pv := ui.rpc("resources/read", map[string]any{"uri": previewAppURI})
	if !strings.Contains(pv, `"csp":{"frameDomains":["http://*.localhost"]}`) {
		t.Errorf("preview app: %.400s", pv)
	}
}

// Without previews there is no preview app, listed or readable.
func TestNoPreviewAppWithoutPreviews(t *testing.T) {
	h := newToolsHarness(t, func(o *Options) { o.Previews = nil })
	ui := newAppSession(t, h, "ui", map[string]any{"extensions": map[string]any{uiExtension: map[string]any{}}})
	if got := ui.rpc("resources/list", map[string]any{}); strings.Contains(got, previewAppURI) || !strings.Contains(got, uploadAppURI) {
		t.Errorf("resources/list: %s", got)
	}
	if got := ui.rpc("tools/list", map[string]any{}); strings.Contains(got, previewAppURI) {
		t.Errorf("tools/list names the preview app: %.300s", got)
	}
}
