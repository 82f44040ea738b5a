// Package fleet resolves the sandbox of a person: the Docker engine it is placed on
// (engine lines, recorded in storage), its activity, stopping it when idle (idle_stop)
// and starting it again, max_sandboxes, and the sandboxes of people the configuration
// no longer names. It knows nothing of Caddy or HTTP: the caller pools the entries
// across configuration reloads (Options.Acquire) and attaches what runs beside each
// sandbox (the egress proxy) as its [Sidecar].
//
//	f, err := fleet.New(fleet.Options{Base: cfg, People: people, Acquire: pool.acquire, Storage: st})
//	...
//	f.Start()          // the idle-stop loop and the stops of removed people's sandboxes
//	e, err := f.For(ctx, "alice")
//	res, err := e.Sandbox().Exec(ctx, "uname -a", boxapi.ExecOptions{})
//	...
//	f.Close()          // gives back every entry it holds
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Storage is where placements are recorded and locked, shared by the instances that
// share it: certmagic.Storage (Caddy's storage) is one.
type Storage interface {
	Lock(ctx context.Context, name string) error
	Unlock(ctx context.Context, name string) error
	Store(ctx context.Context, key string, value []byte) error
	Load(ctx context.Context, key string) ([]byte, error)
	Delete(ctx context.Context, key string) error
	List(ctx context.Context, path string, recursive bool) ([]string, error)
}

// Options are a fleet's settings and what it depends on.
type Options struct {
	// Base is the configuration of the operator's sandbox; a person's derives from it
	// (PersonConfig).
	Base sandbox.Config
	// People are the person lines, in configuration order.
	People []Person
	// Engines are the engine lines: the operator's sandbox is on the first, a person's
	// on the one with the fewest sandboxes when it is first made. Empty: the default
	// engine, the one Acquire gives for an Engine without a name.
	Engines []Engine
	// Acquire returns the entry of cfg on eng, shared with the configurations that use
	// the same container with the same settings, and the function that gives it back.
	// It does no Docker I/O.
	Acquire func(eng Engine, cfg sandbox.Config) (*Entry, func() error, error)
	// Placed readies a person's entry when the fleet first places it, before its
	// loops and sidecar start (the sidecar's rules). Optional.
	Placed func(e *Entry, person string) error
	// Claimed reports whether a site of this configuration uses the container name.
	// A container that another site claims is never listed as this one's. Optional.
	Claimed func(name string) bool
	// Storage records which engine each sandbox is on. Needed with Engines.
	Storage Storage
	// IdleStop stops a sandbox's container after this long without use; 0: never.
	IdleStop time.Duration
	// MaxSandboxes caps the people's sandboxes of the site; 0: no cap.
	MaxSandboxes int
	// IdleStopped is told of each sandbox stopped for idleness (a metric). Optional.
	IdleStopped func()
	// Warm, when set, is the site's warm sandboxes: a new person whose settings are
	// the site's takes one on first use. The caller pools it across configurations;
	// Start and Close tie its max_sandboxes check to this fleet.
	Warm *WarmPool
	// WarmTaken is told of each warm sandbox a person takes (a metric). Optional.
	WarmTaken func()
	// CheckpointBytes is told the bytes of a person's checkpoints ("" the operator's)
	// whenever they are listed, 0 once the last is gone (a metric). Optional.
	CheckpointBytes func(person string, bytes int64)
	Logger          *zap.Logger
}

// Fleet is the sandboxes of one site under one configuration: the operator's, placed
// when the fleet is made, and the people's, placed on first use.
type Fleet struct {
	o        Options
	logger   *zap.Logger
	operator *Entry
	release  func() error // the operator's

	placeMu  sync.Mutex // one placement at a time
	mu       sync.Mutex
	placed   map[string]*Entry // people's sandboxes, by person
	releases []func() error    // their pool holds
	closed   bool              // Close gave them back: no more are placed
	// volumes are the people's volumes as storage records them ("": none recorded,
	// <volume>-<person>), as far as the fleet has looked (warm.go).
	volumes  map[string]string
	undoRoom func() // ends the warm pool's use of this fleet's max_sandboxes check and storage

	bgMu     sync.Mutex
	bgCtx    context.Context
	bgCancel context.CancelFunc // ends the loops of goBackground
	bg       sync.WaitGroup
}

