package oauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"slices"
	"time"

	"go.uber.org/zap"
)

// This file is the operator's view of the server: who registered, who holds a sign-in,
// revoking one, and the API-key check other sign-in pages share with /authorize.

// ClientInfo describes a dynamically registered client.
type ClientInfo struct {
	ID           string    `json:"client_id"`
	Name         string    `json:"client_name,omitempty"`
	RedirectURIs []string  `json:"redirect_uris"`
	AuthMethod   string    `json:"token_endpoint_auth_method"`
	CreatedAt    time.Time `json:"created_at"`
	LastSignInAt time.Time `json:"last_sign_in_at,omitzero"`
}

// GrantInfo describes one live sign-in: the tokens of one authorization.
type GrantInfo struct {
	ID         string    `json:"id"`
	ClientID   string    `json:"client_id"`
	ClientName string    `json:"client_name,omitempty"`
	Person     string    `json:"person,omitempty"` // "" for the operator
	Resource   string    `json:"resource"`
	Scope      string    `json:"scope"`
	CreatedAt  time.Time `json:"created_at"`
	// RefreshedAt is when the client last got tokens (the sign-in or a refresh).
	RefreshedAt time.Time `json:"refreshed_at"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// ErrGrantNotFound is returned by [Server.RevokeGrant] for an unknown or expired grant.
var ErrGrantNotFound = errors.New("no such sign-in")

// Clients lists the registered clients, newest first. Clients identified by a client ID
// metadata document are not registered; they appear only in [Server.Grants].
func (s *Server) Clients(ctx context.Context) ([]ClientInfo, error) {
	ids, err := s.store.list(ctx, kindClients)
	if err != nil {
		return nil, err
	}
	out := make([]ClientInfo, 0, len(ids))
	for _, id := range ids {
		var c clientRecord
		if err := s.store.load(ctx, kindClients, id, &c); err != nil {
			continue
		}
		out = append(out, ClientInfo{ID: c.ID, Name: c.Name, RedirectURIs: c.RedirectURIs, AuthMethod: c.AuthMethod,
			CreatedAt: c.CreatedAt, LastSignInAt: c.LastSignInAt})
	}
	slices.SortFunc(out, func(a, b ClientInfo) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

// Grants lists the unexpired sign-ins, newest first.
func (s *Server) Grants(ctx context.Context) ([]GrantInfo, error) {
	ids, err := s.store.list(ctx, kindGrants)
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	out := make([]GrantInfo, 0, len(ids))
	for _, id := range ids {
		var g grantRecord
		if err := s.store.load(ctx, kindGrants, id, &g); err != nil || !now.Before(g.ExpiresAt) {
			continue
		}
		if !s.personHolds(g.Person, g.PersonKey) {
			continue // the person was removed, or has a new key: the sign-in no longer holds
		}
		out = append(out, GrantInfo{ID: g.ID, ClientID: g.ClientID, ClientName: g.ClientName, Person: g.Person, Resource: g.Resource,
			Scope: g.Scope, CreatedAt: g.CreatedAt, RefreshedAt: g.ExpiresAt.Add(-s.opts.RefreshTokenTTL), ExpiresAt: g.ExpiresAt})
	}
	slices.SortFunc(out, func(a, b GrantInfo) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

// RevokeGrant ends a sign-in: its access and refresh tokens stop working at once on this
// instance (and within the token cache lifetime on others sharing the storage).
func (s *Server) RevokeGrant(ctx context.Context, id string) error {
	var g grantRecord
	if err := s.store.load(ctx, kindGrants, id, &g); err != nil {
		if errors.Is(err, errNotFound) {
			return ErrGrantNotFound
		}
		return err
	}
	if err := s.revokeGrant(ctx, id); err != nil {
		return err
	}
	s.log.Info("revoked a sign-in", zap.String("grant", id), zap.String("client_id", g.ClientID))
	return nil
}

// CheckAPIKey checks a key typed on a sign-in page other than /authorize (the
// operator's console) under the same per-address limit: wrong keys from both pages
// count together, a wrong key beyond the first few is answered only after a growing
// delay, and an address over the limit is refused without the key being looked at
// (retryAfter > 0 then says for how long). A key retired within RetiredKeyTTL is
// refused with ErrRetiredKey and not counted.
func (s *Server) CheckAPIKey(r *http.Request, key string) (ok bool, retryAfter time.Duration, err error) {
	s.noteKeys()
	ip := s.clientKey(r)
	if s.retired(key) {
		s.log.Info("a retired key", zap.String("remote", ip))
		return false, 0, ErrRetiredKey
	}
	good, n, retry := s.guesses.Try(ip, key, func() bool {
		given := sha256.Sum256([]byte(key))
		return subtle.ConstantTimeCompare(given[:], s.keyHash[:]) == 1
	})
	switch {
	case retry > 0:
		s.log.Warn("sign-in refused after repeated wrong keys", zap.String("remote", ip))
		return false, retry, nil
	case !good:
		s.log.Info("wrong API key", zap.String("remote", ip), zap.Int("failures", n))
		if d := signinDelay(n); d > 0 {
			s.sleep(r, d)
		}
		return false, 0, nil
	}
	return true, 0, nil
}
