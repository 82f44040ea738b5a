package mcpsandbox

import (
	"context"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/config"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/metrics"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/questions"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/secret"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/preview"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// This file builds what the tools layer (internal/mcptools) depends on from the
// handler's configuration: its sandboxes, links and previews.

// toolOptions are the tools' settings and dependencies.
func (h *Handler) toolOptions() mcptools.Options {
	o := mcptools.Options{
		Config:  toolConfig(h.fleet.Operator().Sandbox().Config()),
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
		KeepProcesses: h.KeepProcesses,

		MaxTaskTTL:    time.Duration(h.MaxTaskTTL),
		MaxTasks:      h.MaxTasks,
		MaxTasksTotal: h.MaxTasksTotal,

		// Questions about hosts put to 2026-07-28 clients (egress { ask }).
		QuestionKey: secret.DeriveKey(h.APIKey, "egress question state v1"),
		AskTimeout:  egress.AskTimeout,
		Answers:     questions.Answers{St: h.storage},
	}
	if h.anyEgressAsk() {
		// Another instance's proxy may take a command's connection: its question comes
		// here when a call here waits for the job.
		o.Relay = questions.Relay{St: h.storage, Self: questions.InstanceID}
	}
	if !h.fleet.HasCheckpoints() {
		o.NoCheckpoints = fleet.NoCheckpointsText
	}
	var k fleet.Engine
	k, o.Ephemeral = fleet.Kubernetes(h.Engines)
	if t := k.StorageLimitText(); t != "" {
		// Only a Kubernetes engine has the limit, and it has no checkpoints: the text
		// follows the one on what is lost outside /sandbox.
		o.NoCheckpoints += " " + t
	}
	if h.previews != nil {
		o.Previews = toolPreviews{h}
	}
	return o
}

// toolConfig is what the tools state of the sandbox's settings.
func toolConfig(c sandbox.Config) mcptools.Config {
	return mcptools.Config{Memory: c.Memory, CPUs: c.CPUs, PidsLimit: c.PidsLimit, NetworkMode: c.NetworkMode,
		ExecTimeout: c.ExecTimeout, MaxOutput: c.MaxOutput, FileTTL: c.FileTTL}
}

// boxes resolves the sandbox of a call: the caller's person's (the fleet's), the
// operator's for the API key and its sign-ins.
type boxes struct{ h *Handler }

func (b boxes) For(ctx context.Context) (mcptools.Box, error) {
	caller := mcptools.CallerFrom(ctx)
	e, err := b.h.fleet.For(ctx, caller.Person)
	if err != nil {
		return nil, err
	}
	if !mcptools.Describing(ctx) {
		metrics.PersonCalls.WithLabelValues(personLabel(caller.Person)).Inc()
	}
	return toolBox{Sandbox: e.Sandbox(), e: e, h: b.h}, nil
}

// toolBox is a pooled sandbox as the tools use it.
type toolBox struct {
	*sandbox.Sandbox
	e *fleet.Entry
	h *Handler
}

// Exec and JobOutput keep the sandbox from idling while they run. A command starts
// once the egress proxy listens, when there is one.
func (b toolBox) Exec(ctx context.Context, command string, opts boxapi.ExecOptions) (*boxapi.ExecResult, error) {
	defer b.e.Begin()()
	if egressOf(b.e) != nil {
		b.e.AwaitListener(ctx, config.EgressPort)
	}
	return b.Sandbox.Exec(ctx, command, opts)
}

func (b toolBox) JobOutput(ctx context.Context, id string, wait time.Duration, input *string, maxOutput int, onOutput func(boxapi.Stream, []byte)) (*boxapi.ExecResult, error) {
	defer b.e.Begin()()
	return b.Sandbox.JobOutput(ctx, id, wait, input, maxOutput, onOutput)
}

func (b toolBox) Facts(ctx context.Context, wait time.Duration) *boxapi.Facts {
	return b.h.sandboxFacts(ctx, b.e, wait)
}

// CPUs is the CPUs the sandbox gets, the engine's count considered (fleet.Entry.CPUs).
func (b toolBox) CPUs() float64 { return b.e.CPUs() }

// Egress is the sandbox's way out through the proxy; nil without an egress block.
func (b toolBox) Egress() *mcptools.Egress {
	gw := egressOf(b.e)
	if gw == nil {
		return nil
	}
	return &mcptools.Egress{Hosts: gw.Allowed(), Offline: gw.Offline(), Ask: gw.Asks()}
}

// Blocked returns, once, what the proxy refused to a job's commands.
func (b toolBox) Blocked(job string) []string {
	if gw := egressOf(b.e); gw != nil {
		return gw.TakeBlocked(job)
	}
	return nil
}

// EngineDown knows the Docker client's errors besides the text of the common ones.
func (b toolBox) EngineDown(err error) bool { return sandbox.EngineDown(err) }

func (b toolBox) Unreachable() string {
	if b.e.Engine().IsKubernetes() {
		return "the Kubernetes API server"
	}
	return "the Docker engine"
}

func (b toolBox) ImageMissing() string { return b.e.ImageMissing(imageRecipe(b.Sandbox)) }

// toolLinks signs the tools' links and records them for the console.
type toolLinks struct{ h *Handler }

func (l toolLinks) Download(ctx context.Context, p string, ttl time.Duration) (string, time.Time) {
	link := l.h.signer.As(mcptools.CallerFrom(ctx).Person).Download(p, time.Now(), ttl)
	l.h.recordLink(ctx, console.KindDownload, link, p)
	return link.Path, link.Expires
}

func (l toolLinks) Upload(ctx context.Context, dir string, ttl time.Duration) (string, time.Time) {
	link := l.h.signer.As(mcptools.CallerFrom(ctx).Person).Upload(dir, time.Now().Add(ttl))
	l.h.recordLink(ctx, console.KindUpload, link, dir)
	return link.Path, link.Expires
}

// toolPreviews exposes ports of the caller's sandbox through the preview server.
type toolPreviews struct{ h *Handler }

func (p toolPreviews) Expose(ctx context.Context, port int, origin string) (string, time.Time) {
	pv := p.h.previews.Expose(p.h.previewOwner(mcptools.CallerFrom(ctx).Person), port)
	p.h.recordPreview(ctx, pv)
	return p.h.previews.URL(pv, origin), pv.Expires
}

func (p toolPreviews) FrameDomain(origin string) string { return p.h.previews.FrameDomain(origin) }

func (p toolPreviews) Unexpose(ctx context.Context, port int) bool {
	owner := p.h.previewOwner(mcptools.CallerFrom(ctx).Person)
	for _, pv := range preview.Shared().List(owner) {
		if pv.Port == port {
			p.h.linkReg.Forget(ctx, previewLinkID(pv.Label))
		}
	}
	return p.h.previews.Unexpose(owner, port)
}

// anyEgressAsk says whether any sandbox of the site puts hosts to its person.
func (h *Handler) anyEgressAsk() bool {
	if h.EgressAsk("") {
		return true
	}
	for _, p := range h.People {
		if h.EgressAsk(p.Name) {
			return true
		}
	}
	return false
}
