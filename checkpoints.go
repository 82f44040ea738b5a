package mcpsandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// This file wires checkpoints (sandbox/checkpoint.go) to the tools and the console.
// The engines' image labels are the only record: they survive Caddy's restarts and
// reloads, and a checkpoint lives on its sandbox's engine with them.

// metricCheckpointBytes is the size of each person's checkpoints, as last listed.
var metricCheckpointBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "checkpoint_bytes",
	Help: "Bytes held by each person's sandbox checkpoints (images' own layers and copies of /sandbox), as last listed.",
}, []string{"person"})

// checkpointPeople are the people the gauge has a value for, so a person whose last
// checkpoint went is set to 0.
var checkpointPeople sync.Map

// noteCheckpointBytes sets the gauge from a listing of every checkpoint of the people
// in it (all of them when all is true).
func noteCheckpointBytes(list []boxapi.Checkpoint, people []string, all bool) {
	sum := map[string]float64{}
	for _, p := range people {
		sum[personLabel(p)] = 0
	}
	if all {
		checkpointPeople.Range(func(k, _ any) bool { sum[k.(string)] = 0; return true })
	}
	for _, c := range list {
		sum[personLabel(c.Person)] += float64(c.SizeBytes)
	}
	for p, n := range sum {
		checkpointPeople.Store(p, true)
		metricCheckpointBytes.WithLabelValues(p).Set(n)
	}
}

// maxCheckpoints is max_checkpoints with its default.
func (h *Handler) maxCheckpoints() int {
	if h.MaxCheckpoints > 0 {
		return h.MaxCheckpoints
	}
	return sandbox.DefaultMaxCheckpoints
}

// SaveCheckpoint, ListCheckpoints and RestoreCheckpoint give the tools
// (mcptools.Checkpoints) the sandbox's own checkpoints.
func (b toolBox) SaveCheckpoint(ctx context.Context, name string) (boxapi.Checkpoint, []boxapi.Checkpoint, error) {
	defer b.e.Begin()()
	res, err := b.Checkpoint(ctx, name, b.h.maxCheckpoints())
	if err != nil {
		return boxapi.Checkpoint{}, nil, b.e.EngineError(err)
	}
	_, _ = b.ListCheckpoints(ctx)
	return res.Checkpoint, res.Dropped, nil
}

func (b toolBox) ListCheckpoints(ctx context.Context) ([]boxapi.Checkpoint, error) {
	list, err := b.Checkpoints(ctx)
	if err != nil {
		return nil, b.e.EngineError(err)
	}
	noteCheckpointBytes(list, []string{b.Config().Person}, false)
	return list, nil
}

func (b toolBox) RestoreCheckpoint(ctx context.Context, id string) error {
	defer b.e.Begin()()
	_, err := b.Restore(ctx, id)
	return b.e.EngineError(err)
}

// consoleCheckpoints is every sandbox's checkpoints, on every engine, for the console.
type consoleCheckpoints struct{ h *Handler }

func (c consoleCheckpoints) Checkpoints(ctx context.Context) ([]console.Checkpoint, error) {
	all, err := c.all(ctx)
	out := make([]console.Checkpoint, 0, len(all))
	for _, ck := range all {
		out = append(out, console.Checkpoint{ID: ck.ID, Name: ck.Name, Person: ck.Person, SizeBytes: ck.SizeBytes,
			CreatedAt: ck.CreatedAt, Engine: ck.Engine})
	}
	return out, err
}

