package oauth

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"
	"golang.org/x/net/idna"
)

// Limits on registrations, so nobody can fill the storage through /register.
const (
	maxRegistrationBody = 16 << 10
	maxRedirectURIs     = 10
	maxRedirectURILen   = 1024
	maxClientNameLen    = 200
	// MaxClients is the most dynamically registered clients kept at once. When it is
	// reached, registrations that never led to a sign-in and are older than an hour are
	// dropped (at most once every 10 minutes); if that frees nothing, registration is
	// refused until Prune frees room. Prune drops such registrations after 24 hours anyway.
	MaxClients = 10000
	// unusedClientTTL is how long a registration with no live grant is kept after its
	// registration or its last sign-in.
	unusedClientTTL = 30 * 24 * time.Hour
	// neverUsedClientTTL is how long Prune keeps a registration that never led to a
	// sign-in: a client registers right before sending the person to sign in.
	neverUsedClientTTL = 24 * time.Hour
	// capPruneEvery is how often a registration at the cap may look for room.
	capPruneEvery = 10 * time.Minute
	// abandonedClientAge is when a registration that never led to a sign-in may be
	// dropped to make room under MaxClients.
	abandonedClientAge = time.Hour
)

// registrationRequest is the part of RFC 7591 client metadata we act on; other fields
// are accepted and ignored.
type registrationRequest struct {
	RedirectURIs            []string `json:"redirect_uris"`
	TokenEndpointAuthMethod *string  `json:"token_endpoint_auth_method"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	ClientName              string   `json:"client_name"`
	Scope                   string   `json:"scope"`
}

// registrationResponse is the RFC 7591 section 3.2.1 answer.
type registrationResponse struct {
	ClientID                string   `json:"client_id"`
	ClientSecret            string   `json:"client_secret,omitempty"`
	ClientIDIssuedAt        int64    `json:"client_id_issued_at"`
	ClientSecretExpiresAt   *int64   `json:"client_secret_expires_at,omitempty"`
	RedirectURIs            []string `json:"redirect_uris"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	ClientName              string   `json:"client_name,omitempty"`
	Scope                   string   `json:"scope"`
}

// registrationError is an RFC 7591 error; status is the HTTP status to answer with.
type registrationError struct {
	status int
	code   string
	desc   string
}

func (e *registrationError) Error() string { return e.code + ": " + e.desc }

func metadataError(format string, args ...any) *registrationError {
	return &registrationError{http.StatusBadRequest, "invalid_client_metadata", fmt.Sprintf(format, args...)}
}

func redirectError(format string, args ...any) *registrationError {
	return &registrationError{http.StatusBadRequest, "invalid_redirect_uri", fmt.Sprintf(format, args...)}
}

func (s *Server) serveRegister(w http.ResponseWriter, r *http.Request) {
	if _, retry := s.registerLimiter.record(s.clientKey(r)); retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(retry.Seconds())+1))
		writeJSONError(w, http.StatusTooManyRequests, "slow_down", "too many registrations from this address; try again later")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRegistrationBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSONError(w, http.StatusRequestEntityTooLarge, "invalid_client_metadata",
				fmt.Sprintf("registration requests are limited to %d bytes", maxRegistrationBody))
			return
		}
		writeJSONError(w, http.StatusBadRequest, "invalid_client_metadata", "reading the request failed")
		return
	}
	var req registrationRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSONError(w, http.StatusBadRequest, "invalid_client_metadata", "the body must be a JSON object of client metadata")
		return
	}
	client, regErr := newClientRecord(req, s.opts.Now())
	if regErr != nil {
		writeJSONError(w, regErr.status, regErr.code, regErr.desc)
		return
	}
	var secret string
	if client.AuthMethod != "none" {
		secret = randomToken()
		client.SecretHash = hashSecret(secret)
	}

	if err := s.reserveClientSlot(r.Context()); err != nil {
		var regErr *registrationError
		if errors.As(err, &regErr) {
			w.Header().Set("Retry-After", "3600")
			writeJSONError(w, regErr.status, regErr.code, regErr.desc)
			return
		}
		s.log.Error("counting registered clients", zap.Error(err))
		writeJSONError(w, http.StatusInternalServerError, "server_error", "registration is unavailable")
		return
	}
	if err := s.store.save(r.Context(), kindClients, client.ID, client); err != nil {
		s.releaseClientSlot()
		s.log.Error("storing a registered client", zap.Error(err))
		writeJSONError(w, http.StatusInternalServerError, "server_error", "registration is unavailable")
		return
	}
	s.log.Info("registered OAuth client", zap.String("client_id", client.ID),
		zap.String("client_name", client.Name), zap.String("auth_method", client.AuthMethod))

	resp := registrationResponse{
		ClientID:                client.ID,
		ClientSecret:            secret,
		ClientIDIssuedAt:        client.CreatedAt.Unix(),
		RedirectURIs:            client.RedirectURIs,
		TokenEndpointAuthMethod: client.AuthMethod,
		GrantTypes:              client.GrantTypes,
		ResponseTypes:           client.ResponseTypes,
		ClientName:              client.Name,
		Scope:                   Scope,
	}
	if secret != "" {
		never := int64(0)
		resp.ClientSecretExpiresAt = &never
	}
	writeJSON(w, http.StatusCreated, resp)
}

