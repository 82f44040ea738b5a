package oauth

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"go.uber.org/zap"
)

// maxGrantAccessTokens bounds the access tokens a grant lists for deletion with it.
const maxGrantAccessTokens = 50

// verifierPattern is an RFC 7636 code verifier: 43 to 128 unreserved characters.
var verifierPattern = regexp.MustCompile(`^[A-Za-z0-9._~-]{43,128}$`)

// tokenPattern is the shape of every code and token this server issues (randomToken).
var tokenPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)

// tokenResponse is the RFC 6749 section 5.1 answer.
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
	Scope        string `json:"scope"`
}

// tokenError is an RFC 6749 section 5.2 error.
type tokenError struct {
	status int
	code   string
	desc   string
	basic  bool // the client used HTTP Basic: answer with a Basic challenge
}

func (e *tokenError) Error() string { return e.code + ": " + e.desc }

func invalidRequest(desc string) *tokenError {
	return &tokenError{status: http.StatusBadRequest, code: "invalid_request", desc: desc}
}

func invalidGrant(desc string) *tokenError {
	return &tokenError{status: http.StatusBadRequest, code: "invalid_grant", desc: desc}
}

var errServer = &tokenError{status: http.StatusInternalServerError, code: "server_error", desc: "the request could not be completed; try again"}

func writeTokenError(w http.ResponseWriter, e *tokenError) {
	if e.status == http.StatusUnauthorized {
		if e.basic {
			w.Header().Set("WWW-Authenticate", `Basic realm="oauth", charset="UTF-8"`)
		}
	}
	writeJSONError(w, e.status, e.code, e.desc)
}

// parsePostForm reads a bounded application/x-www-form-urlencoded body.
func parsePostForm(w http.ResponseWriter, r *http.Request) (url.Values, *tokenError) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBody)
	if err := r.ParseForm(); err != nil {
		return nil, invalidRequest("the body must be application/x-www-form-urlencoded and at most 64 KiB")
	}
	for k, v := range r.PostForm {
		if len(v) > 1 {
			return nil, invalidRequest("the " + k + " parameter is repeated")
		}
	}
	return r.PostForm, nil
}

