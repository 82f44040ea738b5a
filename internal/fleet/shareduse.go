package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Instances sharing a storage serve the same people, and each stops a sandbox that has
// been idle for idle_stop by the uses it saw itself. So that one instance does not stop
// a sandbox in use through another (its files read, a long command under way), each
// publishes when it last used each sandbox, at every idle check that follows a use,
// under UsePrefix<container>/<instance>; before stopping a sandbox, an instance reads
// the others' and counts the newest as a use of its own.

// UsePrefix is where storage holds each instance's last use of each sandbox.
const UsePrefix = "mcp_sandbox/lastuse/"

// useStale is how old another instance's record may be before the instance reading it
// removes it (that instance, if it lives, writes it again at its next use).
const useStale = 24 * time.Hour

// instanceID names this process's records of use.
var instanceID = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// useKey is where this process records its last use of container.
func useKey(container string) string { return UsePrefix + container + "/" + instanceID }

// publishUse records e's last use in storage when it is newer than the one recorded
// (a command under way counts as a use now).
func (f *Fleet) publishUse(ctx context.Context, e *Entry) {
	if f.o.Storage == nil || f.kubernetes() {
		return
	}
	at := e.activity()
	if !at.After(time.Unix(0, e.published.Load())) {
		return
	}
	container := e.sb.Config().Container
	if err := f.o.Storage.Store(ctx, useKey(container), []byte(strconv.FormatInt(at.UnixNano(), 10))); err != nil {
		f.logger.Debug("recording a sandbox's last use in storage", zap.String("container", container), zap.Error(err))
		return
	}
	e.published.Store(at.UnixNano())
}

// sharedUse is the newest use of container that other instances recorded (zero for
// none, or when storage cannot tell). Records older than useStale are removed.
func (f *Fleet) sharedUse(ctx context.Context, container string) time.Time {
	if f.o.Storage == nil || f.kubernetes() {
		return time.Time{}
	}
	dir := UsePrefix + container
	keys, err := f.o.Storage.List(ctx, dir, false)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			f.logger.Debug("reading other instances' uses of a sandbox", zap.String("container", container), zap.Error(err))
		}
		return time.Time{}
	}
	var newest time.Time
	for _, k := range keys {
		id := path.Base(k)
		if id == instanceID || !isID(id) {
			continue
		}
		b, err := f.o.Storage.Load(ctx, k)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 {
			continue
		}
		at := time.Unix(0, n)
		if time.Since(at) > useStale {
			_ = f.o.Storage.Delete(ctx, k)
			continue
		}
		if at.After(newest) {
			newest = at
		}
	}
	return newest
}
