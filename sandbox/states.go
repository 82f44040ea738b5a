package sandbox

import (
	"context"
	"fmt"
)

// States gives the state (running, exited, created, ...) of the named containers an
// engine holds; a name it does not hold is absent from the map.
func States(ctx context.Context, cli API, names []string) (map[string]string, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	list, err := cli.ListBoxes(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	out := make(map[string]string, len(names))
	for _, c := range list {
		if want[c.Name] {
			out[c.Name] = c.Status
		}
	}
	return out, nil
}
