package oauth

import (
	"errors"
	"net/http"

	"go.uber.org/zap"
)

// serveRevoke is RFC 7009 token revocation. Revoking an access token ends that token;
// revoking a refresh token ends the whole sign-in (its grant) and every token of it.
// Unknown, expired or foreign tokens get 200 too, so the endpoint reveals nothing.
// Client authentication is checked when the request carries any; a request without it
// may still revoke, since holding a token already gives everything revoking takes away.
func (s *Server) serveRevoke(w http.ResponseWriter, r *http.Request) {
	form, terr := parsePostForm(w, r)
	if terr != nil {
		writeTokenError(w, terr)
		return
	}
	client, terr := s.authenticateClient(r, form, false)
	if terr != nil {
		writeTokenError(w, terr)
		return
	}
	token := form.Get("token")
	if token == "" {
		writeTokenError(w, invalidRequest("token is required"))
		return
	}
	hash := hashSecret(token)
	kinds := []string{kindAccess, kindRefresh}
	if form.Get("token_type_hint") == "refresh_token" {
		kinds = []string{kindRefresh, kindAccess}
	}
	ctx := r.Context()
	for _, kind := range kinds {
		var rec tokenRecord
		err := s.store.load(ctx, kind, hash, &rec)
		if errors.Is(err, errNotFound) {
			continue
		}
		if err != nil {
			s.log.Error("loading a token to revoke", zap.Error(err))
			writeTokenError(w, errServer)
			return
		}
		if client != nil && rec.ClientID != client.ID {
			break // not this client's token: nothing to do, and nothing to say
		}
		if kind == kindAccess {
			err = s.store.delete(ctx, kindAccess, hash)
			s.tokens.drop(hash)
		} else {
			err = s.revokeGrant(ctx, rec.GrantID)
		}
		if err != nil {
			s.log.Error("revoking a token", zap.Error(err))
			writeTokenError(w, errServer)
			return
		}
		s.log.Info("revoked a token", zap.String("kind", kind), zap.String("client_id", rec.ClientID))
		break
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}
