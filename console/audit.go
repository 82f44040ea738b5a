package console

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
	"go.uber.org/zap"
)

// Defaults of the audit log.
const (
	DefaultAuditEntries = 10000
	// auditChunk is how many entries one storage object holds. The open chunk is
	// rewritten whole at each flush, so it stays small; sealed chunks are never
	// written again.
	auditChunk    = 250
	flushInterval = time.Second
	// followEvery is how many flushes apart the other instances' chunks are read.
	followEvery = 2
)

// AuditLog keeps the last Max entries in memory for the console and persists them in
// Caddy's storage as chunks of JSON lines under <prefix>/audit/, so the log survives
// restarts. Record only appends in memory; a background loop writes the open chunk
// once a second and Close writes the rest. On disk at most Max entries plus one
// chunk are kept. Several instances sharing the storage each write their own chunks;
// each reads all of them at start, and the others' new entries once a second after
// (auditfollow.go).
type AuditLog struct {
	storage certmagic.Storage
	prefix  string
	max     int
	log     *zap.Logger
	inst    string // this process's chunk suffix

	mu      sync.Mutex
	ring    []audit.Entry // oldest first once full: ring[next:] then ring[:next]
	next    int
	full    bool
	open    []audit.Entry // entries of the open chunk
	openKey string
	dirty   bool
	chunks  []string // chunk keys on disk, oldest first
	seen    map[string]time.Time
	seq     int
	// merged is what was merged of other instances' chunks (auditfollow.go), and
	// followErr whether the last look at them failed.
	merged    map[string]chunkSeen
	followErr bool

	flushMu sync.Mutex // one flush at a time
	stop    chan struct{}
	done    chan struct{}
}

// NewAuditLog returns a log over storage under prefix keeping max entries (0 means
// DefaultAuditEntries). Call Load, then Start; Close flushes and stops.
func NewAuditLog(storage certmagic.Storage, prefix string, max int, logger *zap.Logger) *AuditLog {
	if max <= 0 {
		max = DefaultAuditEntries
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &AuditLog{
		storage: storage, prefix: path.Join(prefix, "audit"), max: max, log: logger,
		inst: hex.EncodeToString(b), ring: make([]audit.Entry, 0, min(max, 1024)), seen: make(map[string]time.Time),
	}
}

// Load reads the persisted chunks, newest kept, oldest beyond Max dropped.
func (l *AuditLog) Load(ctx context.Context) error {
	keys, err := l.storage.List(ctx, l.prefix, false)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("listing audit log: %w", err)
	}
	slices.Sort(keys)
	var all []audit.Entry
	read := map[string]chunkSeen{}
	// Read newest first until Max entries are in hand.
	for i := len(keys) - 1; i >= 0 && len(all) < l.max; i-- {
		data, err := l.storage.Load(ctx, keys[i])
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				l.log.Warn("reading an audit log chunk", zap.String("key", keys[i]), zap.Error(err))
			}
			continue
		}
		es := decodeChunk(data)
		read[keys[i]] = chunkSeen{size: int64(len(data)), entries: len(es)}
		all = append(es, all...)
	}
	slices.SortStableFunc(all, func(a, b audit.Entry) int { return a.Time.Compare(b.Time) })
	if len(all) > l.max {
		all = all[len(all)-l.max:]
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.chunks = keys
	for _, e := range all {
		l.push(e)
	}
	// What was read counts as merged; an older chunk is followed from its length at
	// the first follow (a quiet instance's open chunk may be one).
	l.merged = make(map[string]chunkSeen, len(keys))
	for _, k := range keys {
		if !l.own(k) {
			l.merged[k] = chunkSeen{entries: baseline}
		}
	}
	for k, s := range read {
		if !l.own(k) {
			l.merged[k] = s
		}
	}
	return nil
}

func decodeChunk(data []byte) []audit.Entry {
	var out []audit.Entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var e audit.Entry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// Record appends an entry. It never blocks on storage.
func (l *AuditLog) Record(e audit.Entry) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	l.mu.Lock()
	l.push(e)
	l.open = append(l.open, e)
	l.dirty = true
	l.mu.Unlock()
}

// push adds to the ring; the caller holds mu.
func (l *AuditLog) push(e audit.Entry) {
	if len(l.ring) < l.max {
		l.ring = append(l.ring, e)
	} else {
		l.ring[l.next] = e
		l.next = (l.next + 1) % l.max
		l.full = true
	}
	if e.Subject != "" {
		if len(l.seen) >= 4*l.max {
			clear(l.seen)
		}
		if e.Time.After(l.seen[e.Subject]) {
			l.seen[e.Subject] = e.Time
		}
	}
}

// LastSeen is the time of the newest entry made with the sign-in subject.
func (l *AuditLog) LastSeen(subject string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[subject]
}

// Len is the number of entries held.
func (l *AuditLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ring)
}

// Filter selects entries; empty fields match everything.
type Filter struct {
	Client  string // matches Client or ClientID exactly, case-insensitively
	Person  string // matches Person exactly; "-" matches the operator's entries
	Tool    string
	Outcome string
	Limit   int // 0 means all
	// sandboxOnly leaves out the console's own entries (sign-ins, actions), which say
	// nothing of a sandbox's use.
	sandboxOnly bool
}

func (f Filter) match(e *audit.Entry) bool {
	if f.Client != "" && !strings.EqualFold(f.Client, e.Client) && f.Client != e.ClientID {
		return false
	}
	if f.Person != "" && f.Person != e.Person && (f.Person != "-" || e.Person != "") {
		return false
	}
	if f.Person == "-" && aboutNoSandbox(e) {
		return false
	}
	if f.Tool != "" && f.Tool != e.Tool {
		return false
	}
	if f.sandboxOnly && strings.HasPrefix(e.Tool, "console.") {
		return false
	}
	return f.Outcome == "" || f.Outcome == e.Outcome
}

