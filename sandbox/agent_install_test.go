package sandbox

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// archClient answers the two inspections installAgent makes, for containers of an
// image of architecture arch; it counts the image inspections.
type archClient struct {
	API
	id, arch      string
	imageInspects int
}

func (c *archClient) InspectBox(ctx context.Context, name string) (boxapi.Box, error) {
	return boxapi.Box{ID: c.id, ImageID: "sha256:img"}, nil
}

func (c *archClient) InspectImage(ctx context.Context, id string) (boxapi.Image, error) {
	c.imageInspects++
	return boxapi.Image{Architecture: c.arch}, nil
}

// TestInstallAgentArchitecture: an image of an architecture without an agent gets an
// error that names it; the image is inspected once per container, again for a new one.
func TestInstallAgentArchitecture(t *testing.T) {
	cli := &archClient{id: "c1", arch: "riscv64"}
	sb, err := New(cli, testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := sb.link.installAgent(context.Background(), false)
		if err == nil || !strings.Contains(err.Error(), `architecture "riscv64" (only amd64, arm64)`) {
			t.Fatalf("installAgent on riscv64: %v", err)
		}
	}
	cli.id = "c2"
	sb.link.installAgent(context.Background(), false)
	if cli.imageInspects != 2 {
		t.Errorf("%d image inspections for two containers, want 2", cli.imageInspects)
	}
}

// TestInstallAgent: the agent lands in agentDir under a name with its hash, runs, and
// leaves the modes and owners of the image's /var and /var/lib alone; installing again
// gives the same path, still runnable.
func TestInstallAgent(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := sb.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	const stat = "stat -c '%n %a %u:%g' /var /var/lib"
	before := mustExec(t, sb, "chmod 0751 /var/lib && chown 1:2 /var && "+stat, boxapi.ExecOptions{}).Stdout
	var first string
	for i := range 2 {
		start := time.Now()
		p, err := sb.link.installAgent(ctx, false)
		if err != nil {
			t.Fatalf("installAgent: %v", err)
		}
		t.Logf("install %d took %v", i+1, time.Since(start).Round(time.Millisecond))
		if !regexp.MustCompile(`^` + regexp.QuoteMeta(agentDir) + `/sandbox-agent-[0-9a-f]{12}$`).MatchString(p) {
			t.Fatalf("installAgent put the agent at %q", p)
		}
		if first != "" && p != first {
			t.Fatalf("second install at %q, first at %q", p, first)
		}
		first = p
		if res := mustExec(t, sb, p+" version", boxapi.ExecOptions{}); res.ExitCode != 0 || res.Stdout != fmt.Sprintf("%d\n", agentwire.Version) {
			t.Fatalf("%s version: %+v", p, res)
		}
	}
	if after := mustExec(t, sb, stat, boxapi.ExecOptions{}).Stdout; after != before {
		t.Errorf("installAgent changed the image's directories:\nbefore %safter  %s", before, after)
	}
	want := path.Dir(agentDir) + " 755 0:0\n" + agentDir + " 755 0:0\n" + first + " 755 0:0\n"
	if got := mustExec(t, sb, "stat -c '%n %a %u:%g' "+path.Dir(agentDir)+" "+agentDir+" "+first, boxapi.ExecOptions{}).Stdout; got != want {
		t.Errorf("installed files:\n%swant\n%s", got, want)
	}
}

// TestInstallAgentReadOnly: a container whose root filesystem is read-only gets an
// error that says so.
func TestInstallAgentReadOnly(t *testing.T) {
	name := noexecContainer(t)
	cfg := testConfig(t)
	cfg.Container = name
	sb, err := New(dockerClient(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sb.link.installAgent(context.Background(), false)
	if err == nil || !strings.Contains(err.Error(), "the container's root filesystem is read-only") {
		t.Fatalf("installAgent on a read-only container: %v", err)
	}
	t.Log(err)
}
