package mcpsandbox

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
)

// TestConsoleError: the fleet's not-found and conflict reach the console as its own,
// with the fleet's text unchanged; other errors pass as they are.
func TestConsoleError(t *testing.T) {
	for _, c := range []struct {
		err, want error
	}{
		{fmt.Errorf("%w: no checkpoint x", fleet.ErrNotFound), console.ErrNotFound},
		{fmt.Errorf("%w: bob's sandbox exists already", fleet.ErrConflict), console.ErrConflict},
	} {
		got := consoleError(c.err)
		if !errors.Is(got, c.want) || !errors.Is(got, c.err) || got.Error() != c.err.Error() {
			t.Errorf("consoleError(%v) = %v, want it to be %v with the same text", c.err, got, c.want)
		}
	}
	other := errors.New("engine down")
	if got := consoleError(other); got != other {
		t.Errorf("consoleError(other) = %v", got)
	}
	if fleet.ErrNotFound.Error() != console.ErrNotFound.Error() || fleet.ErrConflict.Error() != console.ErrConflict.Error() {
		t.Error("the fleet's errors read differently from the console's")
	}
}

// TestFleetActionsAreTheConsoles: the console hands its action names to the fleet as
// they are.
func TestFleetActionsAreTheConsoles(t *testing.T) {
	if fleet.ActDelete != console.ActDelete || fleet.ActDeleteVolume != console.ActDeleteVolume {
		t.Errorf("delete actions: fleet %q %q, console %q %q", fleet.ActDelete, fleet.ActDeleteVolume, console.ActDelete, console.ActDeleteVolume)
	}
}
