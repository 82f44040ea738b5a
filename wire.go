package mcpsandbox

import (
	"context"
	"runtime"
	"strings"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/preview"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// This file builds what the tools layer (internal/mcptools) depends on from the
// handler's configuration: its sandboxes, links and previews.

// toolOptions are the tools' settings and dependencies.
func (h *Handler) toolOptions() mcptools.Options {
	o := mcptools.Options{
		Config:  h.box.Config(),
		Boxes:   boxes{toolBox{h.box, h}},
		Links:   toolLinks{h},
		Audit:   h.audit,
		Logger:  h.logger,
		Version: Version,

		LinkTTL:       time.Duration(h.LinkTTL),
		MaxLinkTTL:    time.Duration(h.MaxLinkTTL),
		MaxUpload:     h.MaxUpload,
		DefaultOutput: h.DefaultOutput,
		Yield:         time.Duration(*h.YieldAfter),
		MaxJobs:       h.MaxJobs,
		Keepalive:     time.Duration(h.Keepalive),
		PreviewAuth:   h.PreviewAuth,
		PreviewTTL:    time.Duration(h.PreviewTTL),

		MaxTaskTTL:    time.Duration(h.MaxTaskTTL),
		MaxTasks:      h.MaxTasks,
		MaxTasksTotal: h.MaxTasksTotal,
	}
	if h.previews != nil {
		o.Previews = toolPreviews{h.previews}
	}
	return o
}

// boxes resolves the sandbox of a call. Every caller shares the one sandbox of this
// configuration.
type boxes struct{ box toolBox }

func (b boxes) For(context.Context) (mcptools.Box, error) { return b.box, nil }

// toolBox is a pooled sandbox as the tools use it.
type toolBox struct {
	*sandbox.Sandbox
	h *Handler
}

func (b toolBox) Facts(ctx context.Context, wait time.Duration) *sandbox.Facts {
	return b.h.sandboxFacts(ctx, wait)
}

// CPUs is the CPUs the sandbox gets: the smaller of cpus and the engine's CPU count
// (docker info's NCPU, asked when the container is ensured). Until the engine has been
// asked, a local engine's count is taken to be this machine's (runtime.NumCPU).
func (b toolBox) CPUs() float64 {
	n, known := b.Sandbox.CPUs()
	if !known && localEngine(b.h.host) {
		n = min(n, float64(runtime.NumCPU()))
	}
	return n
}

// localEngine reports whether a Docker host address is on this machine.
func localEngine(host string) bool {
	return strings.HasPrefix(host, "unix://") || strings.HasPrefix(host, "npipe://")
}

// Egress is the sandbox's way out through the proxy; nil without an egress block.
func (b toolBox) Egress() *mcptools.Egress {
	if b.h.entry.egress == nil {
		return nil
	}
	return b.h.entry.egress.info()
}

// Blocked returns, once, what the proxy refused to a job's commands.
func (b toolBox) Blocked(job string) []string {
	if b.h.entry.egress == nil {
		return nil
	}
	return b.h.entry.egress.takeBlocked(job)
}

func (b toolBox) ImageMissing() string { return b.h.imageMissing(b.h.docker, b.h.host) }

// toolLinks signs the tools' links and records them for the console.
type toolLinks struct{ h *Handler }

func (l toolLinks) Download(ctx context.Context, p string, ttl time.Duration) (string, time.Time) {
	link := l.h.signer.Download(p, time.Now(), ttl)
	l.h.recordLink(ctx, console.KindDownload, link, p)
	return link.Path, link.Expires
}

func (l toolLinks) Upload(ctx context.Context, dir string, ttl time.Duration) (string, time.Time) {
	link := l.h.signer.Upload(dir, time.Now().Add(ttl))
	l.h.recordLink(ctx, console.KindUpload, link, dir)
	return link.Path, link.Expires
}

// toolPreviews exposes ports through the preview server.
type toolPreviews struct{ srv *preview.Server }

func (p toolPreviews) Expose(port int, origin string) (string, time.Time) {
	pv := p.srv.Expose(port)
	return p.srv.URL(pv, origin), pv.Expires
}

func (p toolPreviews) Unexpose(port int) bool { return p.srv.Unexpose(port) }
