// Package oauth is the OAuth 2.1 authorization server and resource-server check of the MCP
// sandbox. It publishes RFC 9728 protected resource metadata and RFC 8414 authorization
// server metadata, registers clients (RFC 7591 dynamic registration and client ID metadata
// documents), shows a sign-in page that asks for the API key, issues PKCE-bound codes and
// rotating refresh tokens, revokes them (RFC 7009) and checks bearer tokens on the
// protected resource. All state lives in a [certmagic.Storage], so several servers sharing
// one storage agree, and a restart keeps every sign-in.
//
// The package knows nothing of Docker, MCP or Caddy modules: a host routes the paths
// [Server.Handles] claims to [Server.ServeHTTP], calls [Server.Authenticate] in front of
// the protected resource, and calls [Server.Prune] now and then.
//
// # Decisions
//
// Issuer and resource. The issuer is the origin (Options.PublicURL, or the scheme and
// Host of the request), with no trailing slash; every endpoint sits at its root. The one
// protected resource is origin+ResourcePath. An RFC 8707 resource parameter may spell it
// exactly, with a trailing slash, or as the bare origin (scheme and host compare
// case-insensitively); anything else is invalid_target. Tokens record the canonical
// resource URL and [Server.Authenticate] accepts them only there, so the same server
// reached under another name does not accept them.
//
// Clients. A client_id that is an https URL is a client ID metadata document: fetched
// (5 s, 16 KiB, no redirects, public addresses only, checked at dial time), it must name
// itself, list its redirect URIs and be a public client; it is cached in memory for its
// Cache-Control max-age within 1 minute to 24 hours (10 minutes by default) and never
// stored. At most 8 fetches run at once for the whole server; a fetch ends when no
// request waits for it any more; a failure is remembered for a minute and shown to the
// caller only as "could not be fetched" (the reason is logged). The token endpoint does
// not fetch it again: such clients are public and their
// codes and grants already bind the client_id, so refreshing keeps working while the
// client's site is unreachable. Other clients register at /register: at most 16 KiB of metadata, 10 redirect
// URIs of 1 KiB, a 200-character name, 30 registrations per address per 10 minutes and
// [MaxClients] in all, kept as a count; a registration that never leads to a sign-in is
// pruned after 24 hours. Names with control or format characters (bidi overrides) are
// refused. Redirect URIs are https, http on loopback (any port at authorization time,
// RFC 8252), or a native app's private-use scheme; never fragments, credentials, or
// javascript:, data:, file: and the like; http(s) hosts must be IP literals or DNS names
// (checked in their punycode form) with a numeric port, since they reach the page's CSP.
//
// Errors at /authorize are shown on the page, never sent to the redirect URI: before the
// person has signed in, redirecting would make the server an open redirector (RFC 9700
// section 4.11.2).
//
// Sign-in. The page needs no script and allows nothing but its inline style; it cannot be
// framed, is not cached and sends no referrer. Its form carries an HMAC over the
// authorization request and an expiry (30 minutes), keyed by a secret derived from the
// API key, so it survives restarts and works across instances. The key is compared as
// SHA-256 hashes in constant time. Each distinct wrong key counts against the client
// address (a key retried counts once): from the sixth in 15 minutes answers are delayed
// (1 s more each, up to 5 s), after the tenth the address is blocked, and a key it has
// not tried yet is looked at only once a wait is over: 10 s, doubling with each wrong
// key up to 2 minutes, so a valid key behind a guesser's address still gets in while
// guessing stays slower than before the block. With Options.APIKeyBearer, bearer tokens
// at [Server.Authenticate] that this server never issued count in the same limiter, so
// the key cannot be guessed there either. The limiter is Options.Guesses ([Guesses]): a
// host shares one between servers and other sign-in pages of the same key, and keeps it
// across reloads. With Options.KeyHistory ([KeyHistory]) a key this site accepted within
// 30 days and no longer does (a person removed, a key replaced) is answered "retired"
// and never counted. Redirect hosts are shown in punycode.
//
// Tokens. Codes live 5 minutes (Options.CodeTTL), are single use and bound to client,
// redirect URI, PKCE S256 challenge and resource; a reused code revokes what it issued.
// Access tokens (1 h) and refresh tokens (30 days, rotated on every use) are 256-bit
// random strings stored only as SHA-256 hashes; an access token also carries a MAC of its
// random part, so that one issued here is known as such after it expired or was revoked
// and its record is gone (a client retrying with it is not guessing the key). The refresh token just rotated away gets
// the same new pair again for 30 seconds (a lost response, or concurrent refreshes), kept
// sealed with a key derived from that token; after that, or for any older token, reuse
// revokes the sign-in.
// Each sign-in is a grant; tokens are valid only while their grant exists, so revoking
// means deleting the grant. Code redemption and refresh run under the storage lock of the
// code or grant, so concurrent requests, also on several instances, issue once; a code
// is checked (shape, existence, owner, expiry) before its lock is taken, so made-up
// codes never lock.
//
// Caching. A successful token check is cached in memory for 5 seconds: a token revoked
// through another instance sharing the storage works here for at most that long, one
// revoked through this instance stops at once. Failed checks are not cached.
//
// Storage. Everything is under StoragePrefix plus a fingerprint of the API key
// ([KeyFingerprint]), so a new key invalidates every client and token without deleting
// anything. Each object is one JSON key written whole. Every id that becomes part of a
// key is checked against one pattern on load, save, delete and lock, stored or not. An unreadable entry is logged and
// treated as absent; it never affects another entry and Prune leaves it for inspection.
package oauth
