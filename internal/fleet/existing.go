package fleet

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Existing is a person's sandbox container of this site found on an engine.
type Existing struct {
	sandbox.Container
	Person string // whose, from its name (and label)
	Engine Engine
}

// ErrNoRemoved is the answer for a person who has no removed sandbox.
var ErrNoRemoved = errors.New("no such removed person's sandbox")

// Existing lists the people's sandbox containers of this site that exist on its
// engines, running or stopped, configured or not. An engine that does not answer is
// left out (and logged).
func (f *Fleet) Existing(ctx context.Context) []Existing {
	engines := f.o.Engines
	if len(engines) == 0 {
		engines = []Engine{{Host: f.operator.engine.Host}}
	}
	lists := make([][]Existing, len(engines))
	var wg sync.WaitGroup
	for i, eng := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli, done, err := f.engineClient(eng)
			if err != nil {
				f.logger.Warn("listing sandboxes", zap.String("engine", eng.Name), zap.Error(err))
				return
			}
			defer done()
			if cli == nil { // no engine to ask (an entry without a client)
				return
			}
			lctx, cancel := context.WithTimeout(ctx, engineProbeTimeout)
			defer cancel()
			list, err := sandbox.Containers(lctx, cli)
			if err != nil {
				f.logger.Warn("listing sandboxes", zap.String("engine", eng.Name), zap.Error(err))
				return
			}
			for _, c := range list {
				person, ok := personOfContainer(f.o.Base, c, f.Configured)
				if ok && (f.Configured(person) || f.o.Claimed == nil || !f.o.Claimed(c.Name)) {
					lists[i] = append(lists[i], Existing{Container: c, Person: person, Engine: eng})
				}
			}
		}()
	}
	wg.Wait()
	var out []Existing
	seen := map[string]bool{}
	for _, l := range lists {
		for _, x := range l {
			if !seen[x.Name] {
				seen[x.Name] = true
				out = append(out, x)
			}
		}
	}
	return out
}

// engineClient is a client of eng and the function that closes it: the operator's own
// for the engine of the operator's sandbox.
func (f *Fleet) engineClient(eng Engine) (sandbox.API, func(), error) {
	if eng.Name == "" || (len(f.o.Engines) > 0 && eng == f.o.Engines[0]) {
		return f.operator.cli, func() {}, nil
	}
	cli, err := eng.NewClient(f.logger)
	if err != nil {
		return nil, nil, err
	}
	return cli, func() { cli.Close() }, nil
}

// Removed are the existing sandboxes of people this configuration no longer names,
// by person.
func (f *Fleet) Removed(ctx context.Context) []Existing {
	var out []Existing
	for _, x := range f.Existing(ctx) {
		if !f.Configured(x.Person) {
			out = append(out, x)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Person < out[j].Person })
	return out
}

// RemovedSandbox is the sandbox of person if they were removed and it still exists,
// for looking at, stopping or deleting; done closes its client. ErrNoRemoved if not.
func (f *Fleet) RemovedSandbox(ctx context.Context, person string) (sb *sandbox.Sandbox, done func(), err error) {
	for _, x := range f.Removed(ctx) {
		if x.Person == person {
			return f.removedView(x)
		}
	}
	return nil, nil, ErrNoRemoved
}

// DeleteRemoved deletes the sandbox of a removed person, with its volume when volume
// is set, and forgets its placement. ErrNoRemoved if there is none.
func (f *Fleet) DeleteRemoved(ctx context.Context, person string, volume bool) error {
	sb, done, err := f.RemovedSandbox(ctx, person)
	if err != nil {
		return err
	}
	defer done()
	if err := sb.Delete(ctx, volume); err != nil {
		return err
	}
	f.forget(ctx, sb.Config().Container)
	if volume {
		f.forgetVolume(ctx, person, sb.Config().Container)
	}
	return nil
}

// removedView is a Sandbox through which a removed person's container is looked at,
// stopped or deleted; done closes its client.
func (f *Fleet) removedView(x Existing) (*sandbox.Sandbox, func(), error) {
	cfg := f.o.Base
	vol := cfg.Volume + "-" + x.Person
	if x.Volume != "" {
		vol = x.Volume
	}
	cfg.Container, cfg.Volume, cfg.Person, cfg.Engine = x.Name, vol, x.Person, x.Engine.Name
	cli, done, err := f.engineClient(x.Engine)
	if err != nil {
		return nil, nil, err
	}
	sb, err := sandbox.New(cli, cfg, f.logger.Named("sandbox"))
	if err != nil {
		done()
		return nil, nil, err
	}
	return sb, done, nil
}

// removedStopAgain is when the sandboxes of removed people are stopped a second time:
// a call still under way on the previous configuration may have started one.
const removedStopAgain = 10 * time.Second

// startRemovedStops stops, when the configuration starts and once more shortly after,
// the containers of people it no longer names: they are kept (the console lists them,
// with Stop and Delete) but nothing of theirs runs.
func (f *Fleet) startRemovedStops() {
	f.goBackground(func(ctx context.Context) {
		for i, wait := range []time.Duration{0, removedStopAgain} {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			f.stopRemoved(ctx, i == 0)
		}
	})
}

func (f *Fleet) stopRemoved(ctx context.Context, first bool) {
	for _, x := range f.Removed(ctx) {
		if x.State != "running" && x.State != "restarting" && x.State != "paused" {
			if first {
				f.logger.Info("sandbox of a person no longer configured is kept, stopped; the console deletes it",
					zap.String("person", x.Person), zap.String("container", x.Name), zap.String("engine", x.Engine.Name))
			}
			continue
		}
		sb, done, err := f.removedView(x)
		if err != nil {
			f.logger.Warn("stopping the sandbox of a removed person", zap.String("person", x.Person), zap.Error(err))
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = sb.Stop(sctx, "person removed from the configuration")
		cancel()
		done()
		if err != nil && ctx.Err() == nil {
			f.logger.Warn("stopping the sandbox of a removed person", zap.String("person", x.Person), zap.String("container", x.Name), zap.Error(err))
			continue
		}
		f.logger.Info("stopped the sandbox of a person no longer configured; it is kept, the console deletes it",
			zap.String("person", x.Person), zap.String("container", x.Name), zap.String("engine", x.Engine.Name))
	}
}
