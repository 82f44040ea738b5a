package mcpsandbox

import (
	"context"
	"io"
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
		Boxes:   boxes{h},
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
		IdleStop:      time.Duration(h.IdleStop),

		MaxTaskTTL:    time.Duration(h.MaxTaskTTL),
		MaxTasks:      h.MaxTasks,
		MaxTasksTotal: h.MaxTasksTotal,
	}
	if h.previews != nil {
		o.Previews = toolPreviews{h.previews}
	}
	return o
}

// boxes resolves the sandbox of a call (fleet.go): every caller shares the operator's
// sandbox of this configuration.
type boxes struct{ h *Handler }

func (b boxes) For(ctx context.Context) (mcptools.Box, error) {
	e, err := b.h.sandboxFor(ctx, "")
	if err != nil {
		return nil, err
	}
	return toolBox{e.sb, b.h, e}, nil
}

// toolBox is a pooled sandbox as the tools use it.
type toolBox struct {
	*sandbox.Sandbox
	h *Handler
	e *sandboxEntry
}

// Exec and JobOutput keep the sandbox from idling while they run.
func (b toolBox) Exec(ctx context.Context, command string, opts sandbox.ExecOptions) (*sandbox.ExecResult, error) {
	defer b.e.begin()()
	return b.Sandbox.Exec(ctx, command, opts)
}

func (b toolBox) JobOutput(ctx context.Context, id string, wait time.Duration, input *string, maxOutput int, onOutput func(sandbox.Stream, []byte)) (*sandbox.ExecResult, error) {
	defer b.e.begin()()
	return b.Sandbox.JobOutput(ctx, id, wait, input, maxOutput, onOutput)
}

func (b toolBox) Facts(ctx context.Context, wait time.Duration) *sandbox.Facts {
	return b.h.sandboxFacts(ctx, wait)
}

// CPUs is the CPUs the sandbox gets: the smaller of cpus and the engine's CPU count
// (docker info's NCPU, asked when the container is ensured). Until the engine has been
// asked, a local engine's count is taken to be this machine's (runtime.NumCPU).
func (b toolBox) CPUs() float64 {
	n, known := b.Sandbox.CPUs()
	if !known && localEngine(b.e.engine.Host) {
		n = min(n, float64(runtime.NumCPU()))
	}
	return n
}

// localEngine reports whether a Docker host address is on this machine.
func localEngine(host string) bool {
	return strings.HasPrefix(host, "unix://") || strings.HasPrefix(host, "npipe://")
}
func (b toolBox) ImageMissing() string { return b.h.imageMissing(b.e) }

// linkFiles is the sandbox as download and upload links reach it: each request is a
// use of the sandbox, and starts it again when it was stopped for idleness.
type linkFiles struct{ h *Handler }

func (f linkFiles) box(ctx context.Context) (*sandbox.Sandbox, error) {
	e, err := f.h.sandboxFor(ctx, "")
	if err != nil {
		return nil, err
	}
	return e.sb, nil
}

func (f linkFiles) Stat(ctx context.Context, p string) (sandbox.FileInfo, error) {
	sb, err := f.box(ctx)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	return sb.Stat(ctx, p)
}

func (f linkFiles) OpenRange(ctx context.Context, p string, offset, length int64) (*sandbox.File, error) {
	sb, err := f.box(ctx)
	if err != nil {
		return nil, err
	}
	return sb.OpenRange(ctx, p, offset, length)
}

func (f linkFiles) WriteZip(ctx context.Context, p string, w io.Writer) error {
	sb, err := f.box(ctx)
	if err != nil {
		return err
	}
	return sb.WriteZip(ctx, p, w)
}

func (f linkFiles) ListFiles(ctx context.Context, dir string, max int) ([]sandbox.DirEntry, error) {
	sb, err := f.box(ctx)
	if err != nil {
		return nil, err
	}
	return sb.ListFiles(ctx, dir, max)
}

func (f linkFiles) Upload(ctx context.Context, dir, name string, r io.Reader, opts sandbox.UploadOptions) (sandbox.UploadResult, error) {
	sb, err := f.box(ctx)
	if err != nil {
		return sandbox.UploadResult{}, err
	}
	return sb.Upload(ctx, dir, name, r, opts)
}

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
