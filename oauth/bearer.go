package oauth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Identity says who a request to the protected resource acts for.
type Identity struct {
	// Subject is the sign-in: the grant id for OAuth tokens, "api_key" for the key itself.
	Subject string
	// ClientID and ClientName name the application (empty for the API key).
	ClientID   string
	ClientName string
	// Method is "oauth", "api_key" or "person_key".
	Method string
	// Person is the person the request acts for ("" for the operator): the owner of
	// the key it signed in with.
	Person string
}

// Identity methods.
const (
	MethodOAuth  = "oauth"
	MethodAPIKey = "api_key"
)

// Cache policy for access tokens: a positive check is remembered for tokenCacheTTL, so a
// token revoked through another instance sharing the storage stays usable here for at
// most that long; revocations through this instance take effect at once. Failed checks
// are never cached, so a token becomes valid as soon as it is stored.
const (
	tokenCacheTTL   = 5 * time.Second
	maxCachedTokens = 10000
)

var errInvalidToken = errors.New("the access token is invalid, expired or revoked")

// errUnknownToken is an errInvalidToken for a token this server never issued: possibly a
// guess at the API key.
var errUnknownToken = fmt.Errorf("%w (unknown)", errInvalidToken)

// Access tokens are 32 random bytes followed by the first 16 bytes of their HMAC under a
// key derived from the API key, base64url (64 characters). The mark lets Authenticate
// tell a token this server issued from one it never did without any stored state: the
// records of expired and revoked tokens are deleted (revocation, Prune), yet clients keep
// retrying with them, often many people behind one address, and such a retry is no
// guess at the key. Forging the mark takes the API key itself.
const (
	accessRandomBytes = 32
	accessMACBytes    = 16
)

var accessTokenLen = base64.RawURLEncoding.EncodedLen(accessRandomBytes + accessMACBytes)

// newAccessToken makes an access token marked as issued here.
func (s *Server) newAccessToken() string {
	b := make([]byte, accessRandomBytes, accessRandomBytes+accessMACBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(append(b, s.accessMAC(b)...))
}

func (s *Server) accessMAC(random []byte) []byte {
	m := hmac.New(sha256.New, s.accessKey)
	m.Write(random)
	return m.Sum(nil)[:accessMACBytes]
}

// issuedHere reports whether token carries this server's mark: an access token it made
// under the current API key, whether or not it is still valid.
func (s *Server) issuedHere(token string) bool {
	if len(token) != accessTokenLen {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(b) != accessRandomBytes+accessMACBytes {
		return false
	}
	return hmac.Equal(b[accessRandomBytes:], s.accessMAC(b[:accessRandomBytes]))
}

// Authenticate checks the bearer token of a request to the protected resource. On
// success it returns the identity. On failure it writes the 401, with
// WWW-Authenticate: Bearer resource_metadata="<origin>/.well-known/oauth-protected-resource<ResourcePath>"
// (plus error="invalid_token" when a token was given), and returns false; the caller
// then writes nothing more. Tokens are accepted only for the resource they were issued
// for, Origin(r)+ResourcePath.
//
// Tokens this server issued are 256-bit random values that cannot be guessed: a valid
// one is never slowed or blocked, and an expired or revoked one (told apart by its
// mark, see newAccessToken) does not count as a guess. When the keys are accepted as
// bearer tokens, any other token is looked at as a key, under Options.Guesses: a
// wrong key counts once per address however often it is retried, a key retired within
// RetiredKeyTTL (Options.KeyHistory) not at all, and an address that tried too many
// wrong keys is answered 429 with Retry-After until it may try another.
func (s *Server) Authenticate(w http.ResponseWriter, r *http.Request) (Identity, bool) {
	s.noteKeys()
	token, ok := bearerToken(r)
	if !ok {
		s.unauthorized(w, r, "")
		return Identity{}, false
	}
	// 43 characters: a token of an earlier version, before tokens carried the mark.
	if s.issuedHere(token) || tokenPattern.MatchString(token) {
		id, err := s.checkAccessToken(r.Context(), token, s.resourceURL(r))
		switch {
		case err == nil:
			return id, true
		case errors.Is(err, errUnknownToken) && s.opts.APIKeyBearer:
			// not a token of ours: perhaps a key of that length
		case errors.Is(err, errInvalidToken):
			s.unauthorized(w, r, errInvalidToken.Error())
			return Identity{}, false
		default:
			s.log.Error("checking an access token", zap.Error(err))
			w.Header().Set("Retry-After", "5")
			writeJSONError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "the token could not be checked; try again")
			return Identity{}, false
		}
	}
	if !s.opts.APIKeyBearer {
		s.unauthorized(w, r, errInvalidToken.Error())
		return Identity{}, false
	}
	ip := s.clientKey(r)
	if s.retired(token) {
		s.log.Info("a retired key as bearer token", zap.String("remote", ip))
		s.unauthorized(w, r, ErrRetiredKey.Error())
		return Identity{}, false
	}
	var person string
	good, n, retry := s.guesses.Try(ip, token, func() bool {
		var ok bool
		person, ok = s.whoseKey(token)
		return ok
	})
	switch {
	case good && person == "":
		return Identity{Subject: "api_key", Method: MethodAPIKey}, true
	case good:
		return Identity{Subject: "person:" + person, Method: MethodPersonKey, Person: person}, true
	case retry > 0:
		s.tooManyBearerFailures(w, r, ip, retry)
	default:
		if n > signinSlowAfter {
			s.log.Info("unknown bearer token", zap.String("remote", ip), zap.Int("failures", n))
		}
		s.unauthorized(w, r, errInvalidToken.Error())
	}
	return Identity{}, false
}

// tooManyBearerFailures answers a client address that has tried too many wrong keys.
func (s *Server) tooManyBearerFailures(w http.ResponseWriter, r *http.Request, ip string, retry time.Duration) {
	s.log.Warn("bearer token refused after repeated wrong tokens", zap.String("remote", ip))
	w.Header().Set("Retry-After", strconv.Itoa(int(retry/time.Second)+1))
	w.Header().Add("Access-Control-Expose-Headers", "Retry-After")
	writeJSONError(w, http.StatusTooManyRequests, "slow_down",
		"too many wrong tokens or keys from this address; try a key again in "+roundUp(retry))
}

// bearerToken extracts an RFC 6750 header token; the scheme is case-insensitive.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// unauthorized writes the RFC 6750 / RFC 9728 challenge that starts discovery.
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, desc string) {
	challenge := `Bearer resource_metadata="` + s.Origin(r) + pathPRM + s.opts.ResourcePath + `"`
	code := "unauthorized"
	if desc != "" {
		code = "invalid_token"
		challenge += `, error="invalid_token", error_description="` + desc + `"`
	} else {
		desc = "a bearer token is required"
	}
	h := w.Header()
	h.Set("WWW-Authenticate", challenge)
	// Browser-based clients must be able to read the challenge.
	h.Add("Access-Control-Expose-Headers", "WWW-Authenticate")
	writeJSONError(w, http.StatusUnauthorized, code, desc)
}

