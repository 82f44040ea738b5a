package oauth

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/origin"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/secret"
	"go.uber.org/zap"
)

// Defaults applied by [New] to zero fields of [Options].
const (
	DefaultStoragePrefix   = "mcp_sandbox/oauth"
	DefaultResourcePath    = "/mcp"
	DefaultAccessTokenTTL  = time.Hour
	DefaultRefreshTokenTTL = 30 * 24 * time.Hour
	// DefaultCodeTTL is five minutes: long enough for a desktop app whose operating system
	// first asks "open this link with ...?", short enough that a leaked code is soon
	// worthless (codes are also PKCE-bound and single use).
	DefaultCodeTTL = 5 * time.Minute
)

// Scope is the single scope this server grants: full use of the sandbox. Requests for
// other scopes are not refused (clients send things like "openid" or "offline_access");
// the granted scope is always this one and the token response says so.
const Scope = "sandbox"

// Endpoint paths. They sit at the root of the origin because some clients use them
// regardless of what the metadata says.
const (
	pathPRM       = "/.well-known/oauth-protected-resource"
	pathASM       = "/.well-known/oauth-authorization-server"
	pathRegister  = "/register"
	pathAuthorize = "/authorize"
	pathToken     = "/token"
	pathRevoke    = "/revoke"
)

// Options configures a [Server]. Zero values mean the documented defaults.
type Options struct {
	// APIKey is the operator's secret, typed on the sign-in page. Required.
	APIKey string
	// People maps each person's name to the key they sign in with, on the sign-in page
	// and (with APIKeyBearer) as a bearer token. Their identities carry the name.
	People map[string]string
	// Storage keeps clients, codes, grants and tokens. Required.
	Storage certmagic.Storage
	// StoragePrefix is where state lives in Storage (default "mcp_sandbox/oauth"). The
	// server appends a fingerprint of the API key, so changing the key invalidates every
	// client and token at once without deleting anything.
	StoragePrefix string
	// PublicURL is a fixed origin "https://host[:port]" (no path). Empty means the origin
	// is derived from each request: "https" if r.TLS != nil else "http", "://", r.Host.
	PublicURL string
	// ResourcePath is the path of the protected MCP endpoint (default "/mcp").
	ResourcePath string
	// APIKeyBearer makes [Server.Authenticate] accept the API key itself as a bearer token.
	APIKeyBearer bool
	// AllowPrivateClientMetadataURLs lets client ID metadata document URLs resolve to
	// loopback and private addresses, and use plain http on loopback hosts. Development
	// only: on a public server it would let anyone make the server fetch internal URLs.
	AllowPrivateClientMetadataURLs bool
	// AccessTokenTTL is the lifetime of access tokens (default 1h).
	AccessTokenTTL time.Duration
	// RefreshTokenTTL is the lifetime of a refresh token; every refresh issues a new one,
	// so a sign-in used at least this often never expires (default 30 days).
	RefreshTokenTTL time.Duration
	// CodeTTL is the lifetime of authorization codes (default 5 minutes).
	CodeTTL time.Duration
	// Logger receives operational logs; never secrets. Nil means no logging.
	Logger *zap.Logger
	// HTTPClient fetches client ID metadata documents. Nil means a hardened client: 5 s
	// timeout, no redirects, no proxy, and a dialer that refuses private addresses. A
	// client given here still gets no redirects and at most 5 s, but its transport must
	// do its own address filtering (IP literals and "localhost" are refused before any
	// fetch either way).
	HTTPClient *http.Client
	// Now returns the current time (default time.Now); tests move it.
	Now func() time.Time
	// ClientIP returns the address sign-in failures are counted against. Nil, or an
	// empty answer, means the host of r.RemoteAddr; behind a trusted proxy pass the real
	// client address.
	ClientIP func(r *http.Request) string
	// Guesses counts wrong API keys and unknown bearer tokens per address. Nil means a
	// [GuessLimiter] of this Server's own; pass one value to every server and sign-in
	// page of the same key, and keep it across reloads, so that guesses count wherever
	// they are made.
	Guesses Guesses
	// KeyHistory remembers the keys this server accepts, so that a key removed from
	// the configuration is answered as retired, and not counted as a guess, for
	// RetiredKeyTTL. Nil: every wrong key is a guess. Share one per storage across
	// servers and reloads.
	KeyHistory *KeyHistory
}

