package console

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
)

// Instances sharing the storage write chunks of their own (their names carry the
// instance's id, AuditLog.inst). Each follows the others' every other flush (2 s): a chunk it has not seen, or whose size changed since, is read again and the
// entries past those it merged are added, in time order; a sealed chunk (auditChunk
// entries) is never read again. So the console of every instance shows every
// instance's activity within about three seconds (a flush, then a follow).

// chunkSeen is what a log has merged of another instance's chunk. entries is
// baseline for a chunk Load did not read (older than the newest Max entries): the
// next follow reads it to learn its length, merging nothing, and follows it from there.
type chunkSeen struct {
	size    int64
	entries int
}

const baseline = -1

// own reports whether key is one of this instance's chunks.
func (l *AuditLog) own(key string) bool {
	return strings.Contains(path.Base(key), "-"+l.inst+"-")
}

// isChunk reports whether key is named as chunkKey names chunks (a storage's
// temporary files, next to them while one is written, are not).
func isChunk(key string) bool {
	b := path.Base(key)
	if len(b) != 16+1+8+1+4 || b[16] != '-' || b[25] != '-' {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if i == 16 || i == 25 {
			continue
		}
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// follow merges the entries other instances have written since the last call.
func (l *AuditLog) follow(ctx context.Context) error {
	// A listing that fails is not taken for a complete one, whatever the error: a file
	// storage's walk meets a temporary file renamed away meanwhile as "not found",
	// and returns what it had listed so far.
	keys, err := l.storage.List(ctx, l.prefix, false)
	if errors.Is(err, fs.ErrNotExist) && len(keys) == 0 {
		if _, serr := l.storage.Stat(ctx, l.prefix); errors.Is(serr, fs.ErrNotExist) {
			return nil // nothing written yet by anyone
		}
	}
	if err != nil {
		return l.followFailed(err)
	}
	l.mu.Lock()
	seen := l.merged
	l.mu.Unlock()
	var added []audit.Entry
	next := make(map[string]chunkSeen, len(keys))
	for _, k := range keys {
		if l.own(k) || !isChunk(k) {
			continue
		}
		s, ok := seen[k]
		if ok && s.entries >= auditChunk {
			next[k] = s
			continue
		}
		info, err := l.storage.Stat(ctx, k)
		if err != nil {
			continue // deleted meanwhile, or not readable now: the next call sees
		}
		if ok && info.Size == s.size {
			next[k] = s
			continue
		}
		data, err := l.storage.Load(ctx, k)
		if err != nil {
			continue
		}
		es := decodeChunk(data)
		if s.entries != baseline && len(es) > s.entries {
			added = append(added, es[s.entries:]...)
		}
		next[k] = chunkSeen{size: int64(len(data)), entries: max(len(es), s.entries)}
	}
	l.mu.Lock()
	l.merged = next
	l.mergeEntries(added)
	l.followErr = false
	l.mu.Unlock()
	return nil
}

// followFailed logs the first of a run of failures to read other instances' chunks.
func (l *AuditLog) followFailed(err error) error {
	l.mu.Lock()
	first := !l.followErr
	l.followErr = true
	l.mu.Unlock()
	if first {
		l.log.Warn("reading other instances' activity from storage; trying again every 2 seconds", zap.Error(err))
	}
	return nil
}

// mergeEntries adds entries of other instances, keeping the ring in time order; the
// caller holds mu.
func (l *AuditLog) mergeEntries(es []audit.Entry) {
	if len(es) == 0 {
		return
	}
	slices.SortStableFunc(es, func(a, b audit.Entry) int { return a.Time.Compare(b.Time) })
	all := l.ordered()
	if len(all) == 0 || !es[0].Time.Before(all[len(all)-1].Time) {
		for _, e := range es {
			l.push(e)
		}
		return
	}
	all = append(all, es...)
	slices.SortStableFunc(all, func(a, b audit.Entry) int { return a.Time.Compare(b.Time) })
	if len(all) > l.max {
		all = all[len(all)-l.max:]
	}
	l.ring, l.next, l.full = l.ring[:0], 0, false
	for _, e := range all {
		l.push(e)
	}
}

// ordered is the ring's entries, oldest first (a copy); the caller holds mu.
func (l *AuditLog) ordered() []audit.Entry {
	if !l.full {
		return slices.Clone(l.ring)
	}
	return append(slices.Clone(l.ring[l.next:]), l.ring[:l.next]...)
}
