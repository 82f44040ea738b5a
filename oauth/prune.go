package oauth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Prune deletes expired codes, tokens and grants, tokens whose grant is gone, registered
// clients that never led to a sign-in after 24 hours, and registered clients with no live
// sign-in that have been unused for 30 days. Entries it
// cannot read are left alone (and logged when read). It keeps going past individual
// failures and returns them joined. Call it periodically; it is safe to run on several
// instances at once.
func (s *Server) Prune(ctx context.Context) error {
	now := s.opts.Now()
	var errs []error
	inUse := make(map[string]bool) // clients with a live code or grant
	liveGrants := make(map[string]bool)

	ids, err := s.store.list(ctx, kindCodes)
	errs = append(errs, err)
	for _, id := range ids {
		var c codeRecord
		if s.store.load(ctx, kindCodes, id, &c) != nil {
			continue
		}
		if now.Before(c.ExpiresAt) {
			inUse[c.ClientID] = true
			continue
		}
		errs = append(errs, s.store.delete(ctx, kindCodes, id))
	}

	ids, err = s.store.list(ctx, kindGrants)
	errs = append(errs, err)
	for _, id := range ids {
		var g grantRecord
		if s.store.load(ctx, kindGrants, id, &g) != nil {
			continue
		}
		if now.Before(g.ExpiresAt) {
			liveGrants[id] = true
			inUse[g.ClientID] = true
			continue
		}
		errs = append(errs, s.store.delete(ctx, kindGrants, id))
	}

	// grantLive re-reads a grant not seen above: it may have been created since.
	grantLive := func(id string) bool {
		if liveGrants[id] {
			return true
		}
		var g grantRecord
		if err := s.store.load(ctx, kindGrants, id, &g); err != nil {
			return !errors.Is(err, errNotFound) // unreadable storage: keep the token
		}
		live := now.Before(g.ExpiresAt)
		liveGrants[id] = live
		return live
	}
	for _, kind := range []string{kindAccess, kindRefresh} {
		ids, err := s.store.list(ctx, kind)
		errs = append(errs, err)
		for _, id := range ids {
			if err := ctx.Err(); err != nil {
				return err
			}
			var t tokenRecord
			if s.store.load(ctx, kind, id, &t) != nil {
				continue
			}
			if now.Before(t.ExpiresAt) && grantLive(t.GrantID) {
				continue
			}
			errs = append(errs, s.store.delete(ctx, kind, id))
		}
	}

	n, err := s.pruneClients(ctx, now, unusedClientTTL, inUse)
	errs = append(errs, err)
	if err == nil {
		s.clientCountMu.Lock()
		s.clientCount = n
		s.clientCountMu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pruning OAuth state: %w", err)
	}
	return nil
}

// pruneClients deletes registered clients and returns how many remain. With inUse (the
// clients that have a live code or grant) it deletes every other client whose
// registration and last sign-in are older than age, and every other client that never
// signed in and registered more than neverUsedClientTTL ago. Without it, it deletes only clients
// that never signed in and registered longer than age ago: the cheap pass used when the
// client cap is reached.
func (s *Server) pruneClients(ctx context.Context, now time.Time, age time.Duration, inUse map[string]bool) (int, error) {
	ids, err := s.store.list(ctx, kindClients)
	if err != nil {
		return 0, err
	}
	remaining := len(ids)
	var errs []error
	for _, id := range ids {
		var c clientRecord
		if s.store.load(ctx, kindClients, id, &c) != nil {
			continue
		}
		var drop bool
		if inUse == nil {
			drop = c.LastSignInAt.IsZero() && now.Sub(c.CreatedAt) > age
		} else {
			last := c.CreatedAt
			if c.LastSignInAt.After(last) {
				last = c.LastSignInAt
			}
			drop = !inUse[id] && (now.Sub(last) > age ||
				(c.LastSignInAt.IsZero() && now.Sub(c.CreatedAt) > neverUsedClientTTL))
		}
		if !drop {
			continue
		}
		if err := s.store.delete(ctx, kindClients, id); err != nil {
			errs = append(errs, err)
			continue
		}
		remaining--
		s.log.Debug("pruned an unused OAuth client", zap.String("client_id", id))
	}
	return remaining, errors.Join(errs...)
}
