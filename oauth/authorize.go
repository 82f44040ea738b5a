package oauth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

const (
	// signinFormTTL is how long a shown sign-in page can be submitted: enough to go and
	// find the key.
	signinFormTTL = 30 * time.Minute
	maxStateLen   = 2048
	maxFormBody   = 64 << 10
)

// challengePattern is an S256 code challenge: base64url of 32 bytes, no padding.
var challengePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)

// authParams are the authorization request parameters, carried from the query of the
// GET to the hidden fields of the POST.
var authParams = []string{"client_id", "redirect_uri", "response_type", "code_challenge",
	"code_challenge_method", "state", "scope", "resource"}

// authRequest is a validated authorization request.
type authRequest struct {
	params      url.Values // the parameters as received, for the form and its MAC
	client      *clientRecord
	redirectURI string // the effective redirect URI (the registered one when omitted)
	state       string
	resource    string // canonical resource URL the code will be bound to
}

// pageError is an error shown as an HTML page because redirecting is not safe (the
// client or redirect URI could not be trusted) or not possible.
type pageError struct {
	status  int
	title   string
	message string
}

func (s *Server) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	var params url.Values
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		params = r.URL.Query()
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBody)
		if err := r.ParseForm(); err != nil {
			s.renderError(w, r, nil, &pageError{http.StatusBadRequest, "Bad request", "The sign-in form could not be read."})
			return
		}
		params = r.PostForm
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		s.renderError(w, r, nil, &pageError{http.StatusMethodNotAllowed, "Method not allowed", "Use GET or POST."})
		return
	}

	req, perr, redirectErr := s.parseAuthRequest(r, params)
	if perr != nil {
		s.renderError(w, r, nil, perr)
		return
	}
	if redirectErr != nil {
		// RFC 6749 would let us send these to the redirect URI, but before the person has
		// signed in that turns this origin into an open redirector for anyone who
		// registers a client or names a metadata document (RFC 9700 section 4.11.2):
		// the error is shown here instead, and the client learns nothing it could misuse.
		s.renderError(w, r, nil, &pageError{http.StatusBadRequest, "Invalid sign-in request",
			"The application sent a sign-in request this server cannot accept (" + redirectErr.code + ": " +
				redirectErr.desc + "). Tell the application's developer; nothing was shared."})
		return
	}
	if r.Method != http.MethodPost {
		s.renderSignin(w, r, req, http.StatusOK, "")
		return
	}
	s.signIn(w, r, req)
}

// redirectable is an error RFC 6749 section 4.1.2.1 would report through the redirect
// URI; it is shown on the error page instead (see serveAuthorize).
type redirectable struct{ code, desc string }

