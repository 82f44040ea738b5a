package mcpsandbox

import (
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestSandboxConfigFor: the operator's sandbox keeps today's names and the site's
// limits; a person's is named after them and takes their own limits, the site's where
// they give none.
func TestSandboxConfigFor(t *testing.T) {
	h := &Handler{
		Container: "box", Volume: "data", Memory: "3g", CPUs: 2, PidsLimit: 1000,
		People: []Person{{Name: "alice", Key: "k"}, {Name: "bob", Key: "k2", Memory: "1g", CPUs: 0.5, PidsLimit: 100}},
	}
	op, err := h.sandboxConfigFor("")
	if err != nil || op.Container != "box" || op.Volume != "data" || op.CPUs != 2 {
		t.Fatalf("operator: %+v %v", op, err)
	}
	alice, err := h.sandboxConfigFor("alice")
	if err != nil || alice.Container != "box-alice" || alice.Volume != "data-alice" || alice.Memory != op.Memory || alice.CPUs != 2 || alice.PidsLimit != 1000 {
		t.Fatalf("alice: %+v %v", alice, err)
	}
	bob, err := h.sandboxConfigFor("bob")
	gb, _ := sandbox.ParseMemory("1g")
	if err != nil || bob.Container != "box-bob" || bob.Memory != gb || bob.CPUs != 0.5 || bob.PidsLimit != 100 {
		t.Fatalf("bob: %+v %v", bob, err)
	}
	if _, err := h.sandboxConfigFor("carol"); err == nil {
		t.Fatal("a person who is not configured has a sandbox")
	}
}

// TestMaxSandboxes: people get sandboxes of their own until max_sandboxes of them
// exist; the next new person is told the setting, while those who have one keep it.
func TestMaxSandboxes(t *testing.T) {
	app := &App{logger: zap.NewNop(), entries: map[string]*sandboxEntry{}, byName: map[string]sandbox.Config{}}
	h := &Handler{
		app: app, Container: "max-sandboxes-test", MaxSandboxes: 1,
		People: []Person{{Name: "alice", Key: "k"}, {Name: "bob", Key: "k2"}},
	}
	t.Cleanup(func() { _ = h.releaseFleet() })
	a, err := h.sandboxFor(t.Context(), "alice")
	if err != nil || a.sb.Config().Container != "max-sandboxes-test-alice" {
		t.Fatalf("alice: %v", err)
	}
	if _, err := h.sandboxFor(t.Context(), "bob"); err == nil || !strings.Contains(err.Error(), "max_sandboxes") {
		t.Fatalf("bob beyond max_sandboxes: %v", err)
	}
	if again, err := h.sandboxFor(t.Context(), "alice"); err != nil || again != a {
		t.Fatalf("alice again: %v", err)
	}
}
