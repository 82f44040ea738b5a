package fleet

import (
	"context"

	"github.com/docker/docker/client"
)

// What checkpoints (sandbox/checkpoint.go) need of the fleet: the engines they may
// live on, a client of each, and a loop for sweeping those of removed people.

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
func (f *Fleet) EngineClient(name string) (*client.Client, func(), error) {
	for _, e := range f.o.Engines {
		if e.Name == name {
			return f.engineClient(e)
		}
	}
	return f.engineClient(Engine{})
}

// GoBackground runs fn in a goroutine of its own until Close cancels its context.
func (f *Fleet) GoBackground(fn func(ctx context.Context)) { f.goBackground(fn) }

// EngineError says which engine did not answer, when that is what err means.
func (e *Entry) EngineError(err error) error {
	if err == nil {
		return nil
	}
	return e.engineError(err)
}
