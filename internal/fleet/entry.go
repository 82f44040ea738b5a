package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/facts"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Entry is one sandbox with its Docker client, activity, cleanup loop and image
// build, pooled by the caller so that configurations that use the same container share
// it: everything that runs for the sandbox ends in Destruct.
type Entry struct {
	sb      *sandbox.Sandbox
	cli     sandbox.API
	engine  Engine // the engine the container is on (no name: the default engine)
	logger  *zap.Logger
	facts   facts.Cache // what is installed in the container, detected once
	sidecar Sidecar
	cleaned func(paths []string)

	idle idleState // activity and idle stops
	// published is the last use recorded in storage for other instances (Unix
	// nanoseconds; shareduse.go).
	published atomic.Int64

	once   sync.Once
	cancel context.CancelFunc
	done   chan struct{}

	buildMu     sync.Mutex
	build       *imageBuild // the latest build of the image, if one was needed
	buildCtx    context.Context
	buildCancel context.CancelFunc
	builds      sync.WaitGroup
}

// Sidecar is what runs beside a sandbox for as long as its entry lives (the egress
// gateway): Start starts it with the entry's loops, Close ends it in Destruct, before
// the sandbox's agent is closed.
type Sidecar interface {
	Start()
	Close()
}

// EntryOptions are what an Entry is made of.
type EntryOptions struct {
	Sandbox *sandbox.Sandbox
	Client  sandbox.API // closed by Destruct
	Engine  Engine
	Logger  *zap.Logger
	// Sidecar, when not nil, is started and ended with the entry's loops.
	Sidecar Sidecar
	// Cleaned is told the paths each pass of the idle-file cleanup deleted.
	Cleaned func(paths []string)
}

// NewEntry makes the entry of a sandbox. It does no I/O and starts nothing.
func NewEntry(o EntryOptions) *Entry {
	ctx, cancel := context.WithCancel(context.Background())
	logger := o.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	e := &Entry{sb: o.Sandbox, cli: o.Client, engine: o.Engine, logger: logger, sidecar: o.Sidecar, cleaned: o.Cleaned,
		buildCtx: ctx, buildCancel: cancel}
	e.Touch()
	return e
}

// Sandbox is the entry's sandbox.
func (e *Entry) Sandbox() *sandbox.Sandbox { return e.sb }

// Client is the client of the engine the sandbox is on.
func (e *Entry) Client() sandbox.API { return e.cli }

// Engine is the engine the sandbox is on; no name: the default engine.
func (e *Entry) Engine() Engine { return e.engine }

// Facts is what is installed in the sandbox, detected once for every configuration.
func (e *Entry) Facts() *facts.Cache { return &e.facts }

// Sidecar is what runs beside the sandbox, nil when nothing.
func (e *Entry) Sidecar() Sidecar { return e.sidecar }

// Start starts the idle-file cleanup loop and the sidecar, once; Destruct ends them.
func (e *Entry) Start() {
	e.once.Do(func() {
		if e.sidecar != nil {
			e.sidecar.Start()
		}
		ctx, cancel := context.WithCancel(context.Background())
		e.cancel = cancel
		e.done = make(chan struct{})
		go func() {
			defer close(e.done)
			// The sandbox logs each pass; here it is only counted.
			e.sb.RunCleanup(ctx, func(paths []string) {
				if e.cleaned != nil {
					e.cleaned(paths)
				}
			})
		}()
	})
}

// Destruct stops the cleanup loop, any image build and the sidecar, and closes the
// Docker client, when the last configuration lets go. It leaves the container running,
// and from then on nothing still holding the entry (a call or task under way, a
// background loop) creates or starts it again.
func (e *Entry) Destruct() error {
	e.sb.Close()
	e.once.Do(func() {}) // a loop can no longer start
	if e.cancel != nil {
		e.cancel()
		<-e.done
	}
	e.buildMu.Lock()
	e.buildCancel() // a build can no longer start
	e.buildMu.Unlock()
	e.builds.Wait()
	if e.sidecar != nil {
		e.sidecar.Close()
	}
	e.sb.CloseTransfers()
	e.sb.CloseAgent()
	return e.cli.Close()
}

// idleState is a sandbox's activity: when it was last used, the calls under way, and
// whether this process stopped it for idleness.
type idleState struct {
	last atomic.Int64 // Unix nanoseconds of the last use
	busy atomic.Int32 // commands under way (execute, job_output)

	mu      sync.Mutex  // held while the container is stopped or started again
	stopped atomic.Bool // by this process, for idleness (set under mu)
}

