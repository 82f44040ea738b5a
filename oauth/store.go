package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
)

// Storage layout, under <StoragePrefix>/<key fingerprint>/, one JSON object per key so
// every write replaces a whole object (certmagic's FileStorage writes through a temporary
// file and a rename, so readers never see half an object):
//
//	clients/<client id>        a dynamically registered client (secret only as a hash)
//	codes/<sha256 of code>     an authorization code; kept after use, to detect reuse
//	grants/<grant id>          one sign-in: client, resource, scope, current refresh hash
//	access/<sha256 of token>   an access token, pointing at its grant
//	refresh/<sha256 of token>  a refresh token, pointing at its grant; kept after rotation
//	                           until it expires, to detect reuse
//
// Secrets (tokens, codes, client secrets) are only ever stored as SHA-256 hashes: they are
// 256-bit random values, so an unsalted hash cannot be reversed, and a storage leak does
// not leak a usable credential.
const (
	kindClients = "clients"
	kindCodes   = "codes"
	kindGrants  = "grants"
	kindAccess  = "access"
	kindRefresh = "refresh"
)

// errNotFound means the entry is missing or unreadable; either way the thing it describes
// does not exist for us.
var errNotFound = errors.New("not found")

// idPattern is what may become a storage key component. Every load, save, delete and
// lock checks it, whether the id came from a request or from a stored entry (which could
// have been tampered with), so nothing can name a key outside the prefix, such as
// Caddy's certificates in the same storage.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// clientRecord is a dynamically registered client.
type clientRecord struct {
	ID               string    `json:"client_id"`
	SecretHash       string    `json:"client_secret_sha256,omitempty"`
	Name             string    `json:"client_name,omitempty"`
	RedirectURIs     []string  `json:"redirect_uris"`
	AuthMethod       string    `json:"token_endpoint_auth_method"`
	GrantTypes       []string  `json:"grant_types"`
	ResponseTypes    []string  `json:"response_types"`
	CreatedAt        time.Time `json:"created_at"`
	LastSignInAt     time.Time `json:"last_sign_in_at,omitzero"`
	metadataDocument bool      // fetched from a client ID metadata document, never stored
}

// codeRecord is an authorization code.
type codeRecord struct {
	ClientID         string    `json:"client_id"`
	ClientName       string    `json:"client_name,omitempty"`
	RedirectURI      string    `json:"redirect_uri"`
	RedirectURIGiven bool      `json:"redirect_uri_given"`
	Challenge        string    `json:"code_challenge"`
	Resource         string    `json:"resource"`
	Scope            string    `json:"scope"`
	ExpiresAt        time.Time `json:"expires_at"`
	// UsedGrant is the grant the code was redeemed for; a second redemption revokes it.
	UsedGrant string `json:"used_grant,omitempty"`
	// Person signed in with their key ("" for the operator); PersonKey is its
	// fingerprint.
	Person    string `json:"person,omitempty"`
	PersonKey string `json:"person_key,omitempty"`
}

