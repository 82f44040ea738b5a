package mcpsandbox

import (
	"context"
	"errors"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// This file shows the fleet's checkpoints (internal/fleet, sandbox/checkpoint.go) to the
// tools and the console.

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
	list, err := b.h.fleet.CheckpointsOf(ctx, b.e)
	return list, b.e.EngineError(err)
}

func (b toolBox) RestoreCheckpoint(ctx context.Context, id string) error {
	defer b.e.Begin()()
	_, err := b.Restore(ctx, id)
	return b.e.EngineError(err)
}

// consoleCheckpoints is every sandbox's checkpoints, on every engine, for the console.
type consoleCheckpoints struct{ f *fleet.Fleet }

func (c consoleCheckpoints) Checkpoints(ctx context.Context) ([]console.Checkpoint, error) {
	all, err := c.f.Checkpoints(ctx)
	out := make([]console.Checkpoint, 0, len(all))
	for _, ck := range all {
		out = append(out, console.Checkpoint{ID: ck.ID, Name: ck.Name, Person: ck.Person, SizeBytes: ck.SizeBytes,
			CreatedAt: ck.CreatedAt, Engine: ck.Engine})
	}
	return out, err
}

func (c consoleCheckpoints) DeleteCheckpoint(ctx context.Context, id string) error {
	return consoleError(c.f.DeleteCheckpoint(ctx, id))
}

func (c consoleCheckpoints) RestoreCheckpoint(ctx context.Context, id string) error {
	return consoleError(c.f.RestoreCheckpoint(ctx, id))
}

func (c consoleCheckpoints) CopyCheckpoint(ctx context.Context, id, to string, replace bool) error {
	return consoleError(c.f.SeedCheckpoint(ctx, id, to, replace))
}

// consoleError is err as the console knows it: the fleet's not-found and conflict are
// the console's, with the same text.
func consoleError(err error) error {
	switch {
	case errors.Is(err, fleet.ErrNotFound):
		return kindError{err, console.ErrNotFound}
	case errors.Is(err, fleet.ErrConflict):
		return kindError{err, console.ErrConflict}
	}
	return err
}

// kindError is err, which also is kind.
type kindError struct{ err, kind error }

func (e kindError) Error() string   { return e.err.Error() }
func (e kindError) Unwrap() []error { return []error{e.err, e.kind} }
