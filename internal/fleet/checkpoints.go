package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Checkpoints (sandbox/checkpoint.go) across the fleet: the engines' image labels are
// the only record; they survive Caddy's restarts and reloads, and a checkpoint lives on
// its sandbox's engine with them.

// ErrNotFound and ErrConflict say a checkpoint is not there, or cannot be acted on now;
// their texts are those the console shows for the same.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("not possible now")
)

// CheckpointGrace is how long the checkpoints of a person no longer configured are
// kept, counted from when this site first found the person gone (recorded in storage
// under RemovedCheckpointsPrefix, so a restart does not start the count again).
const CheckpointGrace = 7 * 24 * time.Hour

// checkpointSweepEvery is how often the checkpoints of removed people are looked at.
const checkpointSweepEvery = time.Hour

// RemovedCheckpointsPrefix is where storage records when a person was first found gone.
const RemovedCheckpointsPrefix = "mcp_sandbox/checkpoints/removed/"

// checkpointPeople are the people the bytes were told for, across fleets, so a person
// whose last checkpoint went is told 0.
var checkpointPeople sync.Map

// noteCheckpointBytes tells Options.CheckpointBytes the sizes from a listing of every
// checkpoint of the people in it (all of them when all is true).
func (f *Fleet) noteCheckpointBytes(list []boxapi.Checkpoint, people []string, all bool) {
	if f.o.CheckpointBytes == nil {
		return
	}
	sum := map[string]int64{}
	for _, p := range people {
		sum[p] = 0
	}
	if all {
		checkpointPeople.Range(func(k, _ any) bool { sum[k.(string)] = 0; return true })
	}
	for _, c := range list {
		sum[c.Person] += c.SizeBytes
	}
	for p, n := range sum {
		checkpointPeople.Store(p, true)
		f.o.CheckpointBytes(p, n)
	}
}

// HasCheckpoints reports whether the sandboxes can be checkpointed: not on a
// Kubernetes engine, which has no images to commit a container to.
func (f *Fleet) HasCheckpoints() bool {
	_, kube := Kubernetes(f.o.Engines)
	return !kube
}

// NoCheckpointsText is what the model is told when checkpoints are not offered
// (HasCheckpoints false), with what to do instead.
const NoCheckpointsText = `Checkpoints are not supported on this server (its sandboxes are Kubernetes pods): there is no checkpoint, checkpoint_list or restore tool. Everything outside /sandbox (installed packages, system changes) is lost whenever the pod is recreated (idle stop, restart, eviction), so keep what matters under /sandbox, write down how to reinstall what you install, and to keep a copy elsewhere, archive it (tar) and share_file it to the user.`

// Engines are the engines sandboxes may be on: the engine lines, or one unnamed engine
// (the operator's) without them.
func (f *Fleet) Engines() []Engine {
	if len(f.o.Engines) == 0 {
		return []Engine{{}}
	}
	return f.o.Engines
}

// EngineClient is a client of the engine named name ("" without engine lines) and the
// function that closes it.
func (f *Fleet) EngineClient(name string) (sandbox.API, func(), error) {
	for _, e := range f.o.Engines {
		if e.Name == name {
			return f.engineClient(e)
		}
	}
	return f.engineClient(Engine{})
}

// EngineError says which engine did not answer, when that is what err means.
func (e *Entry) EngineError(err error) error {
	if err == nil {
		return nil
	}
	return e.engineError(err)
}

// CheckpointsOf lists the checkpoints of e's sandbox.
func (f *Fleet) CheckpointsOf(ctx context.Context, e *Entry) ([]boxapi.Checkpoint, error) {
	list, err := e.Sandbox().Checkpoints(ctx)
	if err != nil {
		return nil, err
	}
	f.noteCheckpointBytes(list, []string{e.Sandbox().Config().Person}, false)
	return list, nil
}