// parseAuthRequest validates in the order RFC 6749 section 4.1.2.1 demands: first the
// client and redirect URI, then everything else. Neither kind of failure redirects.
func (s *Server) parseAuthRequest(r *http.Request, params url.Values) (*authRequest, *pageError, *redirectable) {
	for _, k := range []string{"client_id", "redirect_uri"} {
		if len(params[k]) > 1 {
			return nil, &pageError{http.StatusBadRequest, "Invalid request", "The request repeats the " + k + " parameter."}, nil
		}
	}
	clientID := params.Get("client_id")
	if clientID == "" {
		return nil, &pageError{http.StatusBadRequest, "Invalid request", "The request does not say which application is asking (no client_id)."}, nil
	}
	client, err := s.lookupClient(r.Context(), clientID)
	switch {
	case errors.Is(err, errNotFound):
		return nil, &pageError{http.StatusBadRequest, "Unknown application",
			"This application is not registered with this server (or was registered before the API key changed). Remove the connector in the application and add it again."}, nil
	case errors.Is(err, errMetadataDocument):
		return nil, &pageError{http.StatusBadRequest, "Application not accepted", capitalize(err.Error()) + "."}, nil
	case err != nil && r.Context().Err() != nil: // the browser went away
		return nil, &pageError{http.StatusBadRequest, "Request cancelled", "The request was cancelled."}, nil
	case err != nil:
		s.log.Error("looking up an OAuth client", zap.Error(err))
		return nil, &pageError{http.StatusInternalServerError, "Server error", "The application could not be looked up. Try again in a moment."}, nil
	}

	redirectURI := params.Get("redirect_uri")
	if redirectURI == "" {
		if len(client.RedirectURIs) != 1 {
			return nil, &pageError{http.StatusBadRequest, "Invalid request", "The request has no redirect_uri, and the application registered more than one."}, nil
		}
		redirectURI = client.RedirectURIs[0]
	} else if !client.allowsRedirect(redirectURI) {
		return nil, &pageError{http.StatusBadRequest, "Invalid redirect",
			"The application asked to return to an address it did not register, so this sign-in was stopped."}, nil
	}
	req := &authRequest{params: params, client: client, redirectURI: redirectURI, state: params.Get("state")}
	if len(req.state) > maxStateLen {
		req.state = ""
		return req, nil, &redirectable{"invalid_request", fmt.Sprintf("state is longer than %d bytes", maxStateLen)}
	}

	for _, k := range authParams {
		if len(params[k]) > 1 {
			return req, nil, &redirectable{"invalid_request", "the " + k + " parameter is repeated"}
		}
	}
	if rt := params.Get("response_type"); rt != "code" {
		return req, nil, &redirectable{"unsupported_response_type", "response_type must be code"}
	}
	challenge := params.Get("code_challenge")
	if challenge == "" {
		return req, nil, &redirectable{"invalid_request", "code_challenge is required (PKCE with S256)"}
	}
	if params.Get("code_challenge_method") != "S256" {
		return req, nil, &redirectable{"invalid_request", "code_challenge_method must be S256"}
	}
	if !challengePattern.MatchString(challenge) {
		return req, nil, &redirectable{"invalid_request", "code_challenge must be 43 characters of base64url"}
	}
	resource, ok := s.checkResource(r, params.Get("resource"))
	if !ok {
		return req, nil, &redirectable{"invalid_target", "resource must be " + s.resourceURL(r)}
	}
	req.resource = resource
	return req, nil, nil
}

// allowsRedirect reports whether the client registered the redirect URI.
func (c *clientRecord) allowsRedirect(redirectURI string) bool {
	if validateRedirectURI(redirectURI) != nil {
		return false
	}
	for _, reg := range c.RedirectURIs {
		if redirectURIMatches(reg, redirectURI) {
			return true
		}
	}
	return false
}

// checkResource validates an RFC 8707 resource indicator and returns the canonical
// resource URL. There is one resource, the MCP endpoint, so the accepted spellings are
// that URL, with or without a trailing slash, and the bare origin (clients that take the
// server's base URL as the resource); scheme and host compare case-insensitively. An
// absent indicator means the MCP endpoint. Tokens always record the canonical URL.
func (s *Server) checkResource(r *http.Request, resource string) (string, bool) {
	want := s.resourceURL(r)
	if resource == "" {
		return want, true
	}
	u, err := url.Parse(resource)
	if err != nil || u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Contains(resource, "#") {
		return "", false
	}
	origin := strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
	if origin != s.Origin(r) {
		return "", false
	}
	switch u.EscapedPath() {
	case "", "/", s.opts.ResourcePath, s.opts.ResourcePath + "/":
		return want, true
	}
	return "", false
}