// all lists the checkpoints of this site's sandboxes on every engine.
func (c consoleCheckpoints) all(ctx context.Context) ([]boxapi.Checkpoint, error) {
	var all []boxapi.Checkpoint
	var errs []error
	for _, eng := range c.h.fleet.Engines() {
		cli, done, err := c.h.fleet.EngineClient(eng.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		list, err := sandbox.Checkpoints(ctx, cli)
		done()
		if err != nil {
			errs = append(errs, fmt.Errorf("engine %s: %w", eng.Name, err))
			continue
		}
		for _, ck := range list {
			if c.ours(ck) {
				all = append(all, ck)
			}
		}
	}
	if len(errs) == 0 {
		noteCheckpointBytes(all, nil, true)
	}
	return all, errors.Join(errs...)
}

// ours reports whether ck is of this site's sandboxes: another site on the same
// engine has its own.
func (c consoleCheckpoints) ours(ck boxapi.Checkpoint) bool {
	prefix := c.h.fleet.Operator().Sandbox().Config().Container
	return ck.Container == prefix || ck.Person != "" && ck.Container == prefix+"-"+ck.Person
}

// find is checkpoint id of this site.
func (c consoleCheckpoints) find(ctx context.Context, id string) (boxapi.Checkpoint, error) {
	all, err := c.all(ctx)
	if i := slices.IndexFunc(all, func(ck boxapi.Checkpoint) bool { return ck.ID == id }); i >= 0 {
		return all[i], nil
	}
	if err != nil {
		return boxapi.Checkpoint{}, err
	}
	return boxapi.Checkpoint{}, fmt.Errorf("%w: no checkpoint %s", console.ErrNotFound, id)
}

func (c consoleCheckpoints) DeleteCheckpoint(ctx context.Context, id string) error {
	ck, err := c.find(ctx, id)
	if err != nil {
		return err
	}
	cli, done, err := c.h.fleet.EngineClient(ck.Engine)
	if err != nil {
		return err
	}
	defer done()
	if err := sandbox.DeleteCheckpoint(ctx, cli, id); err != nil {
		return err
	}
	_, _ = c.all(ctx)
	return nil
}

func (c consoleCheckpoints) RestoreCheckpoint(ctx context.Context, id string) error {
	ck, err := c.find(ctx, id)
	if err != nil {
		return err
	}
	if ck.Person != "" && !c.h.fleet.Configured(ck.Person) {
		return fmt.Errorf("%w: %s is no longer configured; copy the checkpoint to a person instead", console.ErrConflict, ck.Person)
	}
	return c.seed(ctx, ck, ck.Person, false)
}

func (c consoleCheckpoints) CopyCheckpoint(ctx context.Context, id, to string, replace bool) error {
	if to != "" && !c.h.fleet.Configured(to) {
		return fmt.Errorf("%w: no person %q is configured", console.ErrNotFound, to)
	}
	ck, err := c.find(ctx, id)
	if err != nil {
		return err
	}
	if !replace {
		cfg, err := c.h.fleet.Config(to)
		if err != nil {
			return err
		}
		eng := ck.Engine
		if e := c.h.fleet.Held(to); e != nil {
			eng = e.Engine().Name
		}
		cli, done, err := c.h.fleet.EngineClient(eng)
		if err != nil {
			return err
		}
		exists, err := sandbox.Exists(ctx, cli, cfg.Container)
		done()
		if err != nil {
			return err
		}
		if exists {
			return fmt.Errorf("%w: %s exists already; send \"replace\": true to replace its system and /sandbox by the checkpoint's", console.ErrConflict, whoseSandbox(to))
		}
	}
	return c.seed(ctx, ck, to, true)
}

// seed makes person's sandbox checkpoint ck: its own (restore), or any (copy).
func (c consoleCheckpoints) seed(ctx context.Context, ck boxapi.Checkpoint, person string, any bool) error {
	e, err := c.h.fleet.Entry(ctx, person)
	if err != nil {
		return err
	}
	if e.Engine().Name != ck.Engine {
		return fmt.Errorf("%w: the checkpoint is on engine %q and %s on engine %q; a checkpoint is restored on its own engine only",
			console.ErrConflict, ck.Engine, whoseSandbox(person), e.Engine().Name)
	}
	defer e.Begin()()
	if any {
		_, err = e.Sandbox().Seed(context.WithoutCancel(ctx), ck.ID)
	} else {
		_, err = e.Sandbox().Restore(context.WithoutCancel(ctx), ck.ID)
	}
	if errors.Is(err, boxapi.ErrCheckpointNotFound) {
		return fmt.Errorf("%w: %w", console.ErrNotFound, err)
	}
	return err
}

// checkpointGrace is how long the checkpoints of a person no longer configured are
// kept, counted from when this site first found the person gone (recorded in storage
// under removedCheckpointsPrefix, so a restart does not start the count again).
const checkpointGrace = 7 * 24 * time.Hour

// checkpointSweepEvery is how often the checkpoints of removed people are looked at.
const checkpointSweepEvery = time.Hour

const removedCheckpointsPrefix = "mcp_sandbox/checkpoints/removed/"

// startCheckpointSweeps deletes, once checkpointGrace has passed, the checkpoints of
// people the configuration no longer names, and what failed checkpoints left. The
// operator's checkpoints are never swept.
func (h *Handler) startCheckpointSweeps() {
	h.fleet.GoBackground(func(ctx context.Context) {
		wait := time.Minute
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = checkpointSweepEvery
			h.sweepRemovedCheckpoints(ctx, time.Now())
		}
	})
}

