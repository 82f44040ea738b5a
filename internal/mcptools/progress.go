package mcptools

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// maxProgressOutput bounds the output carried by one progress notification; the
// final result carries the whole (bounded) output anyway.
const maxProgressOutput = 4096

// progress streams a running command's output to the client as progress
// notifications: at most one a second while output arrives, and one every keep-alive
// interval while it is silent, so that clients which reset their timeouts on progress
// (Claude Code) never give up on a long command. Without a progress token from the
// client it sends nothing (the response stream has its own keep-alive).
type progress struct {
	mu      sync.Mutex
	pending []byte // output since the last notification (its tail, bounded)
	total   int64

	done    chan struct{}
	stopped chan struct{}
	active  bool // the client asked for progress
}

func startProgress(ctx context.Context, token mcp.ProgressToken, idle time.Duration) *progress {
	p := &progress{done: make(chan struct{}), stopped: make(chan struct{})}
	srv := server.ServerFromContext(ctx)
	if token == nil || srv == nil {
		close(p.stopped)
		return p
	}
	p.active = true
	go func() {
		defer close(p.stopped)
		start, last := time.Now(), time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-ctx.Done():
				return
			case now := <-tick.C:
				out, total := p.take()
				if len(out) == 0 && now.Sub(last) < idle {
					continue
				}
				last = now
				elapsed := now.Sub(start).Seconds()
				msg := fmt.Sprintf("running for %.0fs, %s of output so far", elapsed, human.Size(total))
				if len(out) > 0 {
					msg += "\n" + out
				}
				_ = srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
					"progressToken": token,
					"progress":      elapsed,
					"message":       msg,
				})
			}
		}
	}()
	return p
}

// onOutput is the live-output callback for the sandbox, or nil when the client asked for
// no progress (sampling output costs an exec a second).
func (p *progress) onOutput() func(boxapi.Stream, []byte) {
	if !p.active {
		return nil
	}
	return p.output
}

// output receives live output from the sandbox.
func (p *progress) output(_ boxapi.Stream, chunk []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total += int64(len(chunk))
	p.pending = append(p.pending, chunk...)
	if len(p.pending) > 2*maxProgressOutput {
		p.pending = append(p.pending[:0], p.pending[len(p.pending)-maxProgressOutput:]...)
	}
}

// take returns the pending output (its last maxProgressOutput bytes, valid UTF-8).
func (p *progress) take() (string, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.pending
	if len(b) > maxProgressOutput {
		b = b[len(b)-maxProgressOutput:]
		for len(b) > 0 && !utf8.RuneStart(b[0]) {
			b = b[1:]
		}
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	p.pending = p.pending[:0]
	return s, p.total
}

func (p *progress) stop() {
	close(p.done)
	<-p.stopped
}
