package sandbox

import (
	"context"
	"fmt"
	"strings"

	"github.com/docker/docker/api/types/container"
)

// States gives the state (running, exited, created, ...) of the named containers an
// engine holds; a name it does not hold is absent from the map.
func States(ctx context.Context, cli API, names []string) (map[string]string, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	// Filtered here, not by the engine: a filter makes the client read its API
	// version unlocked, which races with a negotiation under way on a shared client.
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	out := make(map[string]string, len(names))
	for _, c := range list {
		for _, n := range c.Names {
			if n = strings.TrimPrefix(n, "/"); want[n] {
				out[n] = string(c.State)
			}
		}
	}
	return out, nil
}