// New makes the fleet and acquires the operator's sandbox, on the first engine. It
// does no Docker I/O.
func New(o Options) (*Fleet, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Acquire == nil {
		return nil, errors.New("fleet: Options.Acquire is missing")
	}
	var eng Engine
	if len(o.Engines) > 0 {
		eng = o.Engines[0]
	}
	cfg := o.Base
	cfg.Engine = eng.Name
	e, release, err := o.Acquire(eng, cfg)
	if err != nil {
		return nil, err
	}
	return &Fleet{o: o, logger: o.Logger, operator: e, release: release}, nil
}

// Operator is the operator's sandbox.
func (f *Fleet) Operator() *Entry { return f.operator }

// Configured reports whether person is named by a person line.
func (f *Fleet) Configured(person string) bool { return f.person(person) != nil }

func (f *Fleet) person(name string) *Person {
	for i := range f.o.People {
		if f.o.People[i].Name == name {
			return &f.o.People[i]
		}
	}
	return nil
}

// People are the configured people's names, in configuration order.
func (f *Fleet) People() []string {
	out := make([]string, 0, len(f.o.People))
	for _, p := range f.o.People {
		out = append(out, p.Name)
	}
	return out
}

// Config is the configuration of person's sandbox ("" the operator's).
func (f *Fleet) Config(person string) (sandbox.Config, error) {
	if person == "" {
		return f.o.Base, nil
	}
	p := f.person(person)
	if p == nil {
		return f.o.Base, fmt.Errorf("no person %q is configured", person)
	}
	cfg, err := PersonConfig(f.o.Base, *p)
	f.mu.Lock()
	if v := f.volumes[person]; v != "" {
		cfg.Volume = v
	}
	f.mu.Unlock()
	return cfg, err
}

// configFor is Config, with the volume storage records for person read first.
func (f *Fleet) configFor(ctx context.Context, person string) (sandbox.Config, error) {
	cfg, err := f.Config(person)
	if err != nil || person == "" {
		return cfg, err
	}
	v, err := f.recordedVolume(ctx, person, cfg.Container)
	if v != "" {
		cfg.Volume = v
	}
	return cfg, err
}

// For returns the sandbox of person ("" is the operator's), placing it on an engine
// when it has none yet and starting it again when it was stopped for idleness. It
// counts as a use of the sandbox.
func (f *Fleet) For(ctx context.Context, person string) (*Entry, error) {
	e, err := f.Entry(ctx, person)
	if err != nil {
		return nil, err
	}
	e.Touch()
	if err := e.resume(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Entry finds the sandbox of person, placing it the first time, without counting a
// use or starting anything.
func (f *Fleet) Entry(ctx context.Context, person string) (*Entry, error) {
	if person == "" {
		return f.operator, nil
	}
	if e := f.placedNow(person); e != nil {
		return e, nil
	}
	// Placements run one at a time, without holding up the people already placed.
	f.placeMu.Lock()
	defer f.placeMu.Unlock()
	if e := f.placedNow(person); e != nil {
		return e, nil
	}
	cfg, err := f.configFor(ctx, person)
	if err != nil {
		return nil, err
	}
	if err := f.checkMaxSandboxes(ctx, cfg); err != nil {
		return nil, err
	}
	eng := Engine{}
	if len(f.o.Engines) > 0 {
		if eng, err = f.place(ctx, cfg.Container); err != nil {
			return nil, err
		}
	}
	cfg.Engine = eng.Name
	e, release, err := f.settle(ctx, person, &cfg, eng)
	if err != nil {
		return nil, err
	}
	if e == nil {
		if e, release, err = f.o.Acquire(eng, cfg); err != nil {
			return nil, err
		}
	}
	if f.o.Placed != nil {
		if err := f.o.Placed(e, person); err != nil {
			return nil, errors.Join(err, release())
		}
	}
	e.Start()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed { // a call that outlived this config: nothing would give the sandbox back
		return nil, errors.Join(sandbox.ErrClosed, release())
	}
	if f.placed == nil {
		f.placed = map[string]*Entry{}
	}
	f.placed[person] = e
	f.releases = append(f.releases, release)
	recentPlacements.Store(cfg.Container, time.Now())
	return e, nil
}

// placedNow is the sandbox of person if it is placed already.
func (f *Fleet) placedNow(person string) *Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.placed[person]
}

// Held returns person's sandbox if the fleet holds it already, without placing one or
// counting a use; nil if not.
func (f *Fleet) Held(person string) *Entry {
	if person == "" {
		return f.operator
	}
	return f.placedNow(person)
}

// Entries are the sandboxes the fleet holds: the operator's and the people's.
func (f *Fleet) Entries() []*Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []*Entry{f.operator}
	for _, e := range f.placed {
		if e != f.operator {
			out = append(out, e)
		}
	}
	return out
}

