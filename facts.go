package mcpsandbox

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// What is installed in the sandbox is detected once from the running container, kept
// with the pooled sandbox across reloads and in Caddy's storage across restarts, and
// given to the tools (Box.Facts) as soon as it is known. Detection starts with the app
// (warmFacts: the container is created or started first), never while provisioning,
// and initialize waits a little for it (factsWait), so the first session is told what
// is installed; sessions that began before it finished get tools/list_changed.

// factsCache holds the detected facts of one sandbox.
type factsCache struct {
	mu        sync.Mutex
	facts     *sandbox.Facts
	detecting bool
	done      chan struct{} // closed when the detection under way ends
	failedAt  time.Time
	missed    bool // someone asked while the facts were unknown
}

// warmedContainers are the containers (Docker host and name) warmFacts started.
var warmedContainers sync.Map

// factsRetry is how long a failed detection (most often: no container runs yet, and
// detection never starts one) waits before it is tried again.
const factsRetry = 5 * time.Second

func factsKey(container string) string { return "mcp_sandbox/facts/" + container + ".json" }

// sandboxFacts returns the facts if known. When they are not, it starts one detection
// in the background (loading them from storage first), so a later session sees them,
// and waits up to wait (while ctx lasts) for a detection under way.
func (h *Handler) sandboxFacts(ctx context.Context, wait time.Duration) *sandbox.Facts {
	c := h.facts
	c.mu.Lock()
	if c.facts == nil && !c.detecting && time.Since(c.failedAt) >= factsRetry {
		h.startDetect(c, false)
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

// warmFacts starts detection when the app starts, bringing up the container first, so
// that the facts are known by the time the first client connects. It does so once per
// container and process: a config reload leaves the container alone.
func (h *Handler) warmFacts() {
	if _, done := warmedContainers.LoadOrStore(h.host+"\x00"+h.box.Config().Container, true); done {
		return
	}
	c := h.facts
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.facts == nil && !c.detecting {
		h.startDetect(c, true)
	}
}

// startDetect starts a detection; c.mu is held.
func (h *Handler) startDetect(c *factsCache, ensure bool) {
	c.detecting = true
	c.done = make(chan struct{})
	go h.detectFacts(c, ensure)
}

func (h *Handler) detectFacts(c *factsCache, ensure bool) {
	var f *sandbox.Facts
	defer func() {
		if v := recover(); v != nil {
			h.logger.Error("panic while detecting sandbox tools", zap.Any("panic", v))
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
		if notify && h.tools != nil {
			h.tools.DescriptionsChanged()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if ensure {
		if err := h.box.Ensure(ctx); err != nil {
			h.logger.Debug("starting the sandbox to detect its tools", zap.Error(err))
			return
		}
	}
	key := factsKey(h.box.Config().Container)
	if b, err := h.storage.Load(ctx, key); err == nil {
		if stored, stale, ok := decodeStoredFacts(b); ok {
			if id, err := h.box.ImageID(ctx); err == nil && id == stored.ImageID {
				f = &stored
				if stale {
					h.storeFacts(ctx, key, stored) // so the dropped text is gone from storage too
				}
				return
			}
		}
	}
	got, err := h.box.Detect(ctx)
	if err != nil {
		h.logger.Debug("detecting sandbox tools", zap.Error(err))
		return
	}
	f = &got
	h.storeFacts(ctx, key, got)
}

// maxStoredFacts bounds the stored facts read back: the known names take a few
// hundred bytes.
const maxStoredFacts = 64 << 10

// decodeStoredFacts reads facts stored earlier, keeping only the known names: an
// earlier version stored whatever the container printed, a prompt injection included.
// stale says that something was dropped; ok is false when b holds no facts.
func decodeStoredFacts(b []byte) (f sandbox.Facts, stale, ok bool) {
	var stored sandbox.Facts
	if len(b) > maxStoredFacts || json.Unmarshal(b, &stored) != nil || stored.ImageID == "" {
		return sandbox.Facts{}, false, false
	}
	f = stored.Known()
	stale = !slices.Equal(f.Programs, stored.Programs) || !slices.Equal(f.PythonModules, stored.PythonModules)
	return f, stale, true
}

func (h *Handler) storeFacts(ctx context.Context, key string, f sandbox.Facts) {
	b, err := json.Marshal(f)
	if err == nil {
		err = h.storage.Store(ctx, key, b)
	}
	if err != nil {
		h.logger.Warn("storing detected sandbox tools", zap.Error(err))
	}
}
