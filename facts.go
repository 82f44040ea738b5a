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

// What is installed in the sandbox is detected once from the running container (never
// during provisioning or initialize, which must stay fast), kept with the pooled
// sandbox across reloads and in Caddy's storage across restarts, and given to the
// tools (Box.Facts) as soon as it is known.

// factsCache holds the detected facts of one sandbox.
type factsCache struct {
	mu        sync.Mutex
	facts     *sandbox.Facts
	detecting bool
	failedAt  time.Time
}

// factsRetry is how long a failed detection (most often: no container runs yet, and
// detection never starts one) waits before it is tried again.
const factsRetry = 5 * time.Second

func factsKey(container string) string { return "mcp_sandbox/facts/" + container + ".json" }

// sandboxFacts returns the facts if known. When they are not, it starts one detection
// in the background (loading them from storage first), so a later session sees them.
func (h *Handler) sandboxFacts() *sandbox.Facts {
	c := h.facts
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.facts != nil || c.detecting || time.Since(c.failedAt) < factsRetry {
		return c.facts
	}
	c.detecting = true
	go h.detectFacts(c)
	return nil
}

func (h *Handler) detectFacts(c *factsCache) {
	var f *sandbox.Facts
	defer func() {
		if v := recover(); v != nil {
			h.logger.Error("panic while detecting sandbox tools", zap.Any("panic", v))
		}
		c.mu.Lock()
		c.detecting = false
		if f != nil {
			c.facts = f
		} else {
			c.failedAt = time.Now()
		}
		c.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
