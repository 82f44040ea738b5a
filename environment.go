package mcpsandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// The model is told what its sandbox is like: whether it has a network, its limits,
// what is preinstalled. Settings are known at provision time; what is installed is
// detected once from the running container (never during provisioning or
// initialize, which must stay fast), kept with the pooled sandbox across reloads and
// in Caddy's storage across restarts, and added to the execute description and the
// server instructions as soon as it is known.

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

// environment describes the sandbox to the model in a few short sentences.
func (h *Handler) environment() string {
	cfg := h.box.Config()
	var b strings.Builder
	fmt.Fprintf(&b, "The sandbox has %s of memory (free and /proc show the host's, not this limit), %s and at most %d processes.",
		humanSize(cfg.Memory), cpuText(cfg.CPUs), cfg.PidsLimit)
	if cfg.NetworkMode == "none" {
		b.WriteString(" It is offline: downloads and package installs (apt-get, pip, npm) fail, so use what is installed.")
	} else {
		b.WriteString(" It can reach the network; packages you install persist.")
	}
	b.WriteString(describeFacts(h.sandboxFacts()))
	return b.String()
}

// describeFacts is the sentence on what is installed, empty while that is unknown.
// It names only programs and modules from the fixed lists detection looks for (see
// [sandbox.Facts.Known]): nothing the container printed reaches the model as an
// instruction.
func describeFacts(f *sandbox.Facts) string {
	if f == nil {
		return ""
	}
	known := f.Known()
	f = &known
	if len(f.Programs) == 0 {
		return " Installed: only the base system (no python3, node or git)."
	}
	progs := make([]string, 0, len(f.Programs))
	for _, p := range f.Programs {
		if p == "python3" && len(f.PythonModules) > 0 {
			p += " (" + strings.Join(f.PythonModules, ", ") + ")"
		}
		progs = append(progs, p)
	}
	return " Installed: " + strings.Join(progs, ", ") + "."
}

func cpuText(n float64) string {
	if n == 1 {
		return "1 CPU"
	}
	return fmt.Sprintf("%g CPUs", n)
}

// describeTools appends the environment to the execute tool's description as tools
// are listed, so that the detected tools appear once known.
func (h *Handler) describeTools(_ context.Context, tools []mcp.Tool) []mcp.Tool {
	env := h.environment()
	out := make([]mcp.Tool, len(tools))
	copy(out, tools)
	for i := range out {
		if out[i].Name == "execute" {
			out[i].Description += "\n\n" + env
		}
	}
	return out
}

// instructions is the server's instructions with the environment, given at
// initialize.
func (h *Handler) instructions(_ context.Context, _ any, _ *mcp.InitializeRequest, res *mcp.InitializeResult) {
	res.Instructions = serverInstructions + " " + h.environment()
}
