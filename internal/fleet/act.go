package fleet

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// What the operator does to a sandbox of the fleet (Act).
const (
	ActStart        = "start"
	ActStop         = "stop"
	ActRestart      = "restart"
	ActRecreate     = "recreate"
	ActDelete       = "delete"        // a removed person's sandbox only
	ActDeleteVolume = "delete_volume" // the same, with its volume
)

// Act does action to person's sandbox ("" the operator's). Stop never starts a
// container; delete is for the sandbox of a person no longer configured, which can
// only be stopped or deleted. An unknown action or person is ErrNotFound.
func (f *Fleet) Act(ctx context.Context, person, action string) error {
	if person != "" && !f.Configured(person) {
		return f.actRemoved(ctx, person, action)
	}
	switch action {
	case ActStop:
		sb, err := f.Observe(person)
		if err != nil {
			return err
		}
		return sb.Stop(ctx, "operator")
	case ActDelete, ActDeleteVolume:
		return fmt.Errorf("%w: only the sandbox of a person no longer configured is deleted here; Recreate replaces a configured person's container and keeps /sandbox", ErrConflict)
	}
	e, err := f.For(ctx, person)
	if err != nil {
		return err
	}
	switch action {
	case ActStart:
		return e.Sandbox().Ensure(ctx)
	case ActRestart:
		return e.Sandbox().Restart(ctx)
	case ActRecreate:
		return e.Sandbox().Recreate(ctx)
	}
	return ErrNotFound
}

// actRemoved stops or deletes the sandbox of a person the configuration no longer
// names; nothing else is done to it, so that it cannot run again unnoticed.
func (f *Fleet) actRemoved(ctx context.Context, person, action string) error {
	var err error
	switch action {
	case ActStop:
		var sb *sandbox.Sandbox
		var done func()
		if sb, done, err = f.RemovedSandbox(ctx, person); err == nil {
			defer done()
			err = sb.Stop(ctx, "operator")
		}
	case ActDelete, ActDeleteVolume:
		err = f.DeleteRemoved(ctx, person, action == ActDeleteVolume)
	default:
		var done func()
		if _, done, err = f.RemovedSandbox(ctx, person); err == nil {
			done()
			err = fmt.Errorf("%w: %s is no longer configured: add their person line back to start their sandbox, or delete it", ErrConflict, person)
		}
	}
	if errors.Is(err, ErrNoRemoved) {
		return ErrNotFound
	}
	return err
}

// CPUs is the CPUs e's sandbox gets: the smaller of its cpus and the engine's CPU
// count (docker info's NCPU, asked when the container is ensured). Until the engine has
// been asked, a local engine's count is taken to be this machine's (runtime.NumCPU).
func (e *Entry) CPUs() float64 {
	n, known := e.Sandbox().CPUs()
	if !known && localEngine(e.Engine().Host) {
		n = min(n, float64(runtime.NumCPU()))
	}
	return n
}

// localEngine reports whether a Docker host address is on this machine.
func localEngine(host string) bool {
	return strings.HasPrefix(host, "unix://") || strings.HasPrefix(host, "npipe://")
}
