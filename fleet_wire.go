package mcpsandbox

import (
	"context"
	_ "embed"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/metrics"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// This file builds the handler's fleet (internal/fleet: placement on engines, idle
// stop, removed people's sandboxes) from its configuration, and shows it to the console.

// unifiedDockerfile is the production image's recipe, built in the background when the
// default image is missing so that a new install works without a manual build.
//
//go:embed containers/Dockerfile.unified
var unifiedDockerfile []byte

// autoBuildImages are the image names built from unifiedDockerfile when missing. A
// custom image name is never built from our recipe: the error says how to provide it.
var autoBuildImages = map[string]bool{"code-sandbox:latest": true}

// provisionFleet makes the fleet, which acquires the operator's sandbox (base) from the
// app's pool. It does no Docker I/O.
func (h *Handler) provisionFleet(base sandbox.Config) error {
	people := make([]fleet.Person, 0, len(h.People))
	for _, p := range h.People {
		people = append(people, p.Limits())
	}
	warm, err := h.provisionWarm(base)
	if err != nil {
		return err
	}
	f, err := fleet.New(fleet.Options{
		Base: base, People: people, Engines: h.Engines,
		Acquire: h.app.acquire, Placed: h.setupEgress, Claimed: h.app.claimed,
		Storage: h.storage, IdleStop: time.Duration(h.IdleStop), MaxSandboxes: h.MaxSandboxes,
		Warm: warm, WarmTaken: metrics.WarmTaken.Inc,
		IdleStopped: metrics.IdleStops.Inc, CheckpointBytes: noteCheckpointBytes, Logger: h.logger,
	})
	if err != nil {
		return errors.Join(err, h.releaseWarmPool())
	}
	h.fleet = f
	return nil
}

// provisionWarm takes the site's warm sandboxes' pool (warm_sandboxes) from the app,
// shared with the previous configuration when its settings are the same; nil
// without. A Kubernetes engine has none: each person's pod is made on first use. It
// does no Docker I/O.
func (h *Handler) provisionWarm(base sandbox.Config) (*fleet.WarmPool, error) {
	if h.WarmSandboxes <= 0 {
		return nil, nil
	}
	if eng, ok := fleet.Kubernetes(h.Engines); ok {
		h.logger.Info("warm_sandboxes is for Docker engines; on the Kubernetes engine each person's sandbox is made on first use",
			zap.String("engine", eng.Name), zap.Int("warm_sandboxes", h.WarmSandboxes))
		return nil, nil
	}
	var eng fleet.Engine
	if len(h.Engines) > 0 {
		eng = h.Engines[0]
	}
	pool, release, err := h.app.acquireWarm(eng, base, h.WarmSandboxes)
	if err != nil {
		return nil, err
	}
	h.releaseWarm = release
	return pool, nil
}

// releaseWarmPool gives back the warm sandboxes' pool, if the handler took one.
func (h *Handler) releaseWarmPool() error {
	if h.releaseWarm == nil {
		return nil
	}
	err := h.releaseWarm()
	h.releaseWarm = nil
	return err
}

// noteCheckpointBytes sets the gauge of person's checkpoints.
func noteCheckpointBytes(person string, n int64) {
	metrics.CheckpointBytes.WithLabelValues(personLabel(person)).Set(float64(n))
}

// egressOf is the egress gateway of a sandbox; nil without an egress block.
func egressOf(e *fleet.Entry) *egress.Gateway {
	gw, _ := e.Sidecar().(*egress.Gateway)
	return gw
}

// imageRecipe is the recipe the image of sb is built from when missing; nil when the
// image is not ours to build.
func imageRecipe(sb *sandbox.Sandbox) []byte {
	if autoBuildImages[sb.Config().Image] {
		return unifiedDockerfile
	}
	return nil
}

// consoleSandboxes shows the operator every sandbox of a site with people (the
// operator's own first) and acts on one.
type consoleSandboxes struct{ h *Handler }

func (c consoleSandboxes) People() []string { return c.h.fleet.People() }

func (c consoleSandboxes) Removed(ctx context.Context) []string {
	var out []string
	for _, x := range c.h.fleet.Removed(ctx) {
		out = append(out, x.Person)
	}
	return out
}

// Warm is the site's warm sandboxes; nil when it keeps none.
func (c consoleSandboxes) Warm() *console.WarmInfo {
	p := c.h.fleet.Warm()
	if p == nil {
		return nil
	}
	ready, making := p.Ready(), p.Count()
	return &console.WarmInfo{Wanted: c.h.WarmSandboxes, Ready: ready, Making: max(making-ready, 0), Taken: p.Taken(), Engine: p.Engine().Name}
}

// keptProcesses is what the console shows of keep_processes for sb.
func keptProcesses(sb *sandbox.Sandbox) (state string, bytes int64, why string) {
	keeps, why := sb.KeepsProcesses()
	saved, n := sb.Kept()
	switch {
	case saved:
		return console.ProcessesSaved, n, ""
	case keeps:
		return console.ProcessesKept, 0, ""
	}
	return "", 0, why
}

// List is the operator's sandbox, the people's, and then the sandboxes of people the
// configuration no longer names that still exist (removed: true).
func (c consoleSandboxes) List(ctx context.Context) ([]console.SandboxInfo, error) {
	var out []console.SandboxInfo
	for _, s := range c.h.fleet.Statuses(ctx) {
		info := console.SandboxInfo{Person: s.Person, Container: s.Container, Engine: s.Engine, Node: s.Node, Runtime: s.Runtime, State: s.State,
			CPU: s.CPU, Memory: s.Memory, MemoryLimit: s.MemoryLimit, DiskUsed: s.DiskUsed, Jobs: s.Jobs, Removed: s.Removed,
			NoUsage: s.NoUsage}
		if !s.Removed {
			info.Agent, info.Egress = c.channels(s)
			e := c.h.fleet.Held(s.Person)
			if e != nil && e.IdleStopped() && s.State != "running" {
				info.StoppedBy = console.StoppedIdle
			}
			if e != nil {
				info.Processes, info.KeptBytes, info.NoKeep = keptProcesses(e.Sandbox())
			}
		}
		if s.Err != nil {
			info.Error = s.Err.Error()
		}
		out = append(out, info)
	}
	return out, nil
}

// Act does action to person's sandbox (fleet.Act; the console's action names are the
// fleet's).
func (c consoleSandboxes) Act(ctx context.Context, person, action string) error {
	return consoleError(c.h.fleet.Act(ctx, person, action))
}

// channels are the agent's channel and the egress proxy's state of the sandbox whose
// status is s, read from the sandbox this process holds (nothing is started).
func (c consoleSandboxes) channels(s fleet.Status) (console.Agent, string) {
	var a console.Agent
	e := c.h.fleet.Held(s.Person)
	if e == nil {
		cfg, _ := c.h.SandboxConfigFor(s.Person)
		a.Disabled = cfg.NoAgent
		switch {
		case c.h.Egress == nil:
			return a, console.EgressNone
		case s.State == "running":
			return a, console.EgressNotStarted
		}
		return a, console.EgressStopped
	}
	a = consoleSandbox{sb: e.Sandbox()}.agent()
	gw := egressOf(e)
	switch {
	case gw == nil:
		return a, console.EgressNone
	case s.State != "running":
		return a, console.EgressStopped
	case gw.Offline():
		return a, console.EgressOffline
	}
	return a, console.EgressListening
}
