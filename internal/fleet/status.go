package fleet

import (
	"context"
	"errors"
	"sync"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Status is what the operator is shown of one sandbox.
type Status struct {
	sandbox.Status // State "unknown" and DiskUsed -1 when not read
	Person         string
	Engine         string // its engine line's name, once placed
	Jobs           int    // running
	// Removed marks the sandbox of a person the configuration no longer names.
	Removed bool
	Err     error // why the status is not complete
}

// statusParallel bounds the sandboxes whose status is read at once: each takes a CPU
// sample of about a second.
const statusParallel = 8

// Statuses are the status of the operator's sandbox, the people's, and then those of
// people the configuration no longer names that still exist. Nothing is started.
func (f *Fleet) Statuses(ctx context.Context) []Status {
	people := append([]string{""}, f.People()...)
	removed := f.Removed(ctx)
	out := make([]Status, len(people)+len(removed))
	slots := make(chan struct{}, statusParallel)
	var wg sync.WaitGroup
	fill := func(i int, status func() Status) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			out[i] = status()
		}()
	}
	for i, p := range people {
		fill(i, func() Status { return f.status(ctx, p) })
	}
	for i, x := range removed {
		fill(len(people)+i, func() Status { return f.removedStatus(ctx, x) })
	}
	wg.Wait()
	return out
}

// removedStatus reads the status of a removed person's sandbox.
func (f *Fleet) removedStatus(ctx context.Context, x Existing) Status {
	s := Status{Person: x.Person, Engine: x.Engine.Name, Removed: true}
	s.Container, s.State, s.DiskUsed = x.Name, x.State, -1
	sb, done, err := f.removedView(x)
	if err != nil {
		s.Err = err
		return s
	}
	defer done()
	st, err := sb.Status(ctx)
	s.State, s.CPU, s.Node, s.Runtime = st.State, st.CPU, st.Node, st.Runtime
	s.Memory, s.MemoryLimit, s.DiskUsed, s.NoUsage = st.Memory, st.MemoryLimit, st.DiskUsed, st.NoUsage
	s.Err = err
	return s
}

// Observe returns person's sandbox to look at: the one held, or, for a person whose
// sandbox this fleet has not used, one made only to be looked at (Status and Stop
// never start anything), on the operator's engine.
func (f *Fleet) Observe(person string) (*sandbox.Sandbox, error) {
	if e := f.Held(person); e != nil {
		return e.sb, nil
	}
	cfg, err := f.Config(person)
	if err != nil {
		return nil, err
	}
	return sandbox.New(f.operator.cli, cfg, f.logger.Named("sandbox"))
}

// status reads the status of person's sandbox. The jobs of a running one are counted
// through the pooled sandbox, which then counts as held (it exists).
func (f *Fleet) status(ctx context.Context, person string) Status {
	s := Status{Person: person}
	s.State, s.DiskUsed = "unknown", -1
	if e := f.Held(person); e != nil {
		s.Engine = e.engine.Name
	} else if eng, ok := Kubernetes(f.o.Engines); ok {
		s.Engine = eng.Name // placed by the cluster, never by us
	}
	if _, err := f.configFor(ctx, person); err != nil { // its recorded volume, for Observe
		s.Err = err
		return s
	}
	sb, err := f.Observe(person)
	if err != nil {
		s.Err = err
		return s
	}
	st, err := sb.Status(ctx)
	s.Container, s.State, s.CPU, s.Node, s.Runtime = st.Container, st.State, st.CPU, st.Node, st.Runtime
	s.Memory, s.MemoryLimit, s.DiskUsed, s.NoUsage = st.Memory, st.MemoryLimit, st.DiskUsed, st.NoUsage
	if err != nil {
		s.Err = err
		return s
	}
	if st.State == "running" {
		// Placed, not used: looking from the console keeps no sandbox from idling.
		e, err := f.Entry(ctx, person)
		if err == nil {
			var jobs []boxapi.JobInfo
			jobs, err = e.sb.RunningJobs(ctx)
			s.Jobs = len(jobs)
		}
		s.Err = err
	}
	return s
}

// ErrNotConfigured is Running's answer for a person no person line names.
var ErrNotConfigured = errors.New("no such person is configured")

// Running is person's sandbox when its container runs, nil when it does not: the one
// the fleet holds, or, for a person whose sandbox it has not used yet, the pooled one
// once a look at the container (which starts nothing) finds it running.
func (f *Fleet) Running(ctx context.Context, person string) (*sandbox.Sandbox, error) {
	if person != "" && !f.Configured(person) {
		return nil, ErrNotConfigured
	}
	if e := f.Held(person); e != nil {
		return e.sb, nil
	}
	sb, err := f.Observe(person)
	if err != nil {
		return nil, err
	}
	if running, err := sb.Running(ctx); err != nil || !running {
		return nil, err
	}
	e, err := f.Entry(ctx, person)
	if err != nil {
		return nil, err
	}
	return e.sb, nil
}