// checkAccessToken finds the token, checks its expiry and resource, and that its grant
// still exists (revoking a grant deletes it).
func (s *Server) checkAccessToken(ctx context.Context, token, resource string) (Identity, error) {
	hash := hashSecret(token)
	now := s.opts.Now()
	if e, ok := s.tokens.get(hash, now); ok {
		if e.resource != resource {
			return Identity{}, errInvalidToken
		}
		return e.identity, nil
	}
	var rec tokenRecord
	issued := s.issuedHere(token)
	// 43 characters: a token of an earlier version, before tokens carried the mark.
	if !issued && !tokenPattern.MatchString(token) {
		return Identity{}, errUnknownToken
	}
	if err := s.store.load(ctx, kindAccess, hash, &rec); err != nil {
		if errors.Is(err, errNotFound) && issued {
			return Identity{}, errInvalidToken // expired and pruned, or revoked
		}
		if errors.Is(err, errNotFound) {
			return Identity{}, errUnknownToken
		}
		return Identity{}, err
	}
	if !now.Before(rec.ExpiresAt) || rec.Resource != resource {
		return Identity{}, errInvalidToken
	}
	var grant grantRecord
	if err := s.store.load(ctx, kindGrants, rec.GrantID, &grant); err != nil {
		if errors.Is(err, errNotFound) {
			return Identity{}, errInvalidToken
		}
		return Identity{}, err
	}
	if !now.Before(grant.ExpiresAt) || grant.ClientID != rec.ClientID || !s.personHolds(grant.Person, grant.PersonKey) {
		return Identity{}, errInvalidToken
	}
	id := Identity{Subject: grant.ID, ClientID: grant.ClientID, ClientName: grant.ClientName, Method: MethodOAuth, Person: grant.Person}
	s.tokens.put(hash, cachedToken{
		identity: id,
		resource: rec.Resource,
		grantID:  grant.ID,
		expires:  minTime(rec.ExpiresAt, now.Add(tokenCacheTTL)),
	})
	return id, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// tokenCache remembers recent positive token checks, keyed by token hash.
type tokenCache struct {
	mu      sync.Mutex
	max     int
	entries map[string]cachedToken
}

type cachedToken struct {
	identity Identity
	resource string
	grantID  string
	expires  time.Time
}

func newTokenCache(maxEntries int) *tokenCache {
	return &tokenCache{max: maxEntries, entries: make(map[string]cachedToken)}
}

func (c *tokenCache) get(hash string, now time.Time) (cachedToken, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[hash]
	if ok && !now.Before(e.expires) {
		delete(c.entries, hash)
		ok = false
	}
	return e, ok
}

func (c *tokenCache) put(hash string, e cachedToken) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[hash]; !ok && len(c.entries) >= c.max {
		// Entries live seconds; when full, start over rather than track order.
		clear(c.entries)
	}
	c.entries[hash] = e
}

func (c *tokenCache) drop(hash string) {
	c.mu.Lock()
	delete(c.entries, hash)
	c.mu.Unlock()
}

func (c *tokenCache) dropGrant(grantID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if e.grantID == grantID {
			delete(c.entries, k)
		}
	}
}
