package mcpsandbox

import (
	"github.com/caddyserver/caddy/v2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/oauth"
)

// guessCounters holds one counter of wrong API keys per key, across config reloads: a
// reload provisions new handlers before the old ones are cleaned up, so the count (and
// a refused address) carries over instead of starting afresh. Every place a key can be
// guessed counts in it: the OAuth sign-in page and bearer tokens on /mcp (package oauth),
// the console's sign-in and API (through the OAuth server's CheckAPIKey), and the preview
// sign-in (package preview). Sites with the same key share it, as they share the secret.
var guessCounters = caddy.NewUsagePool()

// guessCounter is a pooled counter; there is nothing to release.
type guessCounter struct{ *oauth.GuessLimiter }

func (guessCounter) Destruct() error { return nil }

// provisionGuesses takes this key's counter from the pool. Cleanup gives it back.
func (h *Handler) provisionGuesses() error {
	key := "guesses\x00" + oauth.KeyFingerprint(h.APIKey)
	v, _, err := guessCounters.LoadOrNew(key, func() (caddy.Destructor, error) {
		return guessCounter{oauth.NewGuessLimiter(nil)}, nil
	})
	if err != nil {
		return err
	}
	h.guessKey, h.guesses = key, v.(guessCounter).GuessLimiter
	return nil
}

// releaseGuesses gives back the counter provisionGuesses took, if any.
func (h *Handler) releaseGuesses() error {
	if h.guessKey == "" {
		return nil
	}
	_, err := guessCounters.Delete(h.guessKey)
	h.guessKey = ""
	return err
}
