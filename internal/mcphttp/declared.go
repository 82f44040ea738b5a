package mcphttp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Declared is what a client declared at initialize that the server acts on later in
// the session: the protocol version agreed on, the capabilities the tools read
// (elicitation for egress questions, the apps extension) and the client's name. It
// rides in the session id, under the id's MAC, so that an instance that did not answer
// the initialize knows it from the id alone: no storage read per request, nothing to
// expire, and nothing a client can change without the id no longer belonging to it.
type Declared struct {
	Version    string   `json:"v,omitempty"`
	Caps       string   `json:"c,omitempty"` // capLetters, in their order
	Extensions []string `json:"x,omitempty"` // the names only
	Name       string   `json:"n,omitempty"` // clientInfo.name, clipped
}

// The letters of Declared.Caps, each a capability the client declared.
const (
	capElicitation = 'E' // elicitation, in any mode
	capForm        = 'f' // elicitation.form
	capURL         = 'u' // elicitation.url
	capSampling    = 'S'
	capRoots       = 'R'
	capRootsList   = 'l' // roots.listChanged
	capLetters     = "EfuSRl"
)

// Bounds of what a session id carries: it travels with every request of the session.
const (
	maxNameLen      = 64
	maxExtensions   = 4
	maxExtensionLen = 64
	maxRecordLen    = 512 // the encoded record
)

// extensionName is an extension's name as the id carries it.
var extensionName = regexp.MustCompile(`^[A-Za-z0-9._/-]{1,64}$`)

// declaredOf is the record of an initialize request's params.
func declaredOf(p mcp.InitializeParams) Declared {
	d := Declared{Version: mcp.NegotiateLegacyVersion(p.ProtocolVersion), Name: clip(p.ClientInfo.Name, maxNameLen)}
	c := p.Capabilities
	var caps []byte
	if e := c.Elicitation; e != nil {
		caps = append(caps, capElicitation)
		if e.Form != nil {
			caps = append(caps, capForm)
		}
		if e.URL != nil {
			caps = append(caps, capURL)
		}
	}
	if c.Sampling != nil {
		caps = append(caps, capSampling)
	}
	if c.Roots != nil {
		caps = append(caps, capRoots)
		if c.Roots.ListChanged {
			caps = append(caps, capRootsList)
		}
	}
	d.Caps = string(caps)
	for name := range c.Extensions {
		if extensionName.MatchString(name) {
			d.Extensions = append(d.Extensions, name)
		}
	}
	slices.Sort(d.Extensions)
	if len(d.Extensions) > maxExtensions {
		d.Extensions = d.Extensions[:maxExtensions]
	}
	return d
}

// Capabilities are the client capabilities d records; an extension's settings are not
// kept, only that it was declared.
func (d Declared) Capabilities() mcp.ClientCapabilities {
	var c mcp.ClientCapabilities
	has := func(letter byte) bool { return strings.IndexByte(d.Caps, letter) >= 0 }
	if has(capElicitation) {
		c.Elicitation = &mcp.ElicitationCapability{}
		if has(capForm) {
			c.Elicitation.Form = &struct{}{}
		}
		if has(capURL) {
			c.Elicitation.URL = &struct{}{}
		}
	}
	if has(capSampling) {
		c.Sampling = &mcp.SamplingCapability{}
	}
	if has(capRoots) {
		c.Roots = &struct {
			ListChanged bool `json:"listChanged,omitempty"`
		}{ListChanged: has(capRootsList)}
	}
	for _, x := range d.Extensions {
		if c.Extensions == nil {
			c.Extensions = map[string]any{}
		}
		c.Extensions[x] = map[string]any{}
	}
	return c
}

// encode is d as the id carries it, base64url of its JSON; "" when it would be too
// long (the session then works as before on the instance that answered initialize).
func (d Declared) encode() string {
	b, _ := json.Marshal(d)
	s := base64.RawURLEncoding.EncodeToString(b)
	if len(s) > maxRecordLen {
		return ""
	}
	return s
}

// decodeDeclared reads a record made by encode, strictly.
func decodeDeclared(s string) (Declared, bool) {
	var d Declared
	if len(s) > maxRecordLen {
		return d, false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &d) != nil || !mcp.IsValidProtocolVersion(d.Version) ||
		strings.Trim(d.Caps, capLetters) != "" || len(d.Name) > maxNameLen || len(d.Extensions) > maxExtensions {
		return Declared{}, false
	}
	for _, x := range d.Extensions {
		if !extensionName.MatchString(x) {
			return Declared{}, false
		}
	}
	return d, true
}

// clip cuts s to at most n bytes, on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// declaredKey carries the record of an initialize request to the session id minted
// for it (SessionIDs.ResolveSessionIdManager).
type declaredKey struct{}

// WithInitialize returns ctx carrying what body, a POSTed JSON-RPC message, declares
// when it is an initialize request; ctx itself otherwise. mcp-go mints the session id
// before it reads the message, so the record must come this way.
func WithInitialize(ctx context.Context, body []byte) context.Context {
	var msg struct {
		Method string               `json:"method"`
		Params mcp.InitializeParams `json:"params"`
	}
	if len(body) == 0 || body[0] != '{' || !bytes.Contains(body, []byte(`"initialize"`)) ||
		json.Unmarshal(body, &msg) != nil || msg.Method != string(mcp.MethodInitialize) {
		return ctx
	}
	return context.WithValue(ctx, declaredKey{}, declaredOf(msg.Params))
}

// sessionInfo is what RestoreDeclared sets on mcp-go's session of a request.
type sessionInfo interface {
	server.SessionWithClientInfo
	ProtocolVersion() string
	SetProtocolVersion(string)
}

// RestoreDeclared is an mcp-go HTTP context function: on a request whose session was
// initialized on another instance (or before a restart), mcp-go's session here knows
// nothing of the client; it gets what the session id records. A session initialized
// here is left as it is.
func (s SessionIDs) RestoreDeclared(ctx context.Context, _ *http.Request) context.Context {
	session, ok := server.ClientSessionFromContext(ctx).(sessionInfo)
	if !ok || session.ProtocolVersion() != "" {
		return ctx
	}
	d, ok := s.Declared(session.SessionID(), s.personOf(ctx))
	if !ok {
		return ctx
	}
	session.SetClientCapabilities(d.Capabilities())
	session.SetClientInfo(mcp.Implementation{Name: d.Name})
	session.SetProtocolVersion(d.Version)
	return ctx
}