// grantRecord is one sign-in. Revoking it (deleting it) kills every token it issued,
// because tokens are only valid while their grant exists.
type grantRecord struct {
	ID          string    `json:"id"`
	ClientID    string    `json:"client_id"`
	ClientName  string    `json:"client_name,omitempty"`
	Resource    string    `json:"resource"`
	Scope       string    `json:"scope"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	RefreshHash string    `json:"refresh_sha256"`
	// PrevRefreshHash is the refresh token the last rotation replaced, RotatedAt when,
	// and Retry that rotation's answer sealed with it, for a retry within
	// refreshRetryWindow (see Server.refresh).
	PrevRefreshHash string    `json:"prev_refresh_sha256,omitempty"`
	RotatedAt       time.Time `json:"rotated_at,omitzero"`
	Retry           string    `json:"retry,omitempty"`
	// AccessHashes are the unexpired access tokens issued under the grant, deleted with it.
	AccessHashes []tokenRef `json:"access_tokens,omitempty"`
	// Person and PersonKey are the code's: the grant holds only while the person keeps
	// that key (see personHolds).
	Person    string `json:"person,omitempty"`
	PersonKey string `json:"person_key,omitempty"`
}

type tokenRef struct {
	Hash      string    `json:"sha256"`
	ExpiresAt time.Time `json:"expires_at"`
}

// tokenRecord is an access or a refresh token.
type tokenRecord struct {
	GrantID   string    `json:"grant"`
	ClientID  string    `json:"client_id"`
	Resource  string    `json:"resource"`
	Scope     string    `json:"scope"`
	ExpiresAt time.Time `json:"expires_at"`
}

// store keeps records in a certmagic.Storage under a prefix.
type store struct {
	storage certmagic.Storage
	prefix  string
	log     *zap.Logger

	locksMu sync.Mutex
	locks   map[string]*keyLock
}

func (st *store) key(kind, id string) string { return path.Join(st.prefix, kind, id) }

// errBadID refuses a save, delete or lock of an id outside idPattern.
var errBadID = errors.New("invalid OAuth storage id")

func checkID(kind, id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%w in %s: %.40q", errBadID, kind, id)
	}
	return nil
}

// load decodes the entry into v. Missing and corrupt entries both give errNotFound; a
// corrupt one is logged (by key, which holds no secret) and left alone for a person to
// inspect, and it never affects any other entry.
func (st *store) load(ctx context.Context, kind, id string, v any) error {
	if !idPattern.MatchString(id) {
		return errNotFound
	}
	k := st.key(kind, id)
	data, err := st.storage.Load(ctx, k)
	if errors.Is(err, fs.ErrNotExist) {
		return errNotFound
	}
	if err != nil {
		return fmt.Errorf("loading %s: %w", k, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		st.log.Warn("ignoring unreadable OAuth entry", zap.String("key", k), zap.Error(err))
		return errNotFound
	}
	return nil
}

func (st *store) save(ctx context.Context, kind, id string, v any) error {
	if err := checkID(kind, id); err != nil {
		return err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s entry: %w", kind, err)
	}
	k := st.key(kind, id)
	if err := st.storage.Store(ctx, k, data); err != nil {
		return fmt.Errorf("storing %s: %w", k, err)
	}
	return nil
}

func (st *store) delete(ctx context.Context, kind, id string) error {
	if err := checkID(kind, id); err != nil {
		return err
	}
	k := st.key(kind, id)
	err := st.storage.Delete(ctx, k)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting %s: %w", k, err)
	}
	return nil
}

// list returns the ids of every entry of a kind.
func (st *store) list(ctx context.Context, kind string) ([]string, error) {
	dir := path.Join(st.prefix, kind)
	keys, err := st.storage.List(ctx, dir, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	ids := make([]string, 0, len(keys))
	for _, k := range keys {
		id := path.Base(k)
		if idPattern.MatchString(id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// keyLock serialises one name within this process, so concurrent requests here do not
// poll the storage lock (FileStorage polls once a second).
type keyLock struct {
	mu   sync.Mutex
	refs int
}

// lockTimeout bounds the wait for a storage lock held by another instance.
const lockTimeout = 15 * time.Second

// lock takes the in-process lock and then the storage lock for name, so that a
// read-modify-write of one grant or code happens once across every instance sharing the
// storage. The returned function releases both.
func (st *store) lock(ctx context.Context, kind, id string) (func(), error) {
	if err := checkID(kind, id); err != nil {
		return nil, err
	}
	name := st.key(kind, id)
	st.locksMu.Lock()
	if st.locks == nil {
		st.locks = make(map[string]*keyLock)
	}
	l := st.locks[name]
	if l == nil {
		l = &keyLock{}
		st.locks[name] = l
	}
	l.refs++
	st.locksMu.Unlock()
	release := func() {
		st.locksMu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(st.locks, name)
		}
		st.locksMu.Unlock()
	}
	l.mu.Lock()

	lctx, cancel := context.WithTimeout(ctx, lockTimeout)
	defer cancel()
	if err := st.storage.Lock(lctx, name); err != nil {
		l.mu.Unlock()
		release()
		return nil, fmt.Errorf("locking %s: %w", name, err)
	}
	return func() {
		// Unlock with a fresh context: the request may be gone, the lock must still go.
		uctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
		defer cancel()
		if err := st.storage.Unlock(uctx, name); err != nil {
			st.log.Error("releasing OAuth storage lock", zap.String("lock", name), zap.Error(err))
		}
		l.mu.Unlock()
		release()
	}, nil
}

// randomToken returns 32 random bytes, base64url without padding (43 characters).
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// randomID returns a 128-bit random identifier that is also a valid storage key.
func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// hashSecret is how tokens, codes and client secrets are stored and looked up.
func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}
