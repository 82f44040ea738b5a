package oauth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
)

// Keys change: the operator gives a person a new key, or removes the person. Their
// clients go on sending the old key, often many times a minute and often from the
// address of a whole office, and such a retry is no guess at a key. A [KeyHistory]
// remembers a fingerprint of every key a server accepted within RetiredKeyTTL, so
// that a key the configuration no longer has is answered "retired" and is not
// counted in [Guesses].

// RetiredKeyTTL is how long a key that left the configuration is recognised as
// retired rather than counted as a guess.
const RetiredKeyTTL = 30 * 24 * time.Hour

// Bounds of a KeyHistory.
const (
	// keyNoteEvery is how often a server that keeps serving records its keys again.
	keyNoteEvery = time.Hour
	// keyReload is how often the history is read again from storage, to learn the
	// keys other instances sharing it accepted.
	keyReload = 5 * time.Minute
	// maxKnownKeys bounds the fingerprints held.
	maxKnownKeys = 10000
)

// ErrRetiredKey is the error for a key that was valid within RetiredKeyTTL and is
// no longer.
var ErrRetiredKey = errors.New("this key was retired; ask the operator for your new key")

// KeyHistory keeps, in Caddy's storage under <prefix>/<fingerprint>, when each key a
// server accepted was last valid; never a key itself. A fingerprint is an
// HMAC-SHA256 of the key under a random salt kept in the same storage
// (<prefix>/salt), so equal keys match across instances and restarts while the
// stored values alone tell nothing about a key that an offline search of a
// long random key could find. Share one value between the servers of a storage,
// and keep it across reloads, so a key removed by a reload is still known.
type KeyHistory struct {
	storage certmagic.Storage
	prefix  string
	log     *zap.Logger
	now     func() time.Time

	mu      sync.Mutex
	salt    []byte               // nil until read or made
	seen    map[string]time.Time // fingerprint -> when the key was last valid
	loaded  time.Time            // when storage was last read
	loading bool
	noted   map[string]time.Time // fingerprint -> when it was last stored
	pending []string             // keys noted before the salt was known
	closed  bool                 // Close was called: no new background work
	work    sync.WaitGroup       // background reads and writes under way
}

