package mcpsandbox

import (
	"errors"

	"github.com/caddyserver/caddy/v2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/oauth"
)

// guessCounters holds one counter of wrong keys per API key, across config reloads: a
// reload provisions new handlers before the old ones are cleaned up, so the count (and
// a refused address) carries over instead of starting afresh. Every place a key can be
// guessed counts in it: the OAuth sign-in page and bearer tokens on /mcp (package oauth),
// the console's sign-in and API (through the OAuth server's CheckAPIKey), and the preview
// sign-in (package preview). Sites with the same key share it, as they share the secret.
var guessCounters = caddy.NewUsagePool()

// guessCounter is a pooled counter; there is nothing to release.
type guessCounter struct{ *oauth.GuessLimiter }

func (guessCounter) Destruct() error { return nil }

// keyHistories holds one history of the keys accepted per storage, across reloads: a
// reload that removes a person or replaces a key must still know the old key, so
// that the clients retrying it are told it was retired instead of locking out the
// address they share with others. Its fingerprints live in the storage itself, so a
// restart or another instance sharing the storage knows them too.
var keyHistories = caddy.NewUsagePool()

type keyHistory struct{ *oauth.KeyHistory }

func (k keyHistory) Destruct() error { k.Close(); return nil }

// keyHistoryPrefix is where the fingerprints of past keys are kept in storage.
const keyHistoryPrefix = "mcp_sandbox/keys"

// provisionGuesses takes this key's counter and this storage's key history from their
// pools. Cleanup gives them back. Neither reads storage here: the history does on first
// use.
func (h *Handler) provisionGuesses() error {
	key := "guesses\x00" + oauth.KeyFingerprint(h.APIKey)
	v, _, err := guessCounters.LoadOrNew(key, func() (caddy.Destructor, error) {
		return guessCounter{oauth.NewGuessLimiter(nil)}, nil
	})
	if err != nil {
		return err
	}
	h.guessKey, h.guesses = key, v.(guessCounter).GuessLimiter

	st, logger := h.storage, h.logger.Named("oauth")
	hkey := "keys\x00" + storageID(st)
	v, _, err = keyHistories.LoadOrNew(hkey, func() (caddy.Destructor, error) {
		return keyHistory{oauth.NewKeyHistory(st, keyHistoryPrefix, logger, nil)}, nil
	})
	if err != nil {
		return err
	}
	h.historyKey, h.keyHistory = hkey, v.(keyHistory).KeyHistory
	return nil
}

// releaseGuesses gives back what provisionGuesses took, if anything.
func (h *Handler) releaseGuesses() error {
	var errs []error
	if h.guessKey != "" {
		_, err := guessCounters.Delete(h.guessKey)
		errs = append(errs, err)
		h.guessKey = ""
	}
	if h.historyKey != "" {
		_, err := keyHistories.Delete(h.historyKey)
		errs = append(errs, err)
		h.historyKey = ""
	}
	return errors.Join(errs...)
}
