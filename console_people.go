package mcpsandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// consoleSandboxes shows the operator every sandbox of a site with people (the
// operator's own first) and acts on one.
type consoleSandboxes struct{ h *Handler }

// statusParallel bounds the sandboxes whose status is read at once: each takes a CPU
// sample of about a second.
const statusParallel = 8

func (c consoleSandboxes) People() []string {
	out := make([]string, 0, len(c.h.People))
	for _, p := range c.h.People {
		out = append(out, p.Name)
	}
	return out
}

func (c consoleSandboxes) Removed(ctx context.Context) []string {
	var out []string
	for _, x := range c.h.removedSandboxes(ctx) {
		out = append(out, x.Person)
	}
	return out
}

// List is the operator's sandbox, the people's, and then the sandboxes of people the
// configuration no longer names that still exist (removed: true).
func (c consoleSandboxes) List(ctx context.Context) ([]console.SandboxInfo, error) {
	people := append([]string{""}, c.People()...)
	removed := c.h.removedSandboxes(ctx)
	out := make([]console.SandboxInfo, len(people)+len(removed))
	slots := make(chan struct{}, statusParallel)
	var wg sync.WaitGroup
	fill := func(i int, info func() console.SandboxInfo) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			out[i] = info()
		}()
	}
	for i, p := range people {
		fill(i, func() console.SandboxInfo { return c.h.sandboxInfo(ctx, p) })
	}
	for i, x := range removed {
		fill(len(people)+i, func() console.SandboxInfo { return c.h.removedInfo(ctx, x) })
	}
	wg.Wait()
	return out, nil
}

// removedInfo reads the status of a removed person's sandbox; nothing is started.
func (h *Handler) removedInfo(ctx context.Context, x existingSandbox) console.SandboxInfo {
	info := console.SandboxInfo{Person: x.Person, Container: x.Name, Engine: x.Engine.Name, State: x.State, DiskUsed: -1, Removed: true}
	sb, done, err := h.removedView(x)
	if err != nil {
		info.Error = err.Error()
		return info
	}
	defer done()
	st, err := sb.Status(ctx)
	info.State, info.CPU = st.State, st.CPU
	info.Memory, info.MemoryLimit, info.DiskUsed = st.Memory, st.MemoryLimit, st.DiskUsed
	if err != nil {
		info.Error = err.Error()
	}
	return info
}

// observed returns person's sandbox to look at: the one held, or, for a person whose
// sandbox this config has not used, one made only to be looked at (Status never starts
// anything).
func (h *Handler) observed(person string) (*sandbox.Sandbox, error) {
	if e := h.heldSandbox(person); e != nil {
		return e.sb, nil
	}
	cfg, err := h.sandboxConfigFor(person)
	if err != nil {
		return nil, err
	}
	return sandbox.New(h.docker, cfg, h.logger.Named("sandbox"))
}

// sandboxInfo reads the status of person's sandbox. The jobs of a running one are
// counted through the pooled sandbox, which then counts as held (it exists).
func (h *Handler) sandboxInfo(ctx context.Context, person string) console.SandboxInfo {
	info := console.SandboxInfo{Person: person, State: "unknown", DiskUsed: -1}
	if e := h.heldSandbox(person); e != nil {
		info.Engine = e.engine.Name
	}
	sb, err := h.observed(person)
	if err != nil {
		info.Error = err.Error()
		return info
	}
	st, err := sb.Status(ctx)
	info.Container, info.State, info.CPU = st.Container, st.State, st.CPU
	info.Memory, info.MemoryLimit, info.DiskUsed = st.Memory, st.MemoryLimit, st.DiskUsed
	if err != nil {
		info.Error = err.Error()
		return info
	}
	if st.State == "running" {
		// Placed, not used: looking from the console keeps no sandbox from idling.
		e, err := h.placedEntry(ctx, person)
		if err == nil {
			var jobs []boxapi.JobInfo
			jobs, err = e.sb.RunningJobs(ctx)
			info.Jobs = len(jobs)
		}
		if err != nil {
			info.Error = err.Error()
		}
	}
	return info
}

func (c consoleSandboxes) Act(ctx context.Context, person, action string) error {
	h := c.h
	if person != "" && h.person(person) == nil {
		return h.actRemoved(ctx, person, action)
	}
	switch action {
	case "stop":
		sb, err := h.observed(person)
		if err != nil {
			return err
		}
		return sb.Stop(ctx, "operator")
	case console.ActDelete, console.ActDeleteVolume:
		return fmt.Errorf("%w: only the sandbox of a person no longer configured is deleted here; Recreate replaces a configured person's container and keeps /sandbox", console.ErrConflict)
	}
	e, err := h.sandboxFor(ctx, person)
	if err != nil {
		return err
	}
	switch action {
	case "start":
		return e.sb.Ensure(ctx)
	case "restart":
		return e.sb.Restart(ctx)
	case "recreate":
		return e.sb.Recreate(ctx)
	}
	return console.ErrNotFound
}

// actRemoved stops or deletes the sandbox of a person the configuration no longer
// names; nothing else is done to it, so that it cannot run again unnoticed.
func (h *Handler) actRemoved(ctx context.Context, person, action string) error {
	sb, done, err := h.removedSandbox(ctx, person)
	if errors.Is(err, errNoRemoved) {
		return console.ErrNotFound
	}
	if err != nil {
		return err
	}
	defer done()
	switch action {
	case "stop":
		return sb.Stop(ctx, "operator")
	case console.ActDelete, console.ActDeleteVolume:
		if err := sb.Delete(ctx, action == console.ActDeleteVolume); err != nil {
			return err
		}
		recentPlacements.Delete(sb.Config().Container)
		if err := h.storage.Delete(ctx, placementPrefix+sb.Config().Container); err != nil && !errors.Is(err, fs.ErrNotExist) {
			h.logger.Warn("forgetting the placement of a deleted sandbox", zap.String("container", sb.Config().Container), zap.Error(err))
		}
		return nil
	}
	return fmt.Errorf("%w: %s is no longer configured: add their person line back to start their sandbox, or delete it", console.ErrConflict, person)
}
