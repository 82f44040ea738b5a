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
// holds across reloads and restarts, and on every instance of a site, with nothing
// stored. Another person's request with it is answered as for an unknown session. An
// id also records what the client declared at initialize ([Declared]).
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

// Mint makes a new session id for person ("" the operator) that records d, what the
// client declared at initialize (a Declared without a version: nothing).
//
// An id is "mcp-session-" nonce ["." record] "-" MAC, the MAC over nonce and record
// together: ids minted before records existed (nonce alone) keep belonging.
func (s SessionIDs) Mint(person string, d Declared) string {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	n := hex.EncodeToString(nonce[:])
	if rec := d.encode(); d.Version != "" && rec != "" {
		n += "." + rec
	}
	return sessionPrefix + n + "-" + s.mac(n, person)
}

// Belongs reports whether id was minted for person.
func (s SessionIDs) Belongs(id, person string) bool {
	_, ok := s.open(id, person)
	return ok
}

// Declared is what the client of session id, minted for person, declared at
// initialize; ok is false when id is not person's or records nothing.
func (s SessionIDs) Declared(id, person string) (d Declared, ok bool) {
	n, ok := s.open(id, person)
	_, rec, hasRec := strings.Cut(n, ".")
	if !ok || !hasRec {
		return Declared{}, false
	}
	return decodeDeclared(rec)
}

// open checks id's MAC for person and returns the part it covers.
func (s SessionIDs) open(id, person string) (string, bool) {
	rest, ok := strings.CutPrefix(id, sessionPrefix)
	i := strings.LastIndexByte(rest, '-')
	if !ok || i < 0 || len(rest) > 32+1+maxRecordLen+1+32 {
		return "", false
	}
	n, mac := rest[:i], rest[i+1:]
	if nonce, _, _ := strings.Cut(n, "."); len(nonce) != 32 {
		return "", false
	}
	return n, hmac.Equal([]byte(mac), []byte(s.mac(n, person)))
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
	d, _ := r.Context().Value(declaredKey{}).(Declared)
	return personSessions{s: s, person: s.personOf(r.Context()), declared: d}
}

// personSessions are the session ids of one person.
type personSessions struct {
	s        SessionIDs
	person   string
	declared Declared // what an initialize request declares (WithInitialize)
	any      bool     // not asked for a request
}

var errOtherSession = errors.New("unknown session id")

func (p personSessions) Generate() string { return p.s.Mint(p.person, p.declared) }

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