// Server is the authorization server and bearer-token check. It is safe for concurrent
// use. Create it with [New].
type Server struct {
	opts      Options
	log       *zap.Logger
	store     *store
	keyHash   [32]byte // sha256 of the API key, for constant-time comparison
	people    people   // the keys of Options.People
	formKey   []byte   // HMAC key that binds the sign-in form to its request
	publicURL string   // normalised Options.PublicURL, "" when derived per request

	httpClient  *http.Client
	cimd        *metadataCache
	cimdMu      sync.Mutex
	cimdFlights map[string]*metadataFlight // fetches running, by client_id
	cimdSlots   chan struct{}              // one token per running fetch, maxMetadataFetches

	tokens *tokenCache

	accessKey       []byte // HMAC key that marks access tokens as issued here (see newAccessToken)
	guesses         Guesses
	notedKeys       atomic.Int64 // Unix nanoseconds when the keys were last given to KeyHistory
	registerLimiter *limiter
	// sleep waits before answering a wrong key; tests replace it to observe the delay.
	sleep func(r *http.Request, d time.Duration)

	clientCountMu sync.Mutex
	clientCount   int       // registered clients, -1 until counted once
	capPrunedAt   time.Time // last look for room at the cap
	maxClients    int       // MaxClients; tests lower it
}

