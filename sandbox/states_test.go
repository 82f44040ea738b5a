package sandbox

import (
	"context"
	"testing"
	"time"
)

// TestStates: the engine's state of each named container, running or exited, by its
// exact name; a name it does not hold (or only a prefix of one) is absent.
func TestStates(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	cli := dockerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	running, stopped := testConfig(t), testConfig(t)
	running.NoAgent, stopped.NoAgent = true, true
	stopped.Container += "-stopped"
	stopped.Volume += "-stopped"
	a, b := newTestSandbox(t, cli, running), newTestSandbox(t, cli, stopped)
	for _, sb := range []*Sandbox{a, b} {
		if err := sb.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	prefix := running.Container[:len(running.Container)-2]
	got, err := States(ctx, cli, []string{running.Container, stopped.Container, prefix, running.Container + "-none"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{running.Container: "running", stopped.Container: "exited"}
	if len(got) != len(want) || got[running.Container] != "running" || got[stopped.Container] != "exited" {
		t.Fatalf("States = %v, want %v", got, want)
	}
}