// signIn handles the submitted form: form integrity, rate limit, key, then the code.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request, req *authRequest) {
	if !s.checkFormToken(req.params, req.params.Get("csrf")) {
		s.renderError(w, r, req, &pageError{http.StatusBadRequest, "Sign-in expired",
			"This sign-in form expired or was altered. Go back to the application and connect again."})
		return
	}
	ip := s.clientKey(r)
	key := req.params.Get("api_key")
	if s.retired(key) {
		s.log.Info("a retired key on the sign-in page", zap.String("remote", ip))
		s.renderSignin(w, r, req, http.StatusForbidden, capitalize(ErrRetiredKey.Error())+".")
		return
	}
	var person string
	good, n, retry := s.guesses.Try(ip, key, func() bool {
		var ok bool
		person, ok = s.whoseKey(key)
		return ok
	})
	if retry > 0 {
		secs := int(retry/time.Second) + 1
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		s.log.Warn("sign-in refused after repeated wrong keys", zap.String("remote", ip))
		s.renderError(w, r, req, &pageError{http.StatusTooManyRequests, "Too many attempts",
			fmt.Sprintf("Too many wrong keys were tried from your address. Try your key again in %s.", roundUp(retry))})
		return
	}
	if !good {
		s.log.Info("wrong key on the sign-in page", zap.String("remote", ip), zap.Int("failures", n))
		if d := signinDelay(n); d > 0 {
			s.sleep(r, d)
		}
		s.renderSignin(w, r, req, http.StatusForbidden, "That key is not correct. Type the key the operator gave you.")
		return
	}

	code := randomToken()
	now := s.opts.Now()
	rec := codeRecord{
		ClientID:         req.client.ID,
		ClientName:       req.client.displayName(),
		RedirectURI:      req.redirectURI,
		RedirectURIGiven: req.params.Get("redirect_uri") != "",
		Challenge:        req.params.Get("code_challenge"),
		Resource:         req.resource,
		Scope:            Scope,
		ExpiresAt:        now.Add(s.opts.CodeTTL).UTC(),
		Person:           person,
		PersonKey:        s.keyPrint(person),
	}
	if err := s.store.save(r.Context(), kindCodes, hashSecret(code), rec); err != nil {
		s.log.Error("storing an authorization code", zap.Error(err))
		s.renderError(w, r, req, &pageError{http.StatusInternalServerError, "Server error", "The sign-in could not be saved. Try again in a moment."})
		return
	}
	if !req.client.metadataDocument {
		s.touchClient(r.Context(), req.client.ID, now)
	}
	s.log.Info("signed in", zap.String("client_id", req.client.ID), zap.String("client_name", rec.ClientName), zap.String("person", person), zap.String("remote", ip))
	s.redirect(w, r, req.redirectURI, url.Values{"code": {code}}, req.state)
}

// touchClient records a sign-in on a registered client, which keeps it from being
// pruned as unused.
func (s *Server) touchClient(ctx context.Context, clientID string, now time.Time) {
	var c clientRecord
	if err := s.store.load(ctx, kindClients, clientID, &c); err != nil {
		return
	}
	c.LastSignInAt = now.UTC()
	if err := s.store.save(ctx, kindClients, clientID, c); err != nil {
		s.log.Warn("recording a client's sign-in", zap.Error(err))
	}
}

// redirect sends the browser to the client with the response parameters, the state and
// the issuer (RFC 9207, against mix-up attacks). A POST is answered with 303 so the
// browser follows with a GET.
func (s *Server) redirect(w http.ResponseWriter, r *http.Request, redirectURI string, v url.Values, state string) {
	if state != "" {
		v.Set("state", state)
	}
	v.Set("iss", s.Origin(r))
	target := redirectURI
	if strings.Contains(target, "?") {
		target += "&" + v.Encode()
	} else {
		target += "?" + v.Encode()
	}
	status := http.StatusFound
	if r.Method == http.MethodPost {
		status = http.StatusSeeOther
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Location", target)
	w.WriteHeader(status)
}

// formToken binds the sign-in form to the request it was shown for, until it expires:
// "<unix expiry>.<base64url HMAC>". The POST re-validates every parameter anyway; the
// MAC makes sure the person approves exactly the client and redirect the page showed.
func (s *Server) formToken(params url.Values, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + base64.RawURLEncoding.EncodeToString(s.formMAC(params, exp))
}

func (s *Server) formMAC(params url.Values, exp string) []byte {
	m := hmac.New(sha256.New, s.formKey)
	for _, k := range authParams {
		v := params.Get(k)
		// Length-prefixed, so no two different parameter sets encode the same.
		fmt.Fprintf(m, "%s=%d:%s\x00", k, len(v), v)
	}
	m.Write([]byte(exp))
	return m.Sum(nil)
}

func (s *Server) checkFormToken(params url.Values, token string) bool {
	exp, mac, ok := strings.Cut(token, ".")
	if !ok {
		return false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || !s.opts.Now().Before(time.Unix(unix, 0)) {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(mac)
	if err != nil {
		return false
	}
	return hmac.Equal(got, s.formMAC(params, exp))
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// roundUp renders a wait for people: whole minutes, or seconds under a minute.
func roundUp(d time.Duration) string {
	if d < time.Minute {
		return strconv.Itoa(int(d/time.Second)+1) + " seconds"
	}
	m := int((d + time.Minute - 1) / time.Minute)
	if m == 1 {
		return "1 minute"
	}
	return strconv.Itoa(m) + " minutes"
}