// aboutNoSandbox reports whether e is one of the console's entries that concern no
// sandbox (sign-ins and outs, refused requests, revoked sign-ins): they are listed under
// no person, not as the operator's sandbox's.
func aboutNoSandbox(e *audit.Entry) bool {
	switch e.Tool {
	case "console.sign_in", "console.sign_out", "console.refused", "console.api", "console." + actRevokeGrant:
		return true
	}
	return false
}

// Query returns the matching entries, newest first.
func (l *AuditLog) Query(f Filter) []audit.Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.ring)
	limit := f.Limit
	if limit <= 0 || limit > n {
		limit = n
	}
	out := make([]audit.Entry, 0, min(limit, 1024))
	for i := 0; i < n && len(out) < limit; i++ {
		// Newest is just before next (or at the end while the ring fills).
		idx := n - 1 - i
		if l.full {
			idx = (l.next - 1 - i + 2*n) % n
		}
		if e := &l.ring[idx]; f.match(e) {
			out = append(out, *e)
		}
	}
	return out
}

// Facets lists the distinct clients and tools in the log, for filter menus.
func (l *AuditLog) Facets() (clients, tools []string) {
	l.mu.Lock()
	cs, ts := map[string]bool{}, map[string]bool{}
	for i := range l.ring {
		cs[l.ring[i].Client] = true
		ts[l.ring[i].Tool] = true
	}
	l.mu.Unlock()
	for c := range cs {
		clients = append(clients, c)
	}
	for t := range ts {
		tools = append(tools, t)
	}
	slices.Sort(clients)
	slices.Sort(tools)
	return clients, tools
}

// Flush writes the open chunk if it changed, seals it when full and deletes the oldest
// chunks beyond the bound.
func (l *AuditLog) Flush(ctx context.Context) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	if !l.dirty {
		l.mu.Unlock()
		return nil
	}
	type write struct {
		key     string
		entries []audit.Entry
	}
	var writes []write
	for len(l.open) >= auditChunk {
		writes = append(writes, write{l.chunkKey(), l.open[:auditChunk:auditChunk]})
		l.open, l.openKey = slices.Clone(l.open[auditChunk:]), ""
	}
	if len(l.open) > 0 {
		writes = append(writes, write{l.chunkKey(), slices.Clone(l.open)})
	}
	l.dirty = false
	l.mu.Unlock()

	var errs []error
	var stored []string
	for _, w := range writes {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		for i := range w.entries {
			_ = enc.Encode(&w.entries[i])
		}
		if err := l.storage.Store(ctx, w.key, buf.Bytes()); err != nil {
			errs = append(errs, err)
			continue
		}
		stored = append(stored, w.key)
	}
	if len(errs) > 0 {
		// The open chunk is written again at the next flush; a sealed one is lost.
		l.mu.Lock()
		l.dirty = len(l.open) > 0
		l.mu.Unlock()
		return fmt.Errorf("writing audit log: %w", errors.Join(errs...))
	}
	l.mu.Lock()
	for _, key := range stored {
		if !slices.Contains(l.chunks, key) {
			l.chunks = append(l.chunks, key)
		}
	}
	slices.Sort(l.chunks)
	keep := (l.max+auditChunk-1)/auditChunk + 1
	var drop []string
	if len(l.chunks) > keep {
		drop = slices.Clone(l.chunks[:len(l.chunks)-keep])
		l.chunks = l.chunks[len(l.chunks)-keep:]
	}
	l.mu.Unlock()
	for _, k := range drop {
		if err := l.storage.Delete(ctx, k); err != nil && !errors.Is(err, fs.ErrNotExist) {
			l.log.Warn("deleting an old audit log chunk", zap.String("key", k), zap.Error(err))
		}
	}
	return nil
}

// chunkKey names the open chunk; the caller holds mu. Names sort by the time of the
// chunk's first entry, so the newest chunks are the last keys.
func (l *AuditLog) chunkKey() string {
	if l.openKey == "" {
		l.seq++
		l.openKey = path.Join(l.prefix, fmt.Sprintf("%016x-%s-%04d", l.open[0].Time.UnixNano(), l.inst, l.seq%10000))
	}
	return l.openKey
}

// Start runs the background flush, once a second.
func (l *AuditLog) Start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop != nil {
		return
	}
	stop, done := make(chan struct{}), make(chan struct{})
	l.stop, l.done = stop, done
	tick := 0
	go every(l.log, "flushing the audit log", flushInterval, stop, done, func(ctx context.Context) error {
		err := l.Flush(ctx)
		if tick++; tick%followEvery == 0 {
			err = errors.Join(err, l.follow(ctx))
		}
		return err
	})
}

// Close stops the background flush and writes what is left.
func (l *AuditLog) Close() error {
	l.mu.Lock()
	stop, done := l.stop, l.done
	l.stop = nil
	l.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return l.Flush(ctx)
}

// every calls fn once per interval until stop is closed, then closes done. Failures
// are logged as doing what; a panic ends the loop, logged, without taking Caddy down.
func every(log *zap.Logger, what string, interval time.Duration, stop <-chan struct{}, done chan<- struct{}, fn func(context.Context) error) {
	defer close(done)
	defer func() {
		if v := recover(); v != nil {
			log.Error("panic while "+what, zap.Any("panic", v))
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := fn(ctx); err != nil {
				log.Warn(what, zap.Error(err))
			}
			cancel()
		}
	}
}