// Checkpoints lists the checkpoints of this site's sandboxes on every engine; an
// engine that does not answer is in the error, the others' checkpoints are listed.
func (f *Fleet) Checkpoints(ctx context.Context) ([]boxapi.Checkpoint, error) {
	var all []boxapi.Checkpoint
	var errs []error
	prefix := f.operator.Sandbox().Config().Container
	for _, eng := range f.Engines() {
		cli, done, err := f.EngineClient(eng.Name)
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
			// This site's sandboxes only: another site on the same engine has its own.
			if ck.Container == prefix || ck.Person != "" && ck.Container == prefix+"-"+ck.Person {
				all = append(all, ck)
			}
		}
	}
	if len(errs) == 0 {
		f.noteCheckpointBytes(all, nil, true)
	}
	return all, errors.Join(errs...)
}

// FindCheckpoint is checkpoint id of this site.
func (f *Fleet) FindCheckpoint(ctx context.Context, id string) (boxapi.Checkpoint, error) {
	all, err := f.Checkpoints(ctx)
	if i := slices.IndexFunc(all, func(ck boxapi.Checkpoint) bool { return ck.ID == id }); i >= 0 {
		return all[i], nil
	}
	if err != nil {
		return boxapi.Checkpoint{}, err
	}
	return boxapi.Checkpoint{}, fmt.Errorf("%w: no checkpoint %s", ErrNotFound, id)
}

// DeleteCheckpoint deletes checkpoint id of this site.
func (f *Fleet) DeleteCheckpoint(ctx context.Context, id string) error {
	ck, err := f.FindCheckpoint(ctx, id)
	if err != nil {
		return err
	}
	cli, done, err := f.EngineClient(ck.Engine)
	if err != nil {
		return err
	}
	defer done()
	if err := sandbox.DeleteCheckpoint(ctx, cli, id); err != nil {
		return err
	}
	_, _ = f.Checkpoints(ctx)
	return nil
}

// RestoreCheckpoint puts the sandbox checkpoint id was taken of back to it; its person
// must still be configured.
func (f *Fleet) RestoreCheckpoint(ctx context.Context, id string) error {
	ck, err := f.FindCheckpoint(ctx, id)
	if err != nil {
		return err
	}
	if ck.Person != "" && !f.Configured(ck.Person) {
		return fmt.Errorf("%w: %s is no longer configured; copy the checkpoint to a person instead", ErrConflict, ck.Person)
	}
	return f.seed(ctx, ck, ck.Person, false)
}

// SeedCheckpoint makes the sandbox of person to ("" the operator's) a copy of
// checkpoint id. Without replace, a sandbox that exists already is left alone.
func (f *Fleet) SeedCheckpoint(ctx context.Context, id, to string, replace bool) error {
	if to != "" && !f.Configured(to) {
		return fmt.Errorf("%w: no person %q is configured", ErrNotFound, to)
	}
	ck, err := f.FindCheckpoint(ctx, id)
	if err != nil {
		return err
	}
	if !replace {
		cfg, err := f.configFor(ctx, to)
		if err != nil {
			return err
		}
		eng := ck.Engine
		if e := f.Held(to); e != nil {
			eng = e.Engine().Name
		}
		cli, done, err := f.EngineClient(eng)
		if err != nil {
			return err
		}
		exists, err := sandbox.Exists(ctx, cli, cfg.Container)
		done()
		if err != nil {
			return err
		}
		if exists {
			return fmt.Errorf("%w: %s exists already; send \"replace\": true to replace its system and /sandbox by the checkpoint's", ErrConflict, WhoseSandbox(to))
		}
	}
	return f.seed(ctx, ck, to, true)
}

