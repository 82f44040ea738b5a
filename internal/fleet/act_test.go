package fleet

import (
	"errors"
	"runtime"
	"testing"

	"github.com/docker/docker/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestEntryCPUs: until the engine has been asked, a local engine's CPU count is this
// machine's, and a remote engine's is unknown, so cpus is stated as set.
func TestEntryCPUs(t *testing.T) {
	dc, err := client.NewClientWithOpts(client.WithHost("tcp://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	cli := sandbox.Docker(dc)
	cfg := sandbox.DefaultConfig()
	cfg.CPUs = 1000
	sb, err := sandbox.New(cli, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]float64{
		"unix:///var/run/docker.sock": float64(runtime.NumCPU()),
		"tcp://10.0.0.7:2376":         1000,
	} {
		if got := NewEntry(EntryOptions{Sandbox: sb, Engine: Engine{Host: host}}).CPUs(); got != want {
			t.Errorf("engine %s: CPUs() = %v, want %v", host, got, want)
		}
	}
}

// TestActRefuses: deleting a configured person's sandbox is a conflict, acting on a
// person the fleet never had is not found, and neither asks an engine (none answers).
func TestActRefuses(t *testing.T) {
	f, err := New(Options{Base: testBase("act-test"), Acquire: newPool(t).acquire, People: []Person{{Name: "alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	for _, a := range []string{ActDelete, ActDeleteVolume} {
		if err := f.Act(t.Context(), "alice", a); !errors.Is(err, ErrConflict) {
			t.Errorf("%s alice: %v, want ErrConflict", a, err)
		}
	}
	if f.Held("alice") != nil {
		t.Error("refusing placed alice's sandbox")
	}
}