// sweepRemovedCheckpoints is one pass of startCheckpointSweeps at now.
func (h *Handler) sweepRemovedCheckpoints(ctx context.Context, now time.Time) {
	c := consoleCheckpoints{h}
	all, err := c.all(ctx)
	if err != nil {
		h.logger.Warn("listing checkpoints to sweep those of removed people", zap.Error(err))
		return
	}
	gone := map[string]time.Time{}
	for _, ck := range all {
		if ck.Person == "" || h.fleet.Configured(ck.Person) {
			if ck.Person != "" {
				_ = h.storage.Delete(ctx, removedCheckpointsPrefix+ck.Person)
			}
			continue
		}
		since, seen := gone[ck.Person]
		if !seen {
			since = h.removedSince(ctx, ck.Person, now)
			gone[ck.Person] = since
		}
		if now.Sub(since) < checkpointGrace {
			continue
		}
		cli, done, err := h.fleet.EngineClient(ck.Engine)
		if err != nil {
			continue
		}
		err = sandbox.DeleteCheckpoint(ctx, cli, ck.ID)
		done()
		if err != nil {
			h.logger.Warn("deleting a removed person's checkpoint", zap.String("person", ck.Person), zap.String("id", ck.ID), zap.Error(err))
			continue
		}
		h.logger.Info("deleted the checkpoint of a person no longer configured, after the grace period",
			zap.String("person", ck.Person), zap.String("id", ck.ID), zap.Duration("grace", checkpointGrace))
	}
	// What checkpoints that failed halfway left (Caddy stopped mid-copy), and the images
	// of deleted checkpoints a sandbox ran from until it went, of every sandbox of this
	// site: each sandbox's own listing removes them too, but may never come.
	prefix := h.fleet.Operator().Sandbox().Config().Container
	ours := func(container string) bool {
		person, ok := strings.CutPrefix(container, prefix+"-")
		return container == prefix || ok && fleet.ValidName(person)
	}
	for _, eng := range h.fleet.Engines() {
		if cli, done, err := h.fleet.EngineClient(eng.Name); err == nil {
			if err := sandbox.SweepLeftovers(ctx, cli, ours, h.logger); err != nil {
				h.logger.Warn("removing what failed checkpoints left", zap.String("engine", eng.Name), zap.Error(err))
			}
			done()
		}
	}
}

// removedSince is when this site first found person gone, recording now when it had not.
func (h *Handler) removedSince(ctx context.Context, person string, now time.Time) time.Time {
	key := removedCheckpointsPrefix + person
	if b, err := h.storage.Load(ctx, key); err == nil {
		if t, err := time.Parse(time.RFC3339, string(b)); err == nil {
			return t
		}
	}
	if err := h.storage.Store(ctx, key, []byte(now.UTC().Format(time.RFC3339))); err != nil {
		h.logger.Warn("recording when a person's checkpoints were left", zap.String("person", person), zap.Error(err))
	}
	return now
}