// seed makes person's sandbox checkpoint ck: its own (restore), or any (copy).
func (f *Fleet) seed(ctx context.Context, ck boxapi.Checkpoint, person string, any bool) error {
	e, err := f.Entry(ctx, person)
	if err != nil {
		return err
	}
	if e.Engine().Name != ck.Engine {
		return fmt.Errorf("%w: the checkpoint is on engine %q and %s on engine %q; a checkpoint is restored on its own engine only",
			ErrConflict, ck.Engine, WhoseSandbox(person), e.Engine().Name)
	}
	defer e.Begin()()
	if any {
		_, err = e.Sandbox().Seed(context.WithoutCancel(ctx), ck.ID)
	} else {
		_, err = e.Sandbox().Restore(context.WithoutCancel(ctx), ck.ID)
	}
	if errors.Is(err, boxapi.ErrCheckpointNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// StartCheckpointSweeps deletes, once CheckpointGrace has passed, the checkpoints of
// people the configuration no longer names, and what failed checkpoints left. The
// operator's checkpoints are never swept. A Kubernetes engine keeps no checkpoints:
// nothing is swept.
func (f *Fleet) StartCheckpointSweeps() {
	if !f.HasCheckpoints() {
		return
	}
	f.goBackground(func(ctx context.Context) {
		wait := time.Minute
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = checkpointSweepEvery
			if len(f.o.People) > 0 {
				f.SweepRemovedCheckpoints(ctx, time.Now())
			}
			f.SweepCheckpointLeftovers(ctx)
		}
	})
}

// SweepRemovedCheckpoints is one pass of StartCheckpointSweeps at now.
func (f *Fleet) SweepRemovedCheckpoints(ctx context.Context, now time.Time) {
	all, err := f.Checkpoints(ctx)
	if err != nil {
		f.logger.Warn("listing checkpoints to sweep those of removed people", zap.Error(err))
		return
	}
	gone := map[string]time.Time{}
	for _, ck := range all {
		if ck.Person == "" || f.Configured(ck.Person) {
			if ck.Person != "" && f.o.Storage != nil {
				_ = f.o.Storage.Delete(ctx, RemovedCheckpointsPrefix+ck.Person)
			}
			continue
		}
		since, seen := gone[ck.Person]
		if !seen {
			since = f.removedSince(ctx, ck.Person, now)
			gone[ck.Person] = since
		}
		if now.Sub(since) < CheckpointGrace {
			continue
		}
		cli, done, err := f.EngineClient(ck.Engine)
		if err != nil {
			continue
		}
		err = sandbox.DeleteCheckpoint(ctx, cli, ck.ID)
		done()
		if err != nil {
			f.logger.Warn("deleting a removed person's checkpoint", zap.String("person", ck.Person), zap.String("id", ck.ID), zap.Error(err))
			continue
		}
		f.logger.Info("deleted the checkpoint of a person no longer configured, after the grace period",
			zap.String("person", ck.Person), zap.String("id", ck.ID), zap.Duration("grace", CheckpointGrace))
	}
}

// SweepCheckpointLeftovers removes what checkpoints that failed halfway left (Caddy
// stopped mid-copy), and the images of deleted checkpoints a sandbox ran from until it
// went, of every sandbox of this site on every engine: each sandbox's own listing
// removes them too, but may never come.
func (f *Fleet) SweepCheckpointLeftovers(ctx context.Context) {
	prefix := f.operator.Sandbox().Config().Container
	ours := func(container string) bool {
		person, ok := strings.CutPrefix(container, prefix+"-")
		return container == prefix || ok && ValidName(person)
	}
	for _, eng := range f.Engines() {
		cli, done, err := f.EngineClient(eng.Name)
		if err != nil {
			continue
		}
		if err := sandbox.SweepLeftovers(ctx, cli, ours, f.logger); err != nil {
			f.logger.Warn("removing what failed checkpoints left", zap.String("engine", eng.Name), zap.Error(err))
		}
		done()
	}
}

// removedSince is when this site first found person gone, recording now when it had
// not. Without storage the count starts at every pass, so nothing is swept.
func (f *Fleet) removedSince(ctx context.Context, person string, now time.Time) time.Time {
	if f.o.Storage == nil {
		return now
	}
	key := RemovedCheckpointsPrefix + person
	if b, err := f.o.Storage.Load(ctx, key); err == nil {
		if t, err := time.Parse(time.RFC3339, string(b)); err == nil {
			return t
		}
	}
	if err := f.o.Storage.Store(ctx, key, []byte(now.UTC().Format(time.RFC3339))); err != nil {
		f.logger.Warn("recording when a person's checkpoints were left", zap.String("person", person), zap.Error(err))
	}
	return now
}