func (s *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	form, terr := parsePostForm(w, r)
	if terr != nil {
		writeTokenError(w, terr)
		return
	}
	client, terr := s.authenticateClient(r, form, true)
	if terr != nil {
		writeTokenError(w, terr)
		return
	}
	var resp *tokenResponse
	switch gt := form.Get("grant_type"); gt {
	case "authorization_code":
		resp, terr = s.redeemCode(r, form, client)
	case "refresh_token":
		resp, terr = s.refresh(r, form, client)
	case "":
		terr = invalidRequest("grant_type is required")
	default:
		terr = &tokenError{status: http.StatusBadRequest, code: "unsupported_grant_type", desc: "grant_type must be authorization_code or refresh_token"}
	}
	if terr != nil {
		writeTokenError(w, terr)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// authenticateClient identifies the client by HTTP Basic or by client_id (and
// client_secret) in the form. Public clients send only client_id; confidential ones must
// prove their secret by either method. When required is false and the request carries
// no client identification at all, it returns (nil, nil).
func (s *Server) authenticateClient(r *http.Request, form url.Values, required bool) (*clientRecord, *tokenError) {
	user, pass, basic := r.BasicAuth()
	clientID, secret := form.Get("client_id"), form.Get("client_secret")
	if basic {
		// RFC 6749 section 2.3.1: both parts are form-encoded before Basic encoding.
		u, err1 := url.QueryUnescape(user)
		p, err2 := url.QueryUnescape(pass)
		if err1 != nil || err2 != nil {
			return nil, &tokenError{status: http.StatusUnauthorized, code: "invalid_client", desc: "malformed client credentials", basic: true}
		}
		if secret != "" || (clientID != "" && clientID != u) {
			return nil, invalidRequest("use one client authentication method")
		}
		clientID, secret = u, p
	}
	fail := &tokenError{status: http.StatusUnauthorized, code: "invalid_client", desc: "client authentication failed", basic: basic}
	if clientID == "" {
		if !required && !basic {
			return nil, nil
		}
		fail.desc = "client_id is required"
		return nil, fail
	}
	var client *clientRecord
	var err error
	if isMetadataDocumentURL(clientID) {
		// A metadata document client is public, and its code or grant is already bound
		// to its client_id and redirect URI, so the document is not needed here. Not
		// fetching it keeps refreshes working while the client's site is unreachable.
		err = s.checkMetadataURL(clientID)
		client = &clientRecord{ID: clientID, AuthMethod: "none", metadataDocument: true}
	} else {
		client, err = s.lookupClient(r.Context(), clientID)
	}
	switch {
	case errors.Is(err, errNotFound):
		fail.desc = "unknown client"
		return nil, fail
	case errors.Is(err, errMetadataDocument):
		fail.desc = err.Error()
		return nil, fail
	case err != nil:
		s.log.Error("looking up an OAuth client", zap.Error(err))
		return nil, errServer
	}
	if client.AuthMethod == "none" {
		// A public client has no secret to check; one sent anyway proves nothing and is
		// ignored rather than refused, for clients that send what they were given.
		return client, nil
	}
	if !client.checkSecret(secret) {
		return nil, fail
	}
	return client, nil
}

// redeemCode is the authorization_code grant. The code entry is locked for the whole
// redemption so that two concurrent requests with one code cannot both get tokens.
func (s *Server) redeemCode(r *http.Request, form url.Values, client *clientRecord) (*tokenResponse, *tokenError) {
	ctx := r.Context()
	code, verifier := form.Get("code"), form.Get("code_verifier")
	if code == "" {
		return nil, invalidRequest("code is required")
	}
	if verifier == "" {
		return nil, invalidRequest("code_verifier is required (PKCE)")
	}
	if !verifierPattern.MatchString(verifier) {
		return nil, invalidRequest("code_verifier must be 43 to 128 unreserved characters")
	}
	// Everything that needs no lock is checked first, so that a made-up code or a
	// client that is not the code's owner never takes a storage lock (a write, on most
	// storages) and cannot tie up the lock of a real code.
	if !tokenPattern.MatchString(code) {
		return nil, invalidGrant("the authorization code is invalid or expired")
	}
	codeID := hashSecret(code)
	var rec codeRecord
	if terr := s.loadCode(ctx, codeID, &rec); terr != nil {
		return nil, terr
	}
	if rec.ClientID != client.ID {
		return nil, invalidGrant("the authorization code was issued to another client")
	}
	if rec.UsedGrant == "" && !s.opts.Now().Before(rec.ExpiresAt) {
		return nil, invalidGrant("the authorization code is invalid or expired")
	}
	unlock, err := s.store.lock(ctx, kindCodes, codeID)
	if err != nil {
		s.log.Error("locking an authorization code", zap.Error(err))
		return nil, errServer
	}
	defer unlock()
	// Again under the lock: another request may have redeemed it meanwhile.
	if terr := s.loadCode(ctx, codeID, &rec); terr != nil {
		return nil, terr
	}
	now := s.opts.Now()
	if rec.UsedGrant != "" {
		// RFC 6749 section 4.1.2: a code used twice may have been stolen; revoke what
		// the first use issued.
		s.log.Warn("authorization code reused; revoking its tokens", zap.String("client_id", rec.ClientID))
		if err := s.revokeGrant(ctx, rec.UsedGrant); err != nil {
			s.log.Error("revoking the grant of a reused code", zap.Error(err))
		}
		return nil, invalidGrant("the authorization code was already used; the tokens it issued are revoked")
	}
	if !now.Before(rec.ExpiresAt) {
		return nil, invalidGrant("the authorization code is invalid or expired")
	}
	if rec.ClientID != client.ID {
		return nil, invalidGrant("the authorization code was issued to another client")
	}
	redirectURI := form.Get("redirect_uri")
	if (rec.RedirectURIGiven || redirectURI != "") && redirectURI != rec.RedirectURI {
		return nil, invalidGrant("redirect_uri does not match the authorization request")
	}
	sum := sha256.Sum256([]byte(verifier))
	if subtle.ConstantTimeCompare([]byte(base64.RawURLEncoding.EncodeToString(sum[:])), []byte(rec.Challenge)) != 1 {
		return nil, invalidGrant("code_verifier does not match the code_challenge")
	}
	if res := form.Get("resource"); res != "" {
		if canon, ok := s.checkResource(r, res); !ok || canon != rec.Resource {
			return nil, &tokenError{status: http.StatusBadRequest, code: "invalid_target", desc: "resource must be " + rec.Resource}
		}
	}

	grant := &grantRecord{
		ID:         randomID(),
		ClientID:   client.ID,
		ClientName: rec.ClientName,
		Resource:   rec.Resource,
		Scope:      rec.Scope,
		CreatedAt:  now.UTC(),
		Person:     rec.Person,
		PersonKey:  rec.PersonKey,
	}
	// The code is marked used before any token exists, so that a failure below can
	// only lose this sign-in, never let the code be redeemed twice.
	rec.UsedGrant = grant.ID
	if err := s.store.save(ctx, kindCodes, codeID, rec); err != nil {
		s.log.Error("marking an authorization code used", zap.Error(err))
		return nil, errServer
	}
	resp, err := s.issueTokens(ctx, grant, now, "")
	if err != nil {
		s.log.Error("issuing tokens", zap.Error(err))
		return nil, errServer
	}
	s.log.Info("issued tokens for a sign-in", zap.String("client_id", client.ID), zap.String("grant", grant.ID))
	return resp, nil
}

// loadCode reads a code entry; a missing one is an invalid grant.
func (s *Server) loadCode(ctx context.Context, codeID string, rec *codeRecord) *tokenError {
	if err := s.store.load(ctx, kindCodes, codeID, rec); err != nil {
		if !errors.Is(err, errNotFound) {
			s.log.Error("loading an authorization code", zap.Error(err))
			return errServer
		}
		return invalidGrant("the authorization code is invalid or expired")
	}
	return nil
}

// refreshRetryWindow is how long after a rotation the previous refresh token still
// gets an answer: the very pair that rotation issued, so that a client whose response
// was lost (or that refreshed twice at once) keeps its sign-in. Later, the previous
// token counts as reuse.
const refreshRetryWindow = 30 * time.Second

// refresh is the refresh_token grant. Every use rotates the refresh token. Presenting the
// token just rotated away within refreshRetryWindow returns the pair that rotation
// issued, unchanged; presenting one that was rotated away earlier (or before that) means
// it leaked, and the whole grant is revoked (OAuth 2.1 section 4.3.1).
func (s *Server) refresh(r *http.Request, form url.Values, client *clientRecord) (*tokenResponse, *tokenError) {
	ctx := r.Context()
	token := form.Get("refresh_token")
	if token == "" {
		return nil, invalidRequest("refresh_token is required")
	}
	invalid := invalidGrant("the refresh token is invalid, expired or revoked")
	if !tokenPattern.MatchString(token) {
		return nil, invalid
	}
	hash := hashSecret(token)
	var rec tokenRecord
	if err := s.store.load(ctx, kindRefresh, hash, &rec); err != nil {
		if !errors.Is(err, errNotFound) {
			s.log.Error("loading a refresh token", zap.Error(err))
			return nil, errServer
		}
		return nil, invalid
	}
	now := s.opts.Now()
	if !now.Before(rec.ExpiresAt) {
		return nil, invalid
	}
	if rec.ClientID != client.ID {
		return nil, invalidGrant("the refresh token was issued to another client")
	}
	if res := form.Get("resource"); res != "" {
		if canon, ok := s.checkResource(r, res); !ok || canon != rec.Resource {
			return nil, &tokenError{status: http.StatusBadRequest, code: "invalid_target", desc: "resource must be " + rec.Resource}
		}
	}

	unlock, err := s.store.lock(ctx, kindGrants, rec.GrantID)
	if err != nil {
		s.log.Error("locking a grant", zap.Error(err))
		return nil, errServer
	}
	defer unlock()
	var grant grantRecord
	if err := s.store.load(ctx, kindGrants, rec.GrantID, &grant); err != nil {
		if !errors.Is(err, errNotFound) {
			s.log.Error("loading a grant", zap.Error(err))
			return nil, errServer
		}
		return nil, invalid
	}
	if !now.Before(grant.ExpiresAt) || !s.personHolds(grant.Person, grant.PersonKey) {
		return nil, invalid
	}
	if subtle.ConstantTimeCompare([]byte(grant.RefreshHash), []byte(hash)) != 1 {
		if grant.PrevRefreshHash == hash && now.Sub(grant.RotatedAt) < refreshRetryWindow {
			if resp, err := openRetry(token, grant.Retry); err == nil {
				s.log.Info("refresh retried within the grace window; returning the same tokens",
					zap.String("client_id", client.ID), zap.String("grant", grant.ID))
				resp.ExpiresIn = max(0, int64(grant.RotatedAt.Add(s.opts.AccessTokenTTL).Sub(now)/time.Second))
				return resp, nil
			}
		}
		s.log.Warn("refresh token reused; revoking its sign-in", zap.String("client_id", client.ID), zap.String("grant", grant.ID))
		if err := s.revokeGrantLocked(ctx, grant.ID); err != nil {
			s.log.Error("revoking the grant of a reused refresh token", zap.Error(err))
		}
		return nil, invalidGrant("the refresh token was already used; this sign-in is revoked")
	}
	grant.PrevRefreshHash, grant.RotatedAt = hash, now.UTC()
	resp, err := s.issueTokens(ctx, &grant, now, token)
	if err != nil {
		s.log.Error("issuing tokens", zap.Error(err))
		return nil, errServer
	}
	return resp, nil
}

// sealRetry encrypts a token response with a key derived from the refresh token it
// answers, which the storage holds only as a hash: the stored copy is useless to anyone
// who does not already hold that refresh token.
func sealRetry(prevToken string, resp *tokenResponse) (string, error) {
	plain, err := json.Marshal(resp)
	if err != nil {
		return "", err
	}
	aead, err := retryAEAD(prevToken)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, plain, nil)), nil
}