// newClientRecord validates registration metadata and applies the RFC 7591 defaults.
func newClientRecord(req registrationRequest, now time.Time) (*clientRecord, *registrationError) {
	if len(req.RedirectURIs) == 0 {
		return nil, redirectError("redirect_uris is required")
	}
	if len(req.RedirectURIs) > maxRedirectURIs {
		return nil, redirectError("at most %d redirect URIs may be registered", maxRedirectURIs)
	}
	for _, u := range req.RedirectURIs {
		if err := validateRedirectURI(u); err != nil {
			return nil, redirectError("%v", err)
		}
	}
	method := "client_secret_basic" // the RFC 7591 default
	if req.TokenEndpointAuthMethod != nil {
		method = *req.TokenEndpointAuthMethod
	}
	if !slices.Contains(authMethods, method) {
		return nil, metadataError("token_endpoint_auth_method %q is not supported; use one of %s",
			method, strings.Join(authMethods, ", "))
	}
	grantTypes := req.GrantTypes
	if len(grantTypes) == 0 {
		grantTypes = []string{"authorization_code"}
	}
	for _, g := range grantTypes {
		if g != "authorization_code" && g != "refresh_token" {
			return nil, metadataError("grant type %q is not supported", g)
		}
	}
	responseTypes := req.ResponseTypes
	if len(responseTypes) == 0 {
		responseTypes = []string{"code"}
	}
	for _, t := range responseTypes {
		if t != "code" {
			return nil, metadataError("response type %q is not supported", t)
		}
	}
	name, err := cleanClientName(req.ClientName)
	if err != nil {
		return nil, metadataError("%v", err)
	}
	return &clientRecord{
		ID:            randomID(),
		Name:          name,
		RedirectURIs:  slices.Clone(req.RedirectURIs),
		AuthMethod:    method,
		GrantTypes:    slices.Compact(slices.Clone(grantTypes)),
		ResponseTypes: slices.Compact(slices.Clone(responseTypes)),
		CreatedAt:     now.UTC(),
	}, nil
}

// cleanClientName bounds a display name and rejects invisible characters, which have no
// business in a name shown on the sign-in page: control characters, and format
// characters (Unicode category Cf: bidi overrides and isolates such as U+202E and U+2066,
// zero-width joiners, soft hyphens), which can make a name read as something else.
func cleanClientName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if !utf8.ValidString(name) {
		return "", errors.New("client_name is not valid UTF-8")
	}
	if len([]rune(name)) > maxClientNameLen {
		return "", fmt.Errorf("client_name is longer than %d characters", maxClientNameLen)
	}
	if i := strings.IndexFunc(name, invisibleRune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(name[i:])
		return "", fmt.Errorf("client_name contains the invisible or control character %U", r)
	}
	return name, nil
}

// invisibleRune is true for characters that are not shown as themselves: controls (Cc),
// format characters (Cf), private-use and surrogate code points, and the line and
// paragraph separators.
func invisibleRune(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs, unicode.Zl, unicode.Zp)
}