// New validates opts and returns a Server. It does no network or storage I/O, so it is
// safe to call while a configuration is only being validated.
func New(opts Options) (*Server, error) {
	if opts.APIKey == "" {
		return nil, errors.New("oauth: an API key is required")
	}
	if opts.Storage == nil {
		return nil, errors.New("oauth: a storage is required")
	}
	if opts.StoragePrefix == "" {
		opts.StoragePrefix = DefaultStoragePrefix
	}
	opts.StoragePrefix = strings.Trim(path.Clean("/"+opts.StoragePrefix), "/")
	if opts.StoragePrefix == "" {
		return nil, errors.New("oauth: the storage prefix must not be the storage root")
	}
	if opts.ResourcePath == "" {
		opts.ResourcePath = DefaultResourcePath
	}
	if !strings.HasPrefix(opts.ResourcePath, "/") || opts.ResourcePath == "/" ||
		path.Clean(opts.ResourcePath) != opts.ResourcePath || strings.ContainsAny(opts.ResourcePath, "?#") {
		return nil, fmt.Errorf("oauth: resource path %q must be a clean absolute path other than /", opts.ResourcePath)
	}
	var publicURL string
	if opts.PublicURL != "" {
		var err error
		if publicURL, err = origin.Parse(opts.PublicURL); err != nil {
			return nil, fmt.Errorf("oauth: public URL: %w", err)
		}
	}
	if opts.AccessTokenTTL < 0 || opts.RefreshTokenTTL < 0 || opts.CodeTTL < 0 {
		return nil, errors.New("oauth: lifetimes must not be negative")
	}
	if opts.AccessTokenTTL == 0 {
		opts.AccessTokenTTL = DefaultAccessTokenTTL
	}
	if opts.RefreshTokenTTL == 0 {
		opts.RefreshTokenTTL = DefaultRefreshTokenTTL
	}
	if opts.CodeTTL == 0 {
		opts.CodeTTL = DefaultCodeTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if ip := opts.ClientIP; ip == nil {
		opts.ClientIP = RemoteHost
	} else {
		opts.ClientIP = func(r *http.Request) string {
			if a := ip(r); a != "" {
				return a
			}
			return RemoteHost(r)
		}
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	httpClient := newMetadataClient(opts.AllowPrivateClientMetadataURLs)
	if opts.HTTPClient != nil {
		// A copy, so that the document must live at the client_id itself whatever the
		// given client does with redirects, and the fetch stays bounded in time.
		c := *opts.HTTPClient
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		if c.Timeout == 0 || c.Timeout > metadataFetchTimeout {
			c.Timeout = metadataFetchTimeout
		}
		httpClient = &c
	}

	ppl, err := newPeople(opts.APIKey, opts.People)
	if err != nil {
		return nil, err
	}
	guesses := opts.Guesses
	if guesses == nil {
		guesses = NewGuessLimiter(opts.Now)
	}
	s := &Server{
		opts:            opts,
		log:             log,
		keyHash:         sha256.Sum256([]byte(opts.APIKey)),
		people:          ppl,
		formKey:         secret.DeriveKey(opts.APIKey, "oauth sign-in form v1"),
		publicURL:       publicURL,
		httpClient:      httpClient,
		cimd:            newMetadataCache(maxCachedMetadataDocuments),
		cimdFlights:     make(map[string]*metadataFlight),
		cimdSlots:       make(chan struct{}, maxMetadataFetches),
		tokens:          newTokenCache(maxCachedTokens),
		accessKey:       secret.DeriveKey(opts.APIKey, "oauth access tokens v1"),
		guesses:         guesses,
		registerLimiter: newLimiter(registerWindow, registerMaxPerWindow, maxLimiterEntries, opts.Now),
		sleep:           sleepContext,
		clientCount:     -1,
		maxClients:      MaxClients,
	}
	s.store = &store{
		storage: opts.Storage,
		prefix:  opts.StoragePrefix + "/" + KeyFingerprint(opts.APIKey),
		log:     log,
	}
	return s, nil
}

// KeyFingerprint is the storage sub-prefix for an API key: the first 16 hex digits of
// sha256("mcp-sandbox oauth\x00"+key). It is not secret enough to help guess the key
// (64 bits of a hash of it), and it makes every token die with a key change.
func KeyFingerprint(apiKey string) string {
	sum := sha256.Sum256([]byte("mcp-sandbox oauth\x00" + apiKey))
	return hex.EncodeToString(sum[:])[:16]
}

// Origin returns the origin this server speaks for on r: the issuer, and the prefix of
// the resource URL. It is Options.PublicURL when set, else derived from the request.
func (s *Server) Origin(r *http.Request) string {
	if s.publicURL != "" {
		return s.publicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + strings.ToLower(r.Host)
}

// resourceURL is the URL of the protected resource, which tokens are bound to.
func (s *Server) resourceURL(r *http.Request) string {
	return s.Origin(r) + s.opts.ResourcePath
}

// Handles reports whether r is for one of the server's own endpoints:
//
//	/.well-known/oauth-protected-resource          RFC 9728 metadata
//	/.well-known/oauth-protected-resource<rp>      the same, path-suffixed (rp = ResourcePath)
//	/.well-known/oauth-authorization-server        RFC 8414 metadata
//	/.well-known/oauth-authorization-server<rp>    the same, for clients that derive the
//	                                               metadata URL from the resource URL
//	/register /authorize /token /revoke
//
// /.well-known/openid-configuration is deliberately not served: this is not an OpenID
// provider (no ID tokens, no JWKS), and claiming to be one would mislead OIDC clients.
func (s *Server) Handles(r *http.Request) bool {
	switch r.URL.Path {
	case pathPRM, pathPRM + s.opts.ResourcePath,
		pathASM, pathASM + s.opts.ResourcePath,
		pathRegister, pathAuthorize, pathToken, pathRevoke:
		return true
	}
	return false
}

// ServeHTTP serves the endpoints listed at [Server.Handles]; any other path gets 404.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.noteKeys()
	p := r.URL.Path
	switch p {
	case pathPRM, pathPRM + s.opts.ResourcePath:
		s.serveCORS(w, r, "GET", s.serveProtectedResourceMetadata)
	case pathASM, pathASM + s.opts.ResourcePath:
		s.serveCORS(w, r, "GET", s.serveAuthorizationServerMetadata)
	case pathRegister:
		s.serveCORS(w, r, "POST", s.serveRegister)
	case pathToken:
		s.serveCORS(w, r, "POST", s.serveToken)
	case pathRevoke:
		s.serveCORS(w, r, "POST", s.serveRevoke)
	case pathAuthorize:
		s.serveAuthorize(w, r)
	default:
		http.NotFound(w, r)
	}
}

// serveCORS lets browser-based clients (the MCP Inspector) call the endpoint: any origin,
// no credentials (tokens travel in headers and bodies, never cookies), preflight answered.
func (s *Server) serveCORS(w http.ResponseWriter, r *http.Request, method string, next http.HandlerFunc) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Expose-Headers", "WWW-Authenticate, Retry-After")
	if r.Method == http.MethodOptions {
		h.Set("Access-Control-Allow-Methods", method+", OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, MCP-Protocol-Version")
		h.Set("Access-Control-Max-Age", "86400")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != method && !(method == "GET" && r.Method == http.MethodHead) {
		h.Set("Allow", method+", OPTIONS")
		writeJSONError(w, http.StatusMethodNotAllowed, "invalid_request", "use "+method)
		return
	}
	next(w, r)
}

// writeJSON writes v with the status; OAuth responses are never cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if h.Get("Cache-Control") == "" {
		h.Set("Cache-Control", "no-store")
		h.Set("Pragma", "no-cache")
	}
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// oauthError is the error body of RFC 6749 section 5.2 and RFC 7591 section 3.2.2.
type oauthError struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

func writeJSONError(w http.ResponseWriter, status int, code, description string) {
	writeJSON(w, status, oauthError{Error: code, Description: description})
}

// noteKeys tells the key history, at most once a minute, that this server's keys are
// valid: a server records them only once it serves (never while a config is only
// validated).
func (s *Server) noteKeys() {
	if s.opts.KeyHistory == nil {
		return
	}
	now := s.opts.Now().UnixNano()
	last := s.notedKeys.Load()
	if now-last < int64(time.Minute) || !s.notedKeys.CompareAndSwap(last, now) {
		return
	}
	keys := make([]string, 0, 1+len(s.opts.People))
	keys = append(keys, s.opts.APIKey)
	for _, k := range s.opts.People {
		keys = append(keys, k)
	}
	s.opts.KeyHistory.Note(keys)
}

// retired reports whether key was one of this site's keys within RetiredKeyTTL and is
// no longer.
func (s *Server) retired(key string) bool {
	return s.opts.KeyHistory != nil && key != "" &&
		s.opts.KeyHistory.Retired(key, func() bool { _, ok := s.whoseKey(key); return ok })
}