// Touch records a use of the sandbox: a tool call, a preview request, an upload or a
// download.
func (e *Entry) Touch() { e.idle.last.Store(time.Now().UnixNano()) }

// LastUse is when the sandbox was last used.
func (e *Entry) LastUse() time.Time { return time.Unix(0, e.idle.last.Load()) }

// usedAt counts a use at t (another instance's), when it is newer than the last.
func (e *Entry) usedAt(t time.Time) {
	n := t.UnixNano()
	for {
		old := e.idle.last.Load()
		if n <= old || e.idle.last.CompareAndSwap(old, n) {
			return
		}
	}
}

// activity is the last use, now while a command is under way.
func (e *Entry) activity() time.Time {
	if e.idle.busy.Load() > 0 {
		return time.Now()
	}
	return e.LastUse()
}

// IdleFor is how long the sandbox has not been used; 0 while a command runs.
func (e *Entry) IdleFor() time.Duration {
	if e.idle.busy.Load() > 0 {
		return 0
	}
	return time.Since(e.LastUse())
}

// Begin counts a command under way until the returned function is called.
func (e *Entry) Begin() func() {
	e.Touch()
	e.idle.busy.Add(1)
	return func() { e.Touch(); e.idle.busy.Add(-1) }
}

// IdleStopped reports whether this process stopped the container for idleness (the
// next call starts it again).
func (e *Entry) IdleStopped() bool { return e.idle.stopped.Load() }

// listenAwait bounds how long a command waits for a listener in a container that
// was just started.
const listenAwait = 10 * time.Second

// AwaitListener makes sure, before a command runs, that the container runs and the
// agent listens on port in it (the egress proxy's): the listener never starts the
// container itself, it follows the start a call makes. It gives up after 10 s, or at
// once when the agent cannot run (the sandbox then says so).
func (e *Entry) AwaitListener(ctx context.Context, port int) {
	if e.sb.Config().NoAgent {
		return
	}
	// Ensure first: starting a container found stopped drops the agent channel of
	// before, so that its listener is not taken for the new one's.
	if err := e.sb.Ensure(ctx); err != nil {
		return // the command meets it and says it
	}
	if e.sb.Listening(port) {
		return
	}
	if running, err := e.sb.Running(ctx); err != nil || !running {
		return // stopped behind our back: the command's own Ensure starts it
	}
	ctx, cancel := context.WithTimeout(ctx, listenAwait)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !e.sb.Listening(port) {
		if running, why := e.sb.AgentStatus(); !running && why != "" {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// resume starts the container again if it was stopped for idleness.
func (e *Entry) resume(ctx context.Context) error {
	e.idle.mu.Lock()
	defer e.idle.mu.Unlock()
	if !e.idle.stopped.Load() {
		return nil
	}
	begin := time.Now()
	if err := e.sb.Start(ctx); err != nil {
		return e.engineError(err)
	}
	e.idle.stopped.Store(false)
	e.logger.Info("started an idle-stopped sandbox again", zap.String("container", e.sb.Config().Container),
		zap.String("engine", e.engine.Name), zap.Duration("took", time.Since(begin)))
	return nil
}

// stopIfIdle stops the container when it has been idle for d and no job wrote output
// in that time. It reports whether it stopped it.
func (e *Entry) stopIfIdle(ctx context.Context, d time.Duration) (bool, error) {
	if e.IdleFor() < d {
		return false, nil
	}
	e.idle.mu.Lock()
	defer e.idle.mu.Unlock()
	if e.idle.stopped.Load() {
		return false, nil
	}
	// Stopped already (by the operator, or before this process): nothing to stop.
	if running, err := e.sb.Running(ctx); err != nil || !running {
		return false, err
	}
	busy, err := e.sb.JobOutputSince(ctx, time.Now().Add(-d))
	if err != nil {
		return false, err
	}
	if busy {
		e.Touch()
		return false, nil
	}
	if e.IdleFor() < d { // used while job output was looked for
		return false, nil
	}
	if err := e.sb.Stop(ctx, "idle_stop"); err != nil {
		return false, err
	}
	e.idle.stopped.Store(true)
	return true, nil
}

// engineError says which engine did not answer, when that is what err means.
func (e *Entry) engineError(err error) error {
	if !sandbox.EngineDown(err) {
		return err
	}
	name := e.engine.Name
	if name == "" {
		name = e.engine.Host
	}
	return fmt.Errorf("its Docker engine %s does not answer (the operator must bring it back; try again later): %w", name, err)
}
