package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
)

// Session lifetime and cookie names. Browsers refuse __Host- cookies without Secure,
// and Secure cookies over plain http, so a console reached over http (localhost
// development, tests) uses the name without the prefix and without Secure.
const (
	sessionTTL       = 12 * time.Hour
	cookieHTTPS      = "__Host-mcp-console"
	cookieHTTP       = "mcp-console"
	maxSignedOut     = 10000
	csrfField        = "csrf"
	csrfHeader       = "X-CSRF-Token"
	sessionPayloadSz = 8 + 16
)

// session is a signed-in browser.
type session struct {
	payload []byte // expiry (8 bytes, unix seconds) and nonce (16 bytes)
	expires time.Time
	csrf    string
}

// sessions makes and checks session cookies. They are stateless (an HMAC with a key
// derived from the API key) except for the signed-out sessions, kept until they would
// have expired: in memory, and, with a storage, under <prefix>/signed_out/, so that a
// restart and every instance sharing the storage honour a sign-out (another instance
// within signOutFresh).
type sessions struct {
	key     []byte
	now     func() time.Time
	storage certmagic.Storage // nil: sign-outs are kept in memory only
	prefix  string

	mu        sync.Mutex
	signedOut map[string]time.Time
	checked   recheck // when a session's sign-out was last looked up in storage
}

// signOutFresh is how long a session's lookup in storage serves.
const signOutFresh = 2 * time.Second

func newSessions(key []byte, now func() time.Time, storage certmagic.Storage, prefix string) *sessions {
	return &sessions{key: key, now: now, storage: storage, prefix: path.Join(prefix, "signed_out"),
		signedOut: make(map[string]time.Time), checked: recheck{every: signOutFresh, max: maxSignedOut}}
}

// signOutKey is where a session's sign-out is stored: a hash of its payload, which
// the cookie's holder alone knows.
func (s *sessions) signOutKey(payload []byte) string {
	h := sha256.Sum256(payload)
	return path.Join(s.prefix, hex.EncodeToString(h[:16]))
}

// storedOut looks the session up among the sign-outs in storage, at most every
// signOutFresh; storage failing, it is not signed out there.
func (s *sessions) storedOut(sess *session) bool {
	if s.storage == nil {
		return false
	}
	if !s.checked.due(string(sess.payload), s.now()) {
		return false
	}
	if _, err := s.storage.Load(context.Background(), s.signOutKey(sess.payload)); err != nil {
		return false
	}
	s.remember(sess)
	return true
}

func (s *sessions) mac(purpose string, payload []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write(payload)
	return m.Sum(nil)
}

// create returns a new session's cookie value.
func (s *sessions) create() (string, *session) {
	payload := make([]byte, sessionPayloadSz)
	exp := s.now().Add(sessionTTL)
	binary.BigEndian.PutUint64(payload, uint64(exp.Unix()))
	_, _ = rand.Read(payload[8:])
	value := base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(s.mac("session", payload))
	return value, s.session(payload)
}

func (s *sessions) session(payload []byte) *session {
	exp := time.Unix(int64(binary.BigEndian.Uint64(payload)), 0)
	return &session{payload: payload, expires: exp, csrf: base64.RawURLEncoding.EncodeToString(s.mac("csrf", payload))}
}

// fromRequest checks the session cookie.
func (s *sessions) fromRequest(r *http.Request, name string) (*session, bool) {
	ck, err := r.Cookie(name)
	if err != nil {
		return nil, false
	}
	p64, m64, ok := strings.Cut(ck.Value, ".")
	if !ok {
		return nil, false
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p64)
	mac, err2 := base64.RawURLEncoding.DecodeString(m64)
	if err1 != nil || err2 != nil || len(payload) != sessionPayloadSz || !hmac.Equal(mac, s.mac("session", payload)) {
		return nil, false
	}
	sess := s.session(payload)
	if !s.now().Before(sess.expires) {
		return nil, false
	}
	s.mu.Lock()
	_, out := s.signedOut[string(payload)]
	s.mu.Unlock()
	if out || s.storedOut(sess) {
		return nil, false
	}
	return sess, true
}

// end makes a session invalid before its expiry, here at once and, through the
// storage, everywhere; the error is the storage's.
func (s *sessions) end(ctx context.Context, sess *session) error {
	s.remember(sess)
	if s.storage == nil {
		return nil
	}
	s.sweep(ctx)
	exp := strconv.FormatInt(sess.expires.Unix(), 10)
	return s.storage.Store(ctx, s.signOutKey(sess.payload), []byte(exp))
}