// Close ends the fleet's loops and gives back every sandbox it holds. No sandbox is
// placed after it.
func (f *Fleet) Close() error {
	f.stopBackground()
	f.bgMu.Lock()
	if f.undoRoom != nil {
		f.undoRoom()
		f.undoRoom = nil
	}
	f.bgMu.Unlock()
	f.mu.Lock()
	releases := f.releases
	f.placed, f.releases, f.closed = nil, nil, true
	f.mu.Unlock()
	var errs []error
	for _, r := range releases {
		errs = append(errs, r())
	}
	if f.release != nil {
		errs = append(errs, f.release())
		f.release = nil
	}
	return errors.Join(errs...)
}

// Start starts the loop that stops idle sandboxes (with IdleStop) and the stops of
// removed people's sandboxes. Close ends them. It returns at once.
func (f *Fleet) Start() {
	f.startIdleStops()
	f.startRemovedStops()
	if f.o.Warm != nil {
		f.bgMu.Lock()
		f.undoRoom = f.o.Warm.use(f.warmRoom, f.o.Storage)
		f.bgMu.Unlock()
		f.o.Warm.Start()
	}
}

// idleCheckEvery is how often idle sandboxes are looked for: a quarter of idle_stop,
// between 1s and a minute.
func idleCheckEvery(d time.Duration) time.Duration {
	return min(max(d/4, time.Second), time.Minute)
}

func (f *Fleet) startIdleStops() {
	if f.o.IdleStop <= 0 {
		return
	}
	d := f.o.IdleStop
	f.goBackground(func(ctx context.Context) {
		t := time.NewTicker(idleCheckEvery(d))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for _, e := range f.Entries() {
				f.publishUse(ctx, e)
				f.stopIdle(ctx, e, d)
			}
		}
	})
}

// goBackground runs fn in a goroutine of its own until Close cancels its context.
func (f *Fleet) goBackground(fn func(ctx context.Context)) {
	f.bgMu.Lock()
	defer f.bgMu.Unlock()
	if f.bgCancel == nil {
		f.bgCtx, f.bgCancel = context.WithCancel(context.Background())
	}
	f.bg.Add(1)
	ctx := f.bgCtx
	go func() {
		defer f.bg.Done()
		defer func() {
			if v := recover(); v != nil {
				f.logger.Error("panic in a sandbox loop", zap.Any("panic", v))
			}
		}()
		fn(ctx)
	}()
}

func (f *Fleet) stopIdle(ctx context.Context, e *Entry, d time.Duration) {
	defer func() {
		if v := recover(); v != nil {
			f.logger.Error("panic while stopping an idle sandbox", zap.Any("panic", v))
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if e.IdleFor() >= d && !e.IdleStopped() {
		// Used through another instance meanwhile: that counts. (A sandbox this
		// process stopped is not looked up again at every check.)
		if at := f.sharedUse(sctx, e.sb.Config().Container); !at.IsZero() {
			e.usedAt(at)
		}
	}
	stopped, err := e.stopIfIdle(sctx, d)
	switch {
	case err != nil && ctx.Err() == nil:
		f.logger.Warn("checking an idle sandbox", zap.String("container", e.sb.Config().Container), zap.Error(err))
	case stopped:
		if f.o.IdleStopped != nil {
			f.o.IdleStopped()
		}
		f.logger.Info("stopped an idle sandbox; /sandbox is kept, the next call starts it again",
			zap.String("container", e.sb.Config().Container), zap.String("engine", e.engine.Name), zap.Duration("idle_stop", d))
	}
}

// stopBackground ends the loops goBackground started and waits for them.
func (f *Fleet) stopBackground() {
	f.bgMu.Lock()
	cancel := f.bgCancel
	if cancel == nil { // never started: none may start later
		f.bgCtx, f.bgCancel = context.WithCancel(context.Background())
		cancel = f.bgCancel
	}
	f.bgMu.Unlock()
	cancel()
	f.bg.Wait()
}

// forget drops the placement record of a deleted sandbox container.
func (f *Fleet) forget(ctx context.Context, name string) {
	recentPlacements.Delete(name)
	if f.o.Storage == nil {
		return
	}
	if err := f.o.Storage.Delete(ctx, PlacementPrefix+name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		f.logger.Warn("forgetting the placement of a deleted sandbox", zap.String("container", name), zap.Error(err))
	}
}
