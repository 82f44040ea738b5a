package preview

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"time"

	"go.uber.org/zap"
)

// Previews in Caddy's storage, so that Caddy instances sharing it (behind a balancer
// with no affinity) each serve the previews made through any of them:
//
//   - mcp_sandbox/previews/<label>: the preview (owner, domain, port, expiry), what an
//     instance reads when asked for a label it does not hold;
//   - mcp_sandbox/preview_owners/<hash of the owner>: the owner's previews, changed
//     under the storage's lock of that key, so that exposing a port that is live
//     already keeps its label whichever instance is asked, and unexposing it ends it
//     everywhere.
//
// An instance holds what it made or served, and lists the labels in storage every
// recheckEvery while it holds any: a preview whose record is gone (unexposed through
// another instance) ends here then, with its open streams. At its expiry it reads the
// record, which another instance may have renewed.
//
// A record nobody holds any more (its owner never exposes again, every instance that
// served it restarted, or the owner's list was not written) would stay in every
// listing: at most once per sweepEvery, an instance that lists the labels reads the
// records it does not hold and has not read since their expiry, and removes the
// expired ones.
const (
	recordPrefix = "mcp_sandbox/previews/"
	ownerPrefix  = "mcp_sandbox/preview_owners/"

	// recheckEvery is how stale this process's view of a preview kept in storage may
	// be: an unexpose through another instance ends it here within that.
	recheckEvery = 2 * time.Second
	// listEvery is the most often the labels in storage are listed. A request for a
	// label this process does not hold waits for a listing that started after it
	// came, so a scan of random host names costs at most one listing per listEvery,
	// and no read of a record.
	listEvery = 500 * time.Millisecond
	// storageTimeout bounds one storage operation, lock included: longer than the
	// 10 s after which Caddy's file storage takes over a lock left by an instance that
	// was killed holding it.
	storageTimeout = 15 * time.Second
	// listTries is how many times a listing that a write disturbed is tried before it
	// counts as failed.
	listTries = 3
	// sweepEvery is the most often an instance looks for expired records, and how
	// long after it starts using storage it first does; sweepReads bounds the
	// records one sweep reads, and a damaged record is read again after
	// damagedAgain.
	sweepEvery   = time.Minute
	sweepReads   = 100
	damagedAgain = time.Hour
)

// errDamaged is what reading a record that is not one returns.
var errDamaged = errors.New("damaged")

