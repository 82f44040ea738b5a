// Package secret derives the plugin's secrets, one per use, from its API key.
package secret

import (
	"crypto/hmac"
	"crypto/sha256"
)

// DeriveKey makes a 32-byte secret for one purpose from the API key:
// HMAC-SHA256 keyed with the API key over "mcp-sandbox\x00" + label. Every use of the key
// as a secret (the sign-in form, access tokens, console sessions, download and upload
// links) takes its own label, so the key itself is never an HMAC key of a message an
// attacker chooses, and a value made for one use is worthless for another. Labels name
// the use and a version, e.g. "oauth sign-in form v1". The construction is fixed: links,
// tokens and sessions signed with a derived key must keep verifying after an upgrade.
func DeriveKey(apiKey, label string) []byte {
	m := hmac.New(sha256.New, []byte(apiKey))
	m.Write([]byte("mcp-sandbox\x00" + label))
	return m.Sum(nil)
}