// NewKeyHistory returns a history over storage under prefix (default
// "mcp_sandbox/keys"); now is the clock (nil: time.Now). It reads storage on first use.
func NewKeyHistory(storage certmagic.Storage, prefix string, logger *zap.Logger, now func() time.Time) *KeyHistory {
	if prefix == "" {
		prefix = "mcp_sandbox/keys"
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if now == nil {
		now = time.Now
	}
	return &KeyHistory{storage: storage, prefix: prefix, log: logger, now: now,
		seen: map[string]time.Time{}, noted: map[string]time.Time{}}
}

// fingerprintPattern is a stored fingerprint's name: 32 hex digits.
var fingerprintPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

func (k *KeyHistory) fingerprint(key string) string {
	m := hmac.New(sha256.New, k.salt)
	m.Write([]byte("mcp-sandbox key\x00" + key))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// Load reads the salt (making it the first time) and the fingerprints, and deletes
// those older than RetiredKeyTTL.
func (k *KeyHistory) Load(ctx context.Context) error {
	salt, err := k.loadSalt(ctx)
	if err != nil {
		return err
	}
	keys, err := k.storage.List(ctx, k.prefix, false)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	now := k.now()
	seen := map[string]time.Time{}
	for _, key := range keys {
		fp := path.Base(key)
		if !fingerprintPattern.MatchString(fp) {
			continue
		}
		data, err := k.storage.Load(ctx, key)
		if err != nil {
			continue
		}
		unix, err := strconv.ParseInt(string(data), 10, 64)
		if err != nil {
			continue
		}
		t := time.Unix(unix, 0)
		if now.Sub(t) > RetiredKeyTTL {
			if err := k.storage.Delete(ctx, key); err != nil && !errors.Is(err, fs.ErrNotExist) {
				k.log.Warn("deleting an old key fingerprint", zap.Error(err))
			}
			continue
		}
		if len(seen) < maxKnownKeys {
			seen[fp] = t
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.salt, k.loaded = salt, now
	for fp, t := range k.seen { // noted while storage was being read
		if now.Sub(t) <= RetiredKeyTTL && t.After(seen[fp]) {
			seen[fp] = t
		}
	}
	k.seen = seen
	return nil
}

// loadSalt reads the salt, making and storing one under the storage's lock if there
// is none yet, so that instances sharing the storage agree on it.
func (k *KeyHistory) loadSalt(ctx context.Context) ([]byte, error) {
	name := path.Join(k.prefix, "salt")
	if salt, err := k.storage.Load(ctx, name); err == nil && len(salt) == 32 {
		return salt, nil
	}
	if err := k.storage.Lock(ctx, name); err != nil {
		return nil, err
	}
	defer func() { _ = k.storage.Unlock(context.WithoutCancel(ctx), name) }()
	if salt, err := k.storage.Load(ctx, name); err == nil && len(salt) == 32 {
		return salt, nil
	}
	salt := make([]byte, 32)
	_, _ = rand.Read(salt)
	if err := k.storage.Store(ctx, name, salt); err != nil {
		return nil, err
	}
	return salt, nil
}

// refresh reads storage again in the background when it is due; the caller holds mu.
func (k *KeyHistory) refresh() {
	if k.closed || k.loading || (k.salt != nil && k.now().Sub(k.loaded) < keyReload) {
		return
	}
	k.loading = true
	k.work.Add(1)
	go func() {
		defer k.work.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := k.Load(ctx); err != nil {
			k.log.Warn("reading the fingerprints of past keys", zap.Error(err))
		}
		k.mu.Lock()
		k.loading = false
		if k.salt == nil {
			k.loaded = k.now() // try again after keyReload, not at every request
		}
		pending := k.pending
		k.pending = nil
		k.mu.Unlock()
		if pending != nil {
			k.Note(pending)
		}
	}()
}

// Note records that keys are valid now. What storage already has from less than
// keyNoteEvery ago is not written again; the writes happen in the background.
func (k *KeyHistory) Note(keys []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.salt == nil {
		k.pending = keys // noted once the salt is known
		k.refresh()
		return
	}
	k.refresh()
	now := k.now()
	var due []string
	for _, key := range keys {
		fp := k.fingerprint(key)
		if len(k.seen) < maxKnownKeys || !k.seen[fp].IsZero() {
			k.seen[fp] = now
		}
		if now.Sub(k.noted[fp]) >= keyNoteEvery {
			k.noted[fp] = now
			due = append(due, fp)
		}
	}
	if len(due) == 0 || k.closed {
		return
	}
	k.work.Add(1)
	go func() {
		defer k.work.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		stamp := []byte(strconv.FormatInt(now.Unix(), 10))
		for _, fp := range due {
			if err := k.storage.Store(ctx, path.Join(k.prefix, fp), stamp); err != nil {
				k.log.Warn("recording a key's fingerprint", zap.Error(err))
				k.mu.Lock()
				delete(k.noted, fp)
				k.mu.Unlock()
			}
		}
	}()
}

// Close starts no more background reads or writes and waits for those under way, so
// nothing writes to storage once the history's last user has let it go.
func (k *KeyHistory) Close() {
	k.mu.Lock()
	k.closed = true
	k.mu.Unlock()
	k.work.Wait()
}

// Retired reports whether key was valid within RetiredKeyTTL and current says it no
// longer is. Only a retired key gets an answer of its own: a valid key and a key never
// seen both answer false, so the history tells a guesser nothing.
func (k *KeyHistory) Retired(key string, current func() bool) bool {
	k.mu.Lock()
	k.refresh()
	if k.salt == nil {
		k.mu.Unlock()
		return false
	}
	t, ok := k.seen[k.fingerprint(key)]
	k.mu.Unlock()
	return ok && k.now().Sub(t) <= RetiredKeyTTL && !current()
}