// Storage is what previews need of Caddy's storage (certmagic.Storage has it): keys
// that hold bytes, listed by prefix, and locks that hold across the instances sharing
// it. Load and List report a missing key with an error wrapping fs.ErrNotExist;
// Exists reports whether a key, or a prefix of keys, is there.
type Storage interface {
	Load(ctx context.Context, key string) ([]byte, error)
	Store(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
	Exists(ctx context.Context, key string) bool
	List(ctx context.Context, prefix string, recursive bool) ([]string, error)
	Lock(ctx context.Context, name string) error
	Unlock(ctx context.Context, name string) error
}

// record is a preview in storage; its label is its key's last part.
type record struct {
	Owner   string    `json:"owner"`
	Domain  string    `json:"domain"`
	Port    int       `json:"port"`
	Expires time.Time `json:"expires"`
}

// ownerIndex is an owner's previews in storage.
type ownerIndex struct {
	Previews []indexed `json:"previews"`
}

// indexed is one preview of an owner.
type indexed struct {
	Label   string    `json:"label"`
	Domain  string    `json:"domain"`
	Port    int       `json:"port"`
	Expires time.Time `json:"expires"`
}

// ownerKey is where owner's previews are listed. An owner is the Docker host and the
// container, which a storage key cannot always hold: it is hashed.
func ownerKey(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return ownerPrefix + hex.EncodeToString(sum[:16])
}

// UseStorage keeps previews in st from now on (nil: in this process only), and logs
// storage failures to log. Every instance with the same configuration names a
// sandbox by the same owner, so a preview made through one opens through all.
func (r *Registry) UseStorage(st Storage, log *zap.Logger) {
	if log == nil {
		log = zap.NewNop()
	}
	r.log.Store(log)
	r.mu.Lock()
	r.st = st
	r.mu.Unlock()
	r.lmu.Lock()
	r.listed, r.labels, r.listErr = time.Time{}, nil, nil
	if r.swept.IsZero() {
		r.swept = r.now()
	}
	r.lmu.Unlock()
}

func (r *Registry) storage() Storage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

// exposeStored is Expose through storage, under the lock of the owner's previews.
func (r *Registry) exposeStored(ctx context.Context, st Storage, owner, domain string, port int, ttl time.Duration) (Preview, error) {
	key := ownerKey(owner)
	if err := st.Lock(ctx, key); err != nil {
		return Preview{}, fmt.Errorf("locking %s: %w", key, err)
	}
	defer r.unlock(ctx, st, key)
	idx, err := loadIndex(ctx, st, key)
	if err != nil {
		return Preview{}, err
	}
	now := r.now()
	expires := now.Add(ttl)
	label := ""
	var kept []indexed
	var gone []string
	for _, p := range idx.Previews {
		switch {
		case !now.Before(p.Expires):
			gone = append(gone, p.Label)
			continue
		case label == "" && p.Domain == domain && p.Port == port:
			label, p.Expires = p.Label, expires
		}
		kept = append(kept, p)
	}
	added := label == ""
	if added {
		label = r.heldLabel(owner, domain, port) // made while storage failed
		if label == "" {
			label = newLabel()
		}
		kept = append(kept, indexed{Label: label, Domain: domain, Port: port, Expires: expires})
	}
	rec := record{Owner: owner, Domain: domain, Port: port, Expires: expires}
	b, _ := json.Marshal(rec)
	if err := st.Store(ctx, recordPrefix+label, b); err != nil {
		return Preview{}, fmt.Errorf("storing preview %s: %w", label, err)
	}
	if err := storeIndex(ctx, st, key, kept); err != nil {
		if added {
			// A new record the owner's list does not name: nothing would remove it
			// but a sweep, after its expiry.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storageTimeout)
			defer cancel()
			if err := st.Delete(dctx, recordPrefix+label); err != nil && !isNotExist(err) {
				r.log.Load().Warn("removing a preview whose owner's list was not written", zap.Error(err))
			}
		}
		return Preview{}, err
	}
	for _, l := range gone {
		if err := st.Delete(ctx, recordPrefix+l); err != nil && !isNotExist(err) {
			r.log.Load().Warn("removing an expired preview from storage", zap.Error(err))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(r.now())
	return r.holdLocked(label, rec, r.now()), nil
}

// heldLabel is the label of the live preview of port of owner under domain that this
// process holds, or "".
func (r *Registry) heldLabel(owner, domain string, port int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for l, e := range r.byLabel {
		if e.Owner == owner && e.Domain == domain && e.Port == port && now.Before(e.Expires) {
			return l
		}
	}
	return ""
}

// removeStored takes out of storage, under the lock of the owner's previews, those
// that match and those expired. It reports whether a live one matched.
func (r *Registry) removeStored(ctx context.Context, st Storage, owner string, match func(indexed) bool) (bool, error) {
	key := ownerKey(owner)
	if err := st.Lock(ctx, key); err != nil {
		return false, fmt.Errorf("locking %s: %w", key, err)
	}
	defer r.unlock(ctx, st, key)
	return r.removeStoredLocked(ctx, st, key, match)
}

// removeExpired takes out of storage, under the lock of owner's previews, the
// owner's expired previews and the record of label when it has expired, whether or
// not the owner's list names it. Read under the lock, the record shows any renewal.
func (r *Registry) removeExpired(ctx context.Context, st Storage, owner, label string) error {
	key := ownerKey(owner)
	if err := st.Lock(ctx, key); err != nil {
		return fmt.Errorf("locking %s: %w", key, err)
	}
	defer r.unlock(ctx, st, key)
	if _, err := r.removeStoredLocked(ctx, st, key, func(indexed) bool { return false }); err != nil {
		return err
	}
	rec, err := loadRecord(ctx, st, label)
	if isNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if r.now().Before(rec.Expires) || rec.Owner != owner {
		return nil
	}
	if err := st.Delete(ctx, recordPrefix+label); err != nil && !isNotExist(err) {
		return fmt.Errorf("removing preview %s: %w", label, err)
	}
	return nil
}

// removeStoredLocked is removeStored for the caller that holds the lock of key.
func (r *Registry) removeStoredLocked(ctx context.Context, st Storage, key string, match func(indexed) bool) (bool, error) {
	idx, err := loadIndex(ctx, st, key)
	if err != nil {
		return false, err
	}
	now := r.now()
	found := false
	var kept []indexed
	for _, p := range idx.Previews {
		live := now.Before(p.Expires)
		if live && !match(p) {
			kept = append(kept, p)
			continue
		}
		found = found || live
		// The record first: it is what the other instances look for.
		if err := st.Delete(ctx, recordPrefix+p.Label); err != nil && !isNotExist(err) {
			return false, fmt.Errorf("removing preview %s: %w", p.Label, err)
		}
	}
	if len(kept) == len(idx.Previews) {
		return found, nil
	}
	return found, storeIndex(ctx, st, key, kept)
}

// unlock lets go of the storage lock name, even when ctx is done.
func (r *Registry) unlock(ctx context.Context, st Storage, name string) {
	if err := st.Unlock(context.WithoutCancel(ctx), name); err != nil {
		r.log.Load().Warn("releasing a storage lock", zap.String("lock", name), zap.Error(err))
	}
}

// lookupStored finds in storage a label this process does not hold, and holds it from
// then on. Only a label of the latest listing is read.
func (r *Registry) lookupStored(ctx context.Context, st Storage, label string) (Preview, bool) {
	labels, err := r.listLabels(ctx, st, r.now())
	if err != nil {
		if ctx.Err() == nil {
			r.failed("listing previews in storage", err)
		}
		return Preview{}, false
	}
	if !labels[label] {
		return Preview{}, false
	}
	rec, err := loadRecord(ctx, st, label)
	if err != nil {
		if !isNotExist(err) && ctx.Err() == nil {
			r.failed("reading a preview from storage", err)
		}
		return Preview{}, false
	}
	r.succeeded()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if !now.Before(rec.Expires) {
		return Preview{}, false
	}
	return r.holdLocked(label, rec, now), true
}

// listLabels returns the labels in storage as a listing that started at since or
// later found them. Listings are shared by everyone waiting for one, and start at
// most once per listEvery.
func (r *Registry) listLabels(ctx context.Context, st Storage, since time.Time) (map[string]bool, error) {
	for {
		r.lmu.Lock()
		if !r.listed.IsZero() && !r.listed.Before(since) {
			labels, err := r.labels, r.listErr
			r.lmu.Unlock()
			return labels, err
		}
		if wait := r.listing; wait != nil {
			r.lmu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if d := r.listed.Add(listEvery).Sub(r.now()); !r.listed.IsZero() && d > 0 {
			r.lmu.Unlock()
			t := time.NewTimer(d)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		r.listing = done
		started := r.now()
		r.lmu.Unlock()

		// Whoever waits for it is served, though the request that started it ends.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storageTimeout)
		labels, err := listRecords(lctx, st)
		cancel()
		r.lmu.Lock()
		r.listing = nil
		// A failed listing counts too, so that a failing storage is not asked more
		// often than a working one.
		r.listed, r.labels, r.listErr = started, labels, err
		sweep := err == nil && !r.sweeping && !r.now().Before(r.swept.Add(sweepEvery))
		r.sweeping = r.sweeping || sweep
		close(done)
		r.lmu.Unlock()
		if sweep {
			go r.sweep(st, labels)
		}
		return labels, err
	}
}

// listRecords lists the labels of the previews in storage. Caddy's file storage writes
// a key through a temporary file beside it, renamed into place; a listing that meets
// one renamed away fails with fs.ErrNotExist, having found only part of the records.
// So that error means no previews only when the prefix itself is missing; else the
// listing is tried again, then counts as failed. (A storage may say a prefix is
// missing when it failed to look: the re-check reads a record before it ends a
// preview.) Keys that are not labels (those temporary files) are left out.
func listRecords(ctx context.Context, st Storage) (map[string]bool, error) {
	prefix := path.Clean(recordPrefix)
	for try := 1; ; try++ {
		keys, err := st.List(ctx, prefix, false)
		if isNotExist(err) {
			if !st.Exists(ctx, prefix) {
				return map[string]bool{}, nil
			}
			if try < listTries && ctx.Err() == nil {
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", recordPrefix, err)
		}
		labels := make(map[string]bool, len(keys))
		for _, k := range keys {
			if l := path.Base(k); validLabel(l) {
				labels[l] = true
			}
		}
		return labels, nil
	}
}

// armRecheckLocked makes sure the previews held from storage are checked against it
// in recheckEvery; the caller holds mu.
func (r *Registry) armRecheckLocked() {
	if r.recheck == nil && r.st != nil {
		r.recheck = time.AfterFunc(recheckEvery, r.recheckStored)
	}
}

// recheckStored ends the previews held here whose records are gone from storage
// (unexposed through another instance), and comes back in recheckEvery while any are
// held. A preview the listing does not show is read before it ends: a listing may
// miss a record (a storage whose listings lag its writes), a failed read may not. A
// preview storage gained after the listing started is left alone; when storage
// fails, the process's view stands.
func (r *Registry) recheckStored() {
	r.mu.Lock()
	st := r.st
	r.mu.Unlock()
	started := r.now()
	var labels map[string]bool
	ctx, cancel := context.WithTimeout(context.Background(), storageTimeout)
	defer cancel()
	if st != nil {
		var err error
		labels, err = r.listLabels(ctx, st, started)
		if err != nil {
			r.failed("checking previews against storage", err)
		} else {
			r.succeeded()
		}
	}
	var unlisted []string
	r.mu.Lock()
	for l, e := range r.byLabel {
		if labels != nil && !e.stored.IsZero() && e.stored.Before(started) && !labels[l] {
			unlisted = append(unlisted, l)
		}
	}
	r.mu.Unlock()
	gone := map[string]bool{}
	found := map[string]record{}
	for _, l := range unlisted {
		rec, err := loadRecord(ctx, st, l)
		switch {
		case isNotExist(err):
			gone[l] = true
		case err != nil:
			r.failed("checking a preview against storage", err)
		default:
			found[l] = rec
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.recheck = nil
	again := false
	for l, e := range r.byLabel {
		if e.stored.IsZero() {
			continue
		}
		if gone[l] && e.stored.Before(started) {
			r.end(l, e)
			continue
		}
		if rec, ok := found[l]; ok {
			r.holdLocked(l, rec, started)
		}
		again = true
	}
	if again {
		r.armRecheckLocked()
	}
}

// sweep removes from storage the expired records among labels, a listing's: those
// this process does not hold (it holds a preview until expire has read its record)
// and has not read since their expiry, at most sweepReads of them.
func (r *Registry) sweep(st Storage, labels map[string]bool) {
	ctx, cancel := context.WithTimeout(context.Background(), storageTimeout)
	defer cancel()
	now := r.now()
	r.mu.Lock()
	var due []string
	for l := range labels {
		if r.byLabel[l] == nil {
			due = append(due, l)
		}
	}
	r.mu.Unlock()
	r.lmu.Lock()
	for l := range r.seen {
		if !labels[l] {
			delete(r.seen, l)
		}
	}
	if r.seen == nil {
		r.seen = make(map[string]time.Time)
	}
	n := 0
	for _, l := range due {
		if n < sweepReads && !now.Before(r.seen[l]) {
			due[n] = l
			n++
		}
	}
	due = due[:n]
	r.lmu.Unlock()

	read := make(map[string]time.Time, len(due))
	var err error
	for _, l := range due {
		var rec record
		rec, err = loadRecord(ctx, st, l)
		switch {
		case isNotExist(err):
			err = nil
		case errors.Is(err, errDamaged):
			// Its owner is unknown, so its lock is too: left for a person to look at.
			read[l], err = r.now().Add(damagedAgain), nil
		case err != nil:
		case r.now().Before(rec.Expires):
			read[l] = rec.Expires
		default:
			err = r.removeExpired(ctx, st, rec.Owner, l)
		}
		if err != nil {
			r.failed("removing expired previews from storage", err)
			break
		}
	}
	r.lmu.Lock()
	defer r.lmu.Unlock()
	for l, t := range read {
		r.seen[l] = t
	}
	r.sweeping, r.swept = false, r.now()
}

func loadRecord(ctx context.Context, st Storage, label string) (record, error) {
	var rec record
	b, err := st.Load(ctx, recordPrefix+label)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Port <= 0 || rec.Domain == "" {
		return rec, fmt.Errorf("preview %s in storage is %w", label, errDamaged)
	}
	return rec, nil
}

// loadIndex reads an owner's previews; none when the key is missing.
func loadIndex(ctx context.Context, st Storage, key string) (ownerIndex, error) {
	var idx ownerIndex
	b, err := st.Load(ctx, key)
	if isNotExist(err) {
		return idx, nil
	}
	if err != nil {
		return idx, fmt.Errorf("reading %s: %w", key, err)
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		// A damaged list loses track of the owner's previews, which then expire by
		// their records alone; new ones start a new list.
		return ownerIndex{}, nil
	}
	return idx, nil
}

// storeIndex writes an owner's previews; none removes the key.
func storeIndex(ctx context.Context, st Storage, key string, previews []indexed) error {
	if len(previews) == 0 {
		if err := st.Delete(ctx, key); err != nil && !isNotExist(err) {
			return fmt.Errorf("removing %s: %w", key, err)
		}
		return nil
	}
	b, _ := json.Marshal(ownerIndex{Previews: previews})
	if err := st.Store(ctx, key, b); err != nil {
		return fmt.Errorf("storing %s: %w", key, err)
	}
	return nil
}

func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist)
}

// failed logs a storage failure once, until storage works again.
func (r *Registry) failed(doing string, err error) {
	if r.failing.CompareAndSwap(false, true) {
		r.log.Load().Error(doing+"; previews fall back to this instance's own until storage works again (further failures are not logged)", zap.Error(err))
	}
}

// succeeded notes that storage works again.
func (r *Registry) succeeded() {
	if r.failing.CompareAndSwap(true, false) {
		r.log.Load().Info("preview storage works again")
	}
}
