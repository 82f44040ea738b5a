package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// MCP Apps: upload_link, expose_port and share_file name views that a client which declared the
// io.modelcontextprotocol/ui extension renders; any other client sees the server as
// it was without them.

// uiCapabilities is what a client that renders apps declares, as the reference SDK's
// hosts do.
var uiCapabilities = map[string]any{
	"extensions": map[string]any{"io.modelcontextprotocol/ui": map[string]any{"mimeTypes": []string{"text/html;profile=mcp-app"}}},
}

// rawSessionWith is rawSession with the client's capabilities; it also returns the
// initialize result.
func rawSessionWith(s *testsite.Site, t testing.TB, caps map[string]any) (*rawMCP, json.RawMessage) {
	t.Helper()
	c := &rawMCP{t: t, s: s, key: s.Key}
	resp, res, rerr := c.post("initialize", map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": caps,
		"clientInfo": map[string]any{"name": "apps-test", "version": "1"},
	})
	if rerr != nil {
		t.Fatalf("initialize: %s", rerr.Message)
	}
	c.sid = resp.Header.Get("Mcp-Session-Id")
	if c.sid == "" {
		t.Fatal("initialize: no Mcp-Session-Id")
	}
	return c, res
}

// mustCall is call that fails the test on a JSON-RPC error.
func (c *rawMCP) mustCall(method string, params any) json.RawMessage {
	c.t.Helper()
	res, rerr := c.call(method, params)
	if rerr != nil {
		c.t.Fatalf("%s: %d %s", method, rerr.Code, rerr.Message)
	}
	return res
}

// appResource is one item of a resources/read result.
type appResource struct {
	URI      string `json:"uri"`
	MIMEType string `json:"mimeType"`
	Text     string `json:"text"`
	Meta     struct {
		UI struct {
			CSP struct {
				ConnectDomains []string `json:"connectDomains"`
				FrameDomains   []string `json:"frameDomains"`
			} `json:"csp"`
		} `json:"ui"`
	} `json:"_meta"`
}

