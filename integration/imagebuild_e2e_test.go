package integration

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestCustomImageMissing: an image name that is not ours is never built from our
// recipe; the error says what the operator must do.
func TestCustomImageMissing(t *testing.T) {
	s := testsite.Start(t, testsite.Options{Image: "example.invalid/someone-elses-image:1"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := testsite.Call(ctx, t, s.Client(ctx), "execute", map[string]any{"command": "true"})
	if !res.IsError || !strings.Contains(testsite.ResultText(res), "does not exist on the server's Docker engine") {
		t.Fatalf("custom image missing: %q", testsite.ResultText(res))
	}
}

// TestMakeRunBuildsMissingImage: `make run` (scripts/run-local.sh) on a machine without
// the image builds it with its progress on the terminal, then serves. A small local
// recipe stands in for containers/Dockerfile.unified, whose base image needs a registry.
func TestMakeRunBuildsMissingImage(t *testing.T) {
	cli := testengine.DockerClient(t)
	tag := "mcp-sandbox-runlocal-" + testenv.RandomHex(4) + ":latest"
	name := "mcp-sandbox-test-" + testenv.RandomHex(4)
	port := testsite.FreePort(t)
	key := "run-local-key-" + testenv.RandomHex(16)
	recipe := filepath.Join(t.TempDir(), "Dockerfile")
	if err := os.WriteFile(recipe, []byte("FROM "+testengine.Image()+"\nRUN echo made-by-make-run > /built.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true})
		_ = cli.VolumeRemove(ctx, name+"-data", true)
		_, _ = cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})

	cmd := exec.Command("../scripts/run-local.sh")
	cmd.Env = append(os.Environ(), "SANDBOX_IMAGE="+tag, "SANDBOX_DOCKERFILE="+recipe,
		"SANDBOX_PORT="+strconv.Itoa(port), "SANDBOX_CONTAINER="+name, "SANDBOX_VOLUME="+name+"-data", "SANDBOX_NETWORK=none",
		"SANDBOX_API_KEY="+key)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out lockedOutput
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		<-exited
	})

	base := "http://localhost:" + strconv.Itoa(port)
	testenv.WaitFor(t, 5*time.Minute, "make run to serve", func() bool {
		select {
		case <-exited:
			t.Fatalf("make run stopped before serving:\n%s", out.String())
		default:
		}
		resp, err := http.Get(base + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	log := out.String()
	for _, want := range []string{"is missing; building it from " + recipe, "Step 1/2 : FROM " + testengine.Image(), "Step 2/2 : RUN echo made-by-make-run", "run: built " + tag} {
		if !strings.Contains(log, want) {
			t.Errorf("make run did not show %q:\n%s", want, log)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := mcpWithToken(ctx, t, base, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "cat /built.txt"}))["stdout"]; got != "made-by-make-run\n" {
		t.Fatalf("execute in the sandbox make run started: %q", got)
	}
}

// lockedOutput collects a process's output while the test reads it.
type lockedOutput struct {
	mu sync.Mutex
	b  strings.Builder
}

func (o *lockedOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *lockedOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}