// hostLabel is one label of a host name in its ASCII form. Underscores are allowed
// because some real names carry them; nothing else outside letters, digits and hyphens.
var hostLabel = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$`)

// checkRedirectHost accepts a host[:port] of an http(s) redirect URI only when it is an
// IP literal or a DNS name whose ASCII (punycode) form is made of plain labels, with a
// numeric port. The host ends up in the sign-in page's Content-Security-Policy
// (form-action), so anything else (";", quotes, spaces, commas) could inject policy.
func checkRedirectHost(u *url.URL) error {
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
			return fmt.Errorf("port %q is not a number from 1 to 65535", p)
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return errors.New("empty port")
	}
	host := u.Hostname()
	if strings.HasPrefix(u.Host, "[") {
		if _, err := netip.ParseAddr(host); err != nil || strings.Contains(host, "%") {
			return fmt.Errorf("%q is not an IPv6 address", host)
		}
		return nil
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	ascii, err := asciiHost(host)
	if err != nil {
		return err
	}
	for _, label := range strings.Split(ascii, ".") {
		if !hostLabel.MatchString(label) {
			return fmt.Errorf("host %q is not a valid DNS name", host)
		}
	}
	return nil
}

// asciiHost is the lower-case ASCII (punycode) form of a host name, as a browser would
// look it up.
func asciiHost(host string) (string, error) {
	if host == "" || len(host) > 253 {
		return "", fmt.Errorf("host %q is empty or too long", host)
	}
	ascii, err := idna.Lookup.ToASCII(host)
	if err != nil {
		return "", fmt.Errorf("host %q is not a valid internationalised name", host)
	}
	return strings.ToLower(ascii), nil
}

// schemePattern is the RFC 3986 scheme syntax.
var schemePattern = regexp.MustCompile(`^[a-z][a-z0-9+.-]*$`)

// forbiddenSchemes can run code, read local files or otherwise do something other than
// hand a code to the client.
var forbiddenSchemes = map[string]bool{
	"javascript": true, "data": true, "file": true, "vbscript": true, "about": true,
	"blob": true, "filesystem": true, "view-source": true, "mailto": true, "tel": true,
	"sms": true, "ftp": true, "ws": true, "wss": true, "intent": true,
}

// validateRedirectURI accepts https URLs, plain http only on loopback hosts (RFC 8252
// section 7.3), and private-use schemes of native apps ("cursor://...",
// "com.example.app:/cb", RFC 8252 section 7.1). It refuses fragments (RFC 6749 section
// 3.1.2), credentials in the URL and schemes that are not redirects at all.
func validateRedirectURI(raw string) error {
	if raw == "" {
		return errors.New("a redirect URI is empty")
	}
	if len(raw) > maxRedirectURILen {
		return fmt.Errorf("a redirect URI is longer than %d bytes", maxRedirectURILen)
	}
	if strings.ContainsAny(raw, "#\\ \t\r\n") || strings.IndexFunc(raw, unicode.IsControl) >= 0 {
		return fmt.Errorf("redirect URI %q contains a fragment, a space, a backslash or a control character", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("redirect URI %q does not parse", raw)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme == "" || !schemePattern.MatchString(scheme) {
		return fmt.Errorf("redirect URI %q is not absolute", raw)
	}
	if forbiddenSchemes[scheme] {
		return fmt.Errorf("redirect URI scheme %q is not allowed", scheme)
	}
	if u.User != nil {
		return fmt.Errorf("redirect URI %q contains credentials", raw)
	}
	switch scheme {
	case "https":
		if u.Host == "" || u.Opaque != "" {
			return fmt.Errorf("redirect URI %q has no host", raw)
		}
		if err := checkRedirectHost(u); err != nil {
			return fmt.Errorf("redirect URI %q: %v", raw, err)
		}
	case "http":
		if !isLoopbackHost(u.Hostname()) || u.Opaque != "" {
			return fmt.Errorf("redirect URI %q: plain http is allowed only on loopback (127.0.0.1, [::1], localhost)", raw)
		}
		if err := checkRedirectHost(u); err != nil {
			return fmt.Errorf("redirect URI %q: %v", raw, err)
		}
	default:
		// A private-use scheme is the native app's own; it must at least say something
		// after the scheme.
		if u.Host == "" && u.Path == "" && u.Opaque == "" {
			return fmt.Errorf("redirect URI %q is only a scheme", raw)
		}
	}
	return nil
}

// isLoopbackHost is true for the hosts RFC 8252 lets native apps listen on.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.Unmap().IsLoopback()
}

// redirectURIMatches compares a requested redirect URI with a registered one: exactly,
// except that for loopback http URIs the port is ignored (RFC 8252 section 7.3), because
// a native app picks a free port at run time.
func redirectURIMatches(registered, requested string) bool {
	if registered == requested {
		return true
	}
	reg, err1 := url.Parse(registered)
	req, err2 := url.Parse(requested)
	if err1 != nil || err2 != nil || reg.Scheme != "http" || req.Scheme != "http" {
		return false
	}
	if !isLoopbackHost(reg.Hostname()) || reg.Hostname() != req.Hostname() {
		return false
	}
	if p := req.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return false
		}
	}
	return reg.User == nil && req.User == nil && reg.EscapedPath() == req.EscapedPath() &&
		reg.RawQuery == req.RawQuery && reg.Fragment == "" && req.Fragment == "" &&
		!strings.Contains(requested, "#")
}

// lookupClient finds a client by id: a client ID metadata document when the id is a URL,
// else a registered client. errNotFound means there is no such client; other errors
// describe why a metadata document was refused.
func (s *Server) lookupClient(ctx context.Context, clientID string) (*clientRecord, error) {
	if clientID == "" {
		return nil, errNotFound
	}
	if isMetadataDocumentURL(clientID) {
		return s.metadataDocumentClient(ctx, clientID)
	}
	var c clientRecord
	if err := s.store.load(ctx, kindClients, clientID, &c); err != nil {
		return nil, err
	}
	if c.ID != clientID {
		s.log.Warn("ignoring OAuth client entry stored under another id", zap.String("client_id", clientID))
		return nil, errNotFound
	}
	return &c, nil
}

// checkSecret compares a presented client secret with the stored hash in constant time.
func (c *clientRecord) checkSecret(secret string) bool {
	if c.SecretHash == "" || secret == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(hashSecret(secret)), []byte(c.SecretHash)) == 1
}

// displayName is how the sign-in page names the client.
func (c *clientRecord) displayName() string {
	if c.Name != "" {
		return c.Name
	}
	if c.metadataDocument {
		if u, err := url.Parse(c.ID); err == nil {
			return displayHost(u)
		}
	}
	return "An application"
}

// reserveClientSlot counts a new registration against MaxClients. The count is kept in
// memory: the stored clients are listed once per process, and Prune recounts. At the cap
// a registration is refused at once; only one pass every capPruneEvery looks for
// registrations that never led to a sign-in to make room, so a flood at the cap costs a
// counter check, not a scan. Several instances each keep their own count, so the cap is
// approximate there.
func (s *Server) reserveClientSlot(ctx context.Context) error {
	s.clientCountMu.Lock()
	if s.clientCount < 0 {
		ids, err := s.store.list(ctx, kindClients)
		if err != nil {
			s.clientCountMu.Unlock()
			return err
		}
		s.clientCount = len(ids)
	}
	if s.clientCount < s.maxClients {
		s.clientCount++
		s.clientCountMu.Unlock()
		return nil
	}
	now := s.opts.Now()
	prune := s.capPrunedAt.IsZero() || now.Sub(s.capPrunedAt) >= capPruneEvery
	if prune {
		s.capPrunedAt = now
	}
	s.clientCountMu.Unlock()

	full := &registrationError{http.StatusServiceUnavailable, "temporarily_unavailable",
		fmt.Sprintf("this server already holds %d registered clients; unused registrations expire, try again later", s.maxClients)}
	if !prune {
		return full
	}
	n, err := s.pruneClients(ctx, now, abandonedClientAge, nil)
	if err != nil {
		return err
	}
	s.clientCountMu.Lock()
	defer s.clientCountMu.Unlock()
	s.clientCount = n
	if s.clientCount >= s.maxClients {
		return full
	}
	s.clientCount++
	return nil
}

func (s *Server) releaseClientSlot() {
	s.clientCountMu.Lock()
	if s.clientCount > 0 {
		s.clientCount--
	}
	s.clientCountMu.Unlock()
}
