package mcphttp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"github.com/mark3labs/mcp-go/server"
)

// SessionIDs mints MCP session ids bound to the person who opened the session: an id
// carries a MAC of its person under a key derived from the api_key, so the binding
// holds across reloads and restarts with nothing stored. Another person's request
// with it is answered as for an unknown session.
type SessionIDs struct {
	key      []byte
	personOf func(context.Context) string
}

// NewSessionIDs makes the ids of a site with apiKey; personOf names the person of a
// request from its context ("" the operator).
func NewSessionIDs(apiKey string, personOf func(context.Context) string) SessionIDs {
	// The construction is fixed: ids handed out before an upgrade must keep belonging.
	sum := sha256.Sum256([]byte("mcp_sandbox session ids\x00" + apiKey))
	return SessionIDs{key: sum[:], personOf: personOf}
}

// sessionPrefix starts every id, as mcp-go's own do.
const sessionPrefix = "mcp-session-"

// Mint makes a new session id for person ("" the operator).
func (s SessionIDs) Mint(person string) string {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	n := hex.EncodeToString(nonce[:])
	return sessionPrefix + n + "-" + s.mac(n, person)
}

// Belongs reports whether id was minted for person.
func (s SessionIDs) Belongs(id, person string) bool {
	rest, ok := strings.CutPrefix(id, sessionPrefix)
	n, mac, ok2 := strings.Cut(rest, "-")
	if !ok || !ok2 || len(n) != 32 {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(s.mac(n, person)))
}

func (s SessionIDs) mac(nonce, person string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(nonce + "\x00" + person))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// Admit reports whether r may go on as person's: a session id is its person's, so any
// other request with it (a GET stream, a DELETE, a call) is answered as mcp-go answers
// an unknown session, and reaches nothing.
func (s SessionIDs) Admit(w http.ResponseWriter, r *http.Request, person string) bool {
	if sid := r.Header.Get(server.HeaderKeySessionID); sid != "" && !s.Belongs(sid, person) {
		http.Error(w, "Invalid session ID", http.StatusNotFound)
		return false
	}
	return true
}

// ResolveSessionIdManager gives mcp-go the ids of the request's person. Without a
// request (mcp-go's idle-session sweeper) only Terminate is asked, and allowed.
func (s SessionIDs) ResolveSessionIdManager(r *http.Request) server.SessionIdManager {
	if r == nil {
		return personSessions{s: s, any: true}
	}
	return personSessions{s: s, person: s.personOf(r.Context())}
}

// personSessions are the session ids of one person.
type personSessions struct {
	s      SessionIDs
	person string
	any    bool // not asked for a request
}

var errOtherSession = errors.New("unknown session id")

func (p personSessions) Generate() string { return p.s.Mint(p.person) }

func (p personSessions) Validate(id string) (bool, error) {
	if !p.any && !p.s.Belongs(id, p.person) {
		return false, errOtherSession
	}
	return false, nil
}

func (p personSessions) Terminate(id string) (bool, error) {
	if !p.any && !p.s.Belongs(id, p.person) {
		return false, errOtherSession
	}
	return false, nil
}
