package mcptools

import (
	"context"
	"embed"
	"errors"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// MCP Apps (the io.modelcontextprotocol/ui extension): upload_link, expose_port and
// share_file name an HTML view the client renders in a sandboxed iframe, fed the tool's result
// through the host's postMessage bridge. Only a client that declared the extension at
// initialize is told of them: for every other client, initialize, tools/list and the
// results are what they were without apps.

// uiExtension is the capability key a client declares under "extensions" when it
// renders apps, as the reference SDK's getUiCapability reads it.
const uiExtension = "io.modelcontextprotocol/ui"

// appMIME is the media type of an app's HTML.
const appMIME = "text/html;profile=mcp-app"

// The apps' resource URIs.
const (
	uploadAppURI  = "ui://mcp-sandbox/upload.html"
	previewAppURI = "ui://mcp-sandbox/preview.html"
	fileAppURI    = "ui://mcp-sandbox/file.html"
)

// appsFS holds the apps: each one self-contained HTML (script and style inline, no
// requests but the ones its CSP allows), and the host bridge both inline.
//
//go:embed apps/*.html apps/bridge.js
var appsFS embed.FS

// appHTML is an app's page with the bridge put in place of its `// {{bridge}}` line.
func appHTML(file string) string {
	page, err := appsFS.ReadFile(file)
	if err != nil {
		panic(err)
	}
	bridge, err := appsFS.ReadFile("apps/bridge.js")
	if err != nil {
		panic(err)
	}
	if !strings.Contains(string(page), "// {{bridge}}\n") {
		panic(file + " has no place for the bridge")
	}
	return strings.Replace(string(page), "// {{bridge}}\n", string(bridge), 1)
}

// appPages are the apps' pages, made once.
var appPages = map[string]string{
	uploadAppURI:  appHTML("apps/upload.html"),
	previewAppURI: appHTML("apps/preview.html"),
	fileAppURI:    appHTML("apps/file.html"),
}

// appOf is the app of each tool that has one.
var appOf = map[string]string{
	"upload_link": uploadAppURI,
	"expose_port": previewAppURI,
	"share_file":  fileAppURI,
}

// rendersApps reports whether the client of ctx's session declared that it renders
// apps.
func rendersApps(ctx context.Context) bool {
	si, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo)
	if !ok {
		return false
	}
	_, ok = si.GetClientCapabilities().Extensions[uiExtension]
	return ok
}

// withApp gives a listed tool its app's declaration, in both the current key
// (_meta.ui.resourceUri) and the older flat one hosts still read.
func withApp(t mcp.Tool) mcp.Tool {
	uri, ok := appOf[t.Name]
	if !ok {
		return t
	}
	t.Meta = &mcp.Meta{AdditionalFields: map[string]any{
		"ui":             map[string]any{"resourceUri": uri},
		"ui/resourceUri": uri,
	}}
	return t
}

// addApps registers the apps' resources. The resources capability and the listing are
// hidden again from clients that do not render apps (appHooks).
func (s *Tools) addApps(m *server.MCPServer) {
	m.AddResource(mcp.NewResource(uploadAppURI, "Upload files",
		mcp.WithResourceDescription("Upload form for an upload_link result."), mcp.WithMIMEType(appMIME)),
		s.readApp(uploadAppURI))
	m.AddResource(mcp.NewResource(fileAppURI, "Shared file",
		mcp.WithResourceDescription("A share_file result shown in the conversation: an image, or an HTML page in a sandboxed frame that reaches nothing."), mcp.WithMIMEType(appMIME)),
		s.readApp(fileAppURI))
	if s.opts.Previews != nil {
		m.AddResource(mcp.NewResource(previewAppURI, "Preview",
			mcp.WithResourceDescription("Live view of an expose_port preview."), mcp.WithMIMEType(appMIME)),
			s.readApp(previewAppURI))
	}
}

// errNoApps is what a client that did not declare the extension gets for an app.
var errNoApps = errors.New("this resource is an MCP App: declare the " + uiExtension + " extension in the client's capabilities at initialize to read it")

// readApp answers resources/read of one app, with the content security policy its
// host applies: the upload app talks to this site only, the preview app frames the
// previews' origins only, the file app reads from this site only (a page's text, an
// image) and frames nothing but the page it writes itself.
func (s *Tools) readApp(uri string) server.ResourceHandlerFunc {
	return func(ctx context.Context, _ mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		if !rendersApps(ctx) {
			return nil, errNoApps
		}
		origin := CallerFrom(ctx).Origin
		csp := map[string]any{}
		switch uri {
		case uploadAppURI:
			csp["connectDomains"] = []string{origin}
		case previewAppURI:
			csp["frameDomains"] = []string{s.opts.Previews.FrameDomain(origin)}
		case fileAppURI:
			csp["connectDomains"] = []string{origin}
			csp["resourceDomains"] = []string{origin}
		}
		return []mcp.ResourceContents{mcp.TextResourceContents{
			URI: uri, MIMEType: appMIME, Text: appPages[uri],
			Meta: map[string]any{"ui": map[string]any{"csp": csp, "prefersBorder": true}},
		}}, nil
	}
}

// appHooks keeps initialize and resources/list as they were for clients that do not
// render apps: the apps are the only resources.
func appHooks(hooks *server.Hooks) {
	hooks.AddAfterInitialize(func(ctx context.Context, _ any, req *mcp.InitializeRequest, res *mcp.InitializeResult) {
		if _, ok := req.Params.Capabilities.Extensions[uiExtension]; !ok {
			res.Capabilities.Resources = nil
		}
	})
	hooks.AddAfterListResources(func(ctx context.Context, _ any, _ *mcp.ListResourcesRequest, res *mcp.ListResourcesResult) {
		if !rendersApps(ctx) {
			res.Resources = []mcp.Resource{}
		}
	})
}