// remember keeps a sign-out in memory.
func (s *sessions) remember(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.signedOut) >= maxSignedOut {
		for k, exp := range s.signedOut {
			if !now.Before(exp) {
				delete(s.signedOut, k)
			}
		}
	}
	s.signedOut[string(sess.payload)] = sess.expires
}

// sweep deletes the stored sign-outs of sessions that have expired anyway.
func (s *sessions) sweep(ctx context.Context) {
	keys, err := s.storage.List(ctx, s.prefix, false)
	if err != nil {
		return
	}
	now := s.now()
	for _, k := range keys {
		b, err := s.storage.Load(ctx, k)
		if err != nil {
			continue
		}
		if exp, err := strconv.ParseInt(string(b), 10, 64); err != nil || !now.Before(time.Unix(exp, 0)) {
			_ = s.storage.Delete(ctx, k)
		}
	}
}

// checkCSRF compares a submitted token with the session's, in constant time.
func (sess *session) checkCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(sess.csrf)) == 1
}

func (c *Console) secure(r *http.Request) bool {
	return strings.HasPrefix(c.opts.Origin(r), "https://")
}

func (c *Console) cookieName(r *http.Request) string {
	if c.secure(r) {
		return cookieHTTPS
	}
	return cookieHTTP
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: c.cookieName(r), Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteStrictMode,
	})
}

// checkPost refuses a form post without the session's CSRF token or from another site.
func (c *Console) checkPost(w http.ResponseWriter, r *http.Request, sess *session) bool {
	if !c.sameOrigin(r) {
		c.record(r, "console", "console.refused", r.URL.Path, audit.OutcomeDenied, "cross-site request", c.opts.Now())
		c.renderMessage(w, http.StatusForbidden, "Refused", "This request came from another site.")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	token := r.PostFormValue(csrfField)
	if token == "" {
		token = r.Header.Get(csrfHeader)
	}
	if !sess.checkCSRF(token) {
		c.record(r, "console", "console.refused", r.URL.Path, audit.OutcomeDenied, "missing or wrong CSRF token", c.opts.Now())
		c.renderMessage(w, http.StatusForbidden, "Refused", "This form expired or did not come from the console. Go back, reload the page and try again.")
		return false
	}
	return true
}

// serveSignIn shows the sign-in form and checks the key typed into it.
func (c *Console) serveSignIn(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if _, ok := c.sessions.fromRequest(r, c.cookieName(r)); ok {
			http.Redirect(w, r, Prefix, http.StatusSeeOther)
			return
		}
		c.renderSignIn(w, http.StatusOK, "")
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	start := c.opts.Now()
	if !c.sameOrigin(r) {
		c.renderMessage(w, http.StatusForbidden, "Refused", "This sign-in came from another site.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	ok, retry, err := c.opts.Keys.CheckAPIKey(r, r.PostFormValue("api_key"))
	switch {
	case retry > 0:
		secs := int(retry/time.Second) + 1
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		c.record(r, "console", "console.sign_in", "", audit.OutcomeDenied, "too many wrong keys", start)
		c.renderSignIn(w, http.StatusTooManyRequests, "Too many wrong keys were tried from your address. Try the API key again in "+roundUp(retry)+".")
		return
	case err != nil:
		c.record(r, "console", "console.sign_in", "", audit.OutcomeDenied, err.Error(), start)
		msg := err.Error()
		c.renderSignIn(w, http.StatusForbidden, strings.ToUpper(msg[:1])+msg[1:]+". The console takes the api_key of the Caddyfile.")
		return
	case !ok:
		c.record(r, "console", "console.sign_in", "", audit.OutcomeDenied, "wrong API key", start)
		c.renderSignIn(w, http.StatusForbidden, "That API key is not correct.")
		return
	}
	value, _ := c.sessions.create()
	c.setCookie(w, r, value, int(sessionTTL/time.Second))
	c.record(r, "console", "console.sign_in", "", audit.OutcomeOK, "", start)
	http.Redirect(w, r, Prefix+"?done=signed_in", http.StatusSeeOther)
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request, sess *session) {
	if err := c.sessions.end(r.Context(), sess); err != nil {
		c.log.Warn("the sign-out is not stored: other instances sharing the storage, and this one after a restart, accept the session until it expires",
			zap.Error(err))
	}
	c.setCookie(w, r, "", -1)
	c.record(r, "console", "console.sign_out", "", audit.OutcomeOK, "", c.opts.Now())
	http.Redirect(w, r, Prefix+"/signin", http.StatusSeeOther)
}

func roundUp(d time.Duration) string {
	if d <= time.Minute {
		return strconv.Itoa(int(d/time.Second)+1) + " seconds"
	}
	return strconv.Itoa(int(d/time.Minute)+1) + " minutes"
}
