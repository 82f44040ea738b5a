package mcpsandbox

import (
	"context"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcphttp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/questions"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/secret"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/oauth"
)

// Version is reported to MCP clients in serverInfo.
var Version = "0.1.0"

// newMCPServer builds the MCP server with the sandbox tools for this handler.
func (h *Handler) newMCPServer() *server.StreamableHTTPServer {
	h.tools = mcptools.New(h.toolOptions())
	h.askTools.Store(h.tools)
	h.sessionIDs = mcphttp.NewSessionIDs(h.APIKey, func(ctx context.Context) string { return mcptools.CallerFrom(ctx).Person })
	// A session initialized on another instance gets what its client declared from its id.
	m := server.NewStreamableHTTPServer(h.tools.MCPServer(), server.WithEndpointPath(mcpPath),
		server.WithSessionIdManagerResolver(h.sessionIDs), server.WithHTTPContextFunc(h.sessionIDs.RestoreDeclared))
	// A client's reply to an elicitation may reach another instance than the one that asked.
	h.replies = mcphttp.NewReplies(mcphttp.ReplyOptions{
		Key:   secret.DeriveKey(h.APIKey, "mcp client replies v1"),
		Store: questions.Replies{St: h.storage},
		MCP:   m,
		WithPerson: func(ctx context.Context, person string) context.Context {
			return mcptools.WithCaller(ctx, mcptools.Caller{Person: person})
		},
		Logger: h.logger,
	})
	return m
}

// serveMCP checks the origin and the bearer token, then hands the request to mcp-go
// through a writer that can stream and keep the response alive.
func (h *Handler) serveMCP(w http.ResponseWriter, r *http.Request) {
	if !h.allowOrigin(w, r) {
		return
	}
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	id, ok := h.auth.Authenticate(w, r)
	if !ok {
		return
	}
	if !h.sessionIDs.Admit(w, r, id.Person) {
		return
	}
	session := r.Header.Get(server.HeaderKeySessionID)
	var body []byte
	if r.Method == http.MethodPost {
		if body, ok = mcphttp.ReadBody(w, r); !ok {
			return
		}
		// A reply to a request another instance made goes there.
		if body, ok = h.replies.Route(r.Context(), w, body, session, id.Person); !ok {
			return
		}
	}
	sw := mcphttp.NewStreamWriter(w, time.Duration(h.Keepalive))
	if r.Method == http.MethodPost || r.Method == http.MethodGet {
		sw.StartKeepalive()
	}
	defer sw.Finish()
	out, end := h.replies.Writer(sw, session, id.Person)
	defer end()
	ctx, done := h.tools.Request(r.Context())
	ctx = mcptools.WithCaller(ctx, mcptools.Caller{
		ClientName: id.ClientName, ClientID: id.ClientID, Subject: id.Subject, Method: id.Method, Person: id.Person,
		Container: h.fleet.Container(id.Person), Label: clientLabel(id), Origin: h.auth.Origin(r), Remote: clientIP(r),
	})
	ctx = mcphttp.WithInitialize(ctx, body) // recorded in the session id minted for it
	h.mcp.Handle(out, &server.HTTPRequest{
		Method:  r.Method,
		URL:     r.URL,
		Header:  r.Header,
		Body:    body,
		Context: ctx,
	})
	done()
	// mcp-go answers 200 to a DELETE that ended the session; its tasks' results go too.
	if r.Method == http.MethodDelete && sw.Status() == http.StatusOK {
		h.tools.EndSession(r.Header.Get(server.HeaderKeySessionID))
	}
}

// allowOrigin guards against cross-site browser requests and DNS rebinding; see
// originAllowed for the rule. Requests without Origin (every non-browser client) pass:
// they still need a bearer token, which browsers never attach on their own. Allowed
// browser origins get CORS headers.
func (h *Handler) allowOrigin(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if !oauth.OriginAllowed(origin, h.publicOrigin, h.allowedOrigins) {
		msg := "origin " + origin + " may not call this MCP server; add it to allowed_origins if it is a client you trust"
		if h.publicOrigin == "" {
			msg += ", or set public_url if it is this site's own origin"
		}
		mcphttp.WriteError(w, http.StatusForbidden, mcp.INVALID_REQUEST, msg)
		return false
	}
	hd := w.Header()
	hd.Set("Access-Control-Allow-Origin", origin)
	hd.Add("Vary", "Origin")
	hd.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
	hd.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Accept, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID")
	hd.Set("Access-Control-Expose-Headers", "Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate")
	hd.Set("Access-Control-Max-Age", "600")
	return true
}