func openRetry(prevToken, sealed string) (*tokenResponse, error) {
	box, err := base64.RawURLEncoding.DecodeString(sealed)
	if err != nil {
		return nil, err
	}
	aead, err := retryAEAD(prevToken)
	if err != nil {
		return nil, err
	}
	if len(box) < aead.NonceSize() {
		return nil, errors.New("sealed response too short")
	}
	plain, err := aead.Open(nil, box[:aead.NonceSize()], box[aead.NonceSize():], nil)
	if err != nil {
		return nil, err
	}
	var resp tokenResponse
	if err := json.Unmarshal(plain, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

func retryAEAD(prevToken string) (cipher.AEAD, error) {
	key := sha256.Sum256([]byte("mcp-sandbox oauth refresh retry\x00" + prevToken))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// issueTokens makes a new access and refresh token for the grant and stores the grant;
// the grant write comes last and is what makes the new refresh token the current one.
// prevRefresh is the refresh token being rotated away ("" for a new sign-in): the new
// pair is kept sealed with it for a retry within refreshRetryWindow.
func (s *Server) issueTokens(ctx context.Context, grant *grantRecord, now time.Time, prevRefresh string) (*tokenResponse, error) {
	access, refresh := s.newAccessToken(), randomToken()
	accessHash, refreshHash := hashSecret(access), hashSecret(refresh)
	accessExp := now.Add(s.opts.AccessTokenTTL).UTC()
	refreshExp := now.Add(s.opts.RefreshTokenTTL).UTC()

	live := grant.AccessHashes[:0]
	for _, t := range grant.AccessHashes {
		if now.Before(t.ExpiresAt) {
			live = append(live, t)
		}
	}
	// The list only speeds up cleanup (a token is dead once its grant is gone), so a
	// client refreshing in a loop may push the oldest out rather than grow the grant.
	if len(live) >= maxGrantAccessTokens {
		live = live[len(live)-maxGrantAccessTokens+1:]
	}
	grant.AccessHashes = append(live, tokenRef{Hash: accessHash, ExpiresAt: accessExp})
	grant.RefreshHash = refreshHash
	grant.ExpiresAt = refreshExp

	base := tokenRecord{GrantID: grant.ID, ClientID: grant.ClientID, Resource: grant.Resource, Scope: grant.Scope}
	accessRec, refreshRec := base, base
	accessRec.ExpiresAt, refreshRec.ExpiresAt = accessExp, refreshExp
	if err := s.store.save(ctx, kindAccess, accessHash, accessRec); err != nil {
		return nil, err
	}
	if err := s.store.save(ctx, kindRefresh, refreshHash, refreshRec); err != nil {
		return nil, err
	}
	resp := &tokenResponse{
		AccessToken:  access,
		TokenType:    "Bearer",
		ExpiresIn:    int64(s.opts.AccessTokenTTL / time.Second),
		RefreshToken: refresh,
		Scope:        grant.Scope,
	}
	grant.Retry = ""
	if prevRefresh != "" {
		sealed, err := sealRetry(prevRefresh, resp)
		if err != nil {
			return nil, err
		}
		grant.Retry = sealed
	}
	if err := s.store.save(ctx, kindGrants, grant.ID, grant); err != nil {
		return nil, err
	}
	return resp, nil
}

// revokeGrant deletes a grant and the access tokens it issued, under the grant's lock.
func (s *Server) revokeGrant(ctx context.Context, grantID string) error {
	unlock, err := s.store.lock(ctx, kindGrants, grantID)
	if err != nil {
		return err
	}
	defer unlock()
	return s.revokeGrantLocked(ctx, grantID)
}

// revokeGrantLocked is revokeGrant for a caller that holds the grant's lock. Deleting the
// grant is what counts: every token checks its grant. Its refresh tokens stay until they
// expire, so a late replay is still recognised (as invalid) and pruned later.
func (s *Server) revokeGrantLocked(ctx context.Context, grantID string) error {
	var grant grantRecord
	err := s.store.load(ctx, kindGrants, grantID, &grant)
	if err != nil && !errors.Is(err, errNotFound) {
		return err
	}
	if err := s.store.delete(ctx, kindGrants, grantID); err != nil {
		return err
	}
	s.tokens.dropGrant(grantID)
	var errs []error
	for _, t := range grant.AccessHashes {
		errs = append(errs, s.store.delete(ctx, kindAccess, t.Hash))
	}
	return errors.Join(errs...)
}
