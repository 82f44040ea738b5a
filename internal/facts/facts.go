// Package facts keeps what detection found installed in a sandbox: detected once from
// the running container, kept in memory with the pooled sandbox across reloads and in
// storage across restarts, read back strictly (a stored value holds only the known
// names, whatever the container once printed).
package facts

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// Source is the sandbox detection looks at.
type Source interface {
	Ensure(ctx context.Context) error
	ImageID(ctx context.Context) (string, error)
	Detect(ctx context.Context) (boxapi.Facts, error)
}

// Store keeps facts across restarts (Caddy's storage).
type Store interface {
	Load(ctx context.Context, key string) ([]byte, error)
	Store(ctx context.Context, key string, value []byte) error
}

// Deps are what one configuration brings to a detection.
type Deps struct {
	Source Source
	Store  Store
	Key    string // where the facts are stored
	Logger *zap.Logger
	// Changed is called when facts arrive after someone asked while they were unknown.
	Changed func()
	// Fresh, when set, returns the facts detected in a container of the image imageID
	// that nobody had used yet (a warm sandbox, before it was anyone's), nil when none
	// are known: the same image gives the same answer, without running the detection
	// again in this sandbox.
	Fresh func(imageID string) *boxapi.Facts
}

// Key is where the facts of a container are stored.
func Key(container string) string { return "mcp_sandbox/facts/" + container + ".json" }

// Cache holds the detected facts of one sandbox. Its zero value is ready.
type Cache struct {
	mu        sync.Mutex
	facts     *boxapi.Facts
	detecting bool
	done      chan struct{} // closed when the detection under way ends
	failedAt  time.Time
	missed    bool // someone asked while the facts were unknown
}

// retry is how long a failed detection (most often: no container runs yet, and
// detection never starts one) waits before it is tried again.
const retry = 5 * time.Second

// Get returns the facts if known. When they are not, it starts one detection in the
// background (loading them from storage first), so a later session sees them, and
// waits up to wait (while ctx lasts) for a detection under way.
func (c *Cache) Get(ctx context.Context, d Deps, wait time.Duration) *boxapi.Facts {
	c.mu.Lock()
	if c.facts == nil && !c.detecting && time.Since(c.failedAt) >= retry {
		c.start(d, false)
	}
	known, detecting, done := c.facts != nil, c.detecting, c.done
	c.mu.Unlock()
	if !known && detecting && wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.facts == nil {
		c.missed = true // the detection tells the sessions when it ends
	}
	return c.facts
}

// Warm starts a detection that first brings up the container, unless the facts are
// known or being detected.
func (c *Cache) Warm(d Deps) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.facts == nil && !c.detecting {
		c.start(d, true)
	}
}

// start starts a detection; c.mu is held.
func (c *Cache) start(d Deps, ensure bool) {
	c.detecting = true
	c.done = make(chan struct{})
	go c.detect(d, ensure)
}

func (c *Cache) detect(d Deps, ensure bool) {
	var f *boxapi.Facts
	defer func() {
		if v := recover(); v != nil {
			d.Logger.Error("panic while detecting sandbox tools", zap.Any("panic", v))
		}
		c.mu.Lock()
		c.detecting = false
		close(c.done)
		notify := false
		if f != nil {
			c.facts = f
			notify, c.missed = c.missed, false
		} else {
			c.failedAt = time.Now()
		}
		c.mu.Unlock()
		if notify && d.Changed != nil {
			d.Changed()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if ensure {
		if err := d.Source.Ensure(ctx); err != nil {
			d.Logger.Debug("starting the sandbox to detect its tools", zap.Error(err))
			return
		}
	}
	image, imageErr := d.Source.ImageID(ctx)
	if b, err := d.Store.Load(ctx, d.Key); err == nil && imageErr == nil {
		if stored, stale, ok := decodeStored(b); ok && image == stored.ImageID {
			f = &stored
			if stale {
				store(ctx, d, stored) // so the dropped text is gone from storage too
			}
			return
		}
	}
	if d.Fresh != nil && imageErr == nil {
		if fresh := d.Fresh(image); fresh != nil && fresh.ImageID == image {
			got := fresh.Known()
			f = &got
			store(ctx, d, got)
			return
		}
	}
	got, err := d.Source.Detect(ctx)
	if err != nil {
		d.Logger.Debug("detecting sandbox tools", zap.Error(err))
		return
	}
	f = &got
	store(ctx, d, got)
}

// maxStored bounds the stored facts read back: the known names take a few hundred
// bytes.
const maxStored = 64 << 10

// decodeStored reads facts stored earlier, keeping only the known names: an earlier
// version stored whatever the container printed, a prompt injection included. stale
// says that something was dropped; ok is false when b holds no facts.
func decodeStored(b []byte) (f boxapi.Facts, stale, ok bool) {
	var stored boxapi.Facts
	if len(b) > maxStored || json.Unmarshal(b, &stored) != nil || stored.ImageID == "" {
		return boxapi.Facts{}, false, false
	}
	f = stored.Known()
	stale = !slices.Equal(f.Programs, stored.Programs) || !slices.Equal(f.PythonModules, stored.PythonModules)
	return f, stale, true
}

func store(ctx context.Context, d Deps, f boxapi.Facts) {
	b, err := json.Marshal(f)
	if err == nil {
		err = d.Store.Store(ctx, d.Key, b)
	}
	if err != nil {
		d.Logger.Warn("storing detected sandbox tools", zap.Error(err))
	}
}
