package mcpsandbox

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/oauth"
)

// maxRequestBody bounds one MCP message; a command line is far smaller.
const maxRequestBody = 4 << 20

// Version is reported to MCP clients in serverInfo.
var Version = "0.1.0"

// newMCPServer builds the MCP server with the sandbox tools for this handler.
func (h *Handler) newMCPServer() *server.StreamableHTTPServer {
	h.tools = mcptools.New(h.toolOptions())
	h.sessionIDs = newSessionIDs(h.APIKey)
	return server.NewStreamableHTTPServer(h.tools.MCPServer(), server.WithEndpointPath(mcpPath),
		server.WithSessionIdManagerResolver(h.sessionIDs))
}

// sessionIDs mints MCP session ids bound to the person who opened the session: an id
// carries a MAC of its person under a key derived from the api_key, so the binding
// holds across reloads and restarts with nothing stored. Another person's request
// with it is answered as for an unknown session.
type sessionIDs struct{ key []byte }

func newSessionIDs(apiKey string) sessionIDs {
	sum := sha256.Sum256([]byte("mcp_sandbox session ids\x00" + apiKey))
	return sessionIDs{key: sum[:]}
}

// sessionPrefix starts every id, as mcp-go's own do.
const sessionPrefix = "mcp-session-"

// mint makes a new session id for person ("" the operator).
func (s sessionIDs) mint(person string) string {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	n := hex.EncodeToString(nonce[:])
	return sessionPrefix + n + "-" + s.mac(n, person)
}

// belongs reports whether id was minted for person.
func (s sessionIDs) belongs(id, person string) bool {
	rest, ok := strings.CutPrefix(id, sessionPrefix)
	n, mac, ok2 := strings.Cut(rest, "-")
	if !ok || !ok2 || len(n) != 32 {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(s.mac(n, person)))
}

func (s sessionIDs) mac(nonce, person string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(nonce + "\x00" + person))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// ResolveSessionIdManager gives mcp-go the ids of the request's person. Without a
// request (mcp-go's idle-session sweeper) only Terminate is asked, and allowed.
func (s sessionIDs) ResolveSessionIdManager(r *http.Request) server.SessionIdManager {
	if r == nil {
		return personSessions{s: s, any: true}
	}
	return personSessions{s: s, person: mcptools.CallerFrom(r.Context()).Person}
}

// personSessions are the session ids of one person.
type personSessions struct {
	s      sessionIDs
	person string
	any    bool // not asked for a request
}

var errOtherSession = errors.New("unknown session id")

func (p personSessions) Generate() string { return p.s.mint(p.person) }

func (p personSessions) Validate(id string) (bool, error) {
	if !p.any && !p.s.belongs(id, p.person) {
		return false, errOtherSession
	}
	return false, nil
}

func (p personSessions) Terminate(id string) (bool, error) {
	if !p.any && !p.s.belongs(id, p.person) {
		return false, errOtherSession
	}
	return false, nil
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
	// A session id is its person's: any other request with it (a GET stream, a DELETE,
	// a call) is answered as mcp-go answers an unknown session, and reaches nothing.
	if sid := r.Header.Get(server.HeaderKeySessionID); sid != "" && !h.sessionIDs.belongs(sid, id.Person) {
		http.Error(w, "Invalid session ID", http.StatusNotFound)
		return
	}
	var body []byte
	if r.Method == http.MethodPost {
		var err error
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
		if err != nil {
			status := http.StatusBadRequest
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				status = http.StatusRequestEntityTooLarge
			}
			writeJSONRPCError(w, status, mcp.INVALID_REQUEST, "reading request body: "+err.Error())
			return
		}
	}
	sw := newStreamWriter(w, time.Duration(h.Keepalive))
	if r.Method == http.MethodPost || r.Method == http.MethodGet {
		sw.startKeepalive()
	}
	defer sw.finish()
	ctx, done := h.tools.Request(r.Context())
	ctx = mcptools.WithCaller(ctx, mcptools.Caller{
		ClientName: id.ClientName, ClientID: id.ClientID, Subject: id.Subject, Method: id.Method, Person: id.Person,
		Container: h.containerOf(id.Person), Label: clientLabel(id), Origin: h.auth.Origin(r), Remote: clientIP(r),
	})
	h.mcp.Handle(sw, &server.HTTPRequest{
		Method:  r.Method,
		URL:     r.URL,
		Header:  r.Header,
		Body:    body,
		Context: ctx,
	})
	done()
	// mcp-go answers 200 to a DELETE that ended the session; its tasks' results go too.
	if r.Method == http.MethodDelete && sw.status() == http.StatusOK {
		h.tools.EndSession(r.Header.Get(server.HeaderKeySessionID))
	}
}

func writeJSONRPCError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0",
		"id":      nil,
		"error":   map[string]any{"code": code, "message": msg},
	})
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
		writeJSONRPCError(w, http.StatusForbidden, mcp.INVALID_REQUEST, msg)
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