// readApp reads an app's resource; it fails the test unless there is exactly one.
func readApp(t testing.TB, c *rawMCP, uri string) (appResource, json.RawMessage) {
	t.Helper()
	raw := c.mustCall("resources/read", map[string]any{"uri": uri})
	var res struct {
		Contents []appResource `json:"contents"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || len(res.Contents) != 1 {
		t.Fatalf("resources/read %s: %v %.300s", uri, err, raw)
	}
	return res.Contents[0], raw
}

// uploadLinkPattern is the variable part of an upload_link result: the signed link and
// its expiry.
var uploadLinkPattern = regexp.MustCompile(`/uploads/[^/"' \\]+/|"expires_at":"[^"]+"|valid until [0-9T:Z-]+`)

// TestAppsOnlyForClientsThatRenderThem: through a real Caddy with previews on (every
// tool offered), a client that declared the UI extension gets each app's declaration
// in tools/list, the resources capability and the apps' HTML with their CSP; a client
// that did not gets tools/list byte for byte as without apps, no resources, and the
// same results. tools/list stays under 22 KB with the apps declared.
func TestAppsOnlyForClientsThatRenderThem(t *testing.T) {
	p := startPreviewSite(t)
	plain, plainInit := rawSessionWith(p.Site, t, map[string]any{})
	ui, uiInit := rawSessionWith(p.Site, t, uiCapabilities)

	// Initialize: only the client that renders apps is told of resources.
	if bytes.Contains(plainInit, []byte(`"resources"`)) {
		t.Errorf("initialize of a client without the extension announces resources: %s", plainInit)
	}
	if !bytes.Contains(uiInit, []byte(`"resources"`)) {
		t.Errorf("initialize of a client with the extension does not announce resources: %s", uiInit)
	}

	plainList := plain.mustCall("tools/list", map[string]any{})
	uiList := ui.mustCall("tools/list", map[string]any{})
	if bytes.Contains(plainList, []byte("_meta")) || bytes.Contains(plainList, []byte("ui://")) {
		t.Errorf("tools/list of a client without the extension names apps")
	}
	// The declarations are the only difference, byte for byte.
	stripped := uiList
	for _, uri := range []string{"ui://mcp-sandbox/upload.html", "ui://mcp-sandbox/preview.html", "ui://mcp-sandbox/file.html"} {
		decl := fmt.Sprintf(`"_meta":{"ui":{"resourceUri":%q},"ui/resourceUri":%q},`, uri, uri)
		if !bytes.Contains(stripped, []byte(decl)) {
			t.Fatalf("tools/list with the extension lacks %s in this form: %s", decl, uiList)
		}
		stripped = bytes.Replace(stripped, []byte(decl), nil, 1)
	}
	if !bytes.Equal(stripped, plainList) {
		t.Errorf("tools/list differs beyond the apps' declarations:\nwith:    %.2000s\nwithout: %.2000s", stripped, plainList)
	}
	var tools struct {
		Tools []struct {
			Name string `json:"name"`
			Meta *struct {
				UI struct {
					ResourceURI string `json:"resourceUri"`
				} `json:"ui"`
			} `json:"_meta"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(uiList, &tools); err != nil {
		t.Fatal(err)
	}
	withApps := map[string]string{}
	for _, tool := range tools.Tools {
		if tool.Meta != nil {
			withApps[tool.Name] = tool.Meta.UI.ResourceURI
		}
	}
	if want := map[string]string{"upload_link": "ui://mcp-sandbox/upload.html", "expose_port": "ui://mcp-sandbox/preview.html", "share_file": "ui://mcp-sandbox/file.html"}; fmt.Sprint(withApps) != fmt.Sprint(want) {
		t.Errorf("tools with apps: %v, want %v", withApps, want)
	}
	if len(uiList) >= 22_000 {
		t.Errorf("tools/list with the apps is %d bytes, want under 22000", len(uiList))
	}
	t.Logf("tools/list: %d tools, %d bytes with the apps declared, %d without", len(tools.Tools), len(uiList), len(plainList))

	// Resources: listed and readable only with the extension.
	if l := plain.mustCall("resources/list", map[string]any{}); bytes.Contains(l, []byte("ui://")) {
		t.Errorf("resources/list without the extension: %s", l)
	}
	if _, rerr := plain.call("resources/read", map[string]any{"uri": "ui://mcp-sandbox/upload.html"}); rerr == nil || !strings.Contains(rerr.Message, "io.modelcontextprotocol/ui") {
		t.Errorf("resources/read of an app without the extension: %v, want an error naming the extension", rerr)
	}
	l := ui.mustCall("resources/list", map[string]any{})
	for _, uri := range []string{"ui://mcp-sandbox/upload.html", "ui://mcp-sandbox/preview.html", "ui://mcp-sandbox/file.html"} {
		if !bytes.Contains(l, []byte(uri)) {
			t.Errorf("resources/list with the extension lacks %s: %s", uri, l)
		}
	}
	up, raw := readApp(t, ui, "ui://mcp-sandbox/upload.html")
	if up.MIMEType != "text/html;profile=mcp-app" || !strings.Contains(up.Text, "ui/initialize") {
		t.Errorf("upload app: %s, %.200q", up.MIMEType, up.Text)
	}
	if !slices.Equal(up.Meta.UI.CSP.ConnectDomains, []string{p.URL}) || len(up.Meta.UI.CSP.FrameDomains) != 0 {
		t.Errorf("upload app's CSP: %+v, want connectDomains [%s] only", up.Meta.UI.CSP, p.URL)
	}
	// Self-contained: nothing is fetched from elsewhere.
	for _, ref := range []string{"<script src", "<link", "http://", "https://", "@import"} {
		if strings.Contains(up.Text, ref) {
			t.Errorf("the upload app refers to %q: it must be self-contained", ref)
		}
	}
	t.Logf("upload app: %d bytes of HTML (resources/read answer %d bytes)", len(up.Text), len(raw))
	pv, _ := readApp(t, ui, "ui://mcp-sandbox/preview.html")
	wantFrame := fmt.Sprintf("http://*.localhost:%d", p.Port)
	if pv.MIMEType != "text/html;profile=mcp-app" || !slices.Equal(pv.Meta.UI.CSP.FrameDomains, []string{wantFrame}) || len(pv.Meta.UI.CSP.ConnectDomains) != 0 {
		t.Errorf("preview app: %s, CSP %+v; want frameDomains [%s] only", pv.MIMEType, pv.Meta.UI.CSP, wantFrame)
	}
	t.Logf("preview app: %d bytes of HTML", len(pv.Text))
	fa, _ := readApp(t, ui, "ui://mcp-sandbox/file.html")
	if fa.MIMEType != "text/html;profile=mcp-app" || !slices.Equal(fa.Meta.UI.CSP.ConnectDomains, []string{p.URL}) || len(fa.Meta.UI.CSP.FrameDomains) != 0 {
		t.Errorf("file app: %s, CSP %+v; want connectDomains [%s] and no frameDomains", fa.MIMEType, fa.Meta.UI.CSP, p.URL)
	}
	for _, ref := range []string{"<script src", "<link", "http://", "https://", "@import"} {
		if strings.Contains(fa.Text, ref) {
			t.Errorf("the file app refers to %q: it must be self-contained", ref)
		}
	}
	t.Logf("file app: %d bytes of HTML", len(fa.Text))

	// Results are the same for both clients, but for the link's signature and expiry.
	args := map[string]any{"name": "upload_link", "arguments": map[string]any{"directory": "/sandbox/in"}}
	a := uploadLinkPattern.ReplaceAll(plain.mustCall("tools/call", args), []byte("<link>"))
	time.Sleep(1100 * time.Millisecond) // another second: the expiry differs, which the pattern must cover
	b := uploadLinkPattern.ReplaceAll(ui.mustCall("tools/call", args), []byte("<link>"))
	if !bytes.Equal(a, b) || bytes.Contains(a, []byte("ui://")) {
		t.Errorf("upload_link results differ:\nwithout: %s\nwith:    %s", a, b)
	}
	if !bytes.Contains(a, []byte("<link>")) {
		t.Fatalf("the pattern matched nothing in %s", a)
	}
}

// TestUploadPreflightThroughCaddy: the CORS preflight an app's upload sends (Origin
// null: a sandboxed iframe) is allowed on a valid signed link, and refused, without
// CORS headers, on a tampered one, the page itself, or another method.
func TestUploadPreflightThroughCaddy(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	link := uploadLinkFor(t.Context(), t, s, map[string]any{"directory": "/sandbox/uploads"})["url"].(string)
	i := strings.Index(link, "/uploads/") + len("/uploads/")
	tampered := link[:i] + string(rune(link[i]^1)) + link[i+1:]
	preflight := func(u, method string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, u, nil)
		req.Header.Set("Origin", "null")
		req.Header.Set("Access-Control-Request-Method", method)
		req.Header.Set("Access-Control-Request-Headers", "content-type")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := preflight(link+"data.csv", http.MethodPut)
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" || resp.Header.Get("Access-Control-Allow-Methods") != "PUT" {
		t.Fatalf("preflight on a valid link: %d %v", resp.StatusCode, resp.Header)
	}
	if resp.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("credentials allowed: %v", resp.Header)
	}
	for name, tc := range map[string]struct {
		u, method string
		status    int
	}{
		"tampered link": {tampered + "data.csv", http.MethodPut, http.StatusForbidden},
		"the page":      {link, http.MethodGet, http.StatusForbidden},
		"a DELETE":      {link + "data.csv", http.MethodDelete, http.StatusForbidden},
	} {
		resp := preflight(tc.u, tc.method)
		if resp.StatusCode != tc.status || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s: %d, Access-Control-Allow-Origin %q; want %d and none", name, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), tc.status)
		}
	}
	// The PUT itself, from that origin, may read its answer.
	req, _ := http.NewRequest(http.MethodPut, link+"data.csv", strings.NewReader("a,b\n1,2\n"))
	req.Header.Set("Origin", "null")
	req.Header.Set("Accept", "application/json")
	put, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	put.Body.Close()
	if put.StatusCode != http.StatusCreated || put.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("cross-origin PUT: %d %v", put.StatusCode, put.Header)
	}
	if got := s.ContainerExec("cat /sandbox/uploads/data.csv"); got != "a,b\n1,2\n" {
		t.Errorf("the file in the sandbox holds %q", got)
	}
}
