package mcpsandbox

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

	"github.com/caddyserver/caddy/v2"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
)

// withRecipe makes tag buildable from dockerfile for one test.
func withRecipe(t *testing.T, s *site, tag, dockerfile string) {
	saved := unifiedDockerfile
	unifiedDockerfile = []byte(dockerfile)
	autoBuildImages[tag] = true
	t.Cleanup(func() {
		unifiedDockerfile = saved
		delete(autoBuildImages, tag)
		_, _ = s.docker.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})
}

// TestMissingImageIsBuilt: with the image missing, tool calls answer at once that it
// is being built, then work once the background build is done.
func TestMissingImageIsBuilt(t *testing.T) {
	tag := "mcp-sandbox-autobuild-" + randomHex(4) + ":latest"
	s := startSite(t, siteOptions{image: tag})
	withRecipe(t, s, tag, "FROM "+testImage()+"\nRUN echo built-here > /built.txt\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.client(ctx)

	start := time.Now()
	res := call(ctx, t, c, "execute", map[string]any{"command": "cat /built.txt"})
	if !res.IsError || !strings.Contains(resultText(res), "is being built") {
		t.Fatalf("first call with the image missing: %v %q", res.IsError, resultText(res))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the first call waited %v for the build", d)
	}
	waitFor(t, 90*time.Second, "the image build", func() bool {
		r := call(ctx, t, c, "execute", map[string]any{"command": "cat /built.txt"})
		return !r.IsError && structured(t, r)["stdout"] == "built-here\n"
	})
}

// TestFailedImageBuild: a build that fails says why and how to build by hand, and is
// not retried on every call.
func TestFailedImageBuild(t *testing.T) {
	tag := "mcp-sandbox-badbuild-" + randomHex(4) + ":latest"
	s := startSite(t, siteOptions{image: tag})
	withRecipe(t, s, tag, "FROM "+testImage()+"\nRUN echo failing on purpose; exit 3\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.client(ctx)
	call(ctx, t, c, "execute", map[string]any{"command": "true"})
	var text string
	waitFor(t, 60*time.Second, "the build to fail", func() bool {
		text = resultText(call(ctx, t, c, "execute", map[string]any{"command": "true"}))
		return strings.Contains(text, "failed")
	})
	for _, want := range []string{"Building the sandbox image " + tag + " failed", "non-zero code: 3", "docker build -t " + tag} {
		if !strings.Contains(text, want) {
			t.Errorf("failure message %q lacks %q", text, want)
		}
	}
}

// TestCustomImageMissing: an image name that is not ours is never built from our
// recipe; the error says what the operator must do.
func TestCustomImageMissing(t *testing.T) {
	s := startSite(t, siteOptions{image: "example.invalid/someone-elses-image:1"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := call(ctx, t, s.client(ctx), "execute", map[string]any{"command": "true"})
	if !res.IsError || !strings.Contains(resultText(res), "does not exist on the server's Docker engine") {
		t.Fatalf("custom image missing: %q", resultText(res))
	}
}

// TestImageBuildEndsWithSandbox: the background build belongs to the sandbox's pool
// entry, so stopping Caddy (the last config letting go) ends it instead of leaving it
// running for up to two hours.
func TestImageBuildEndsWithSandbox(t *testing.T) {
	tag := "mcp-sandbox-slowbuild-" + randomHex(4) + ":latest"
	s := startSite(t, siteOptions{image: tag})
	withRecipe(t, s, tag, "FROM "+testImage()+"\nRUN sleep 120\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client(ctx)
	if res := call(ctx, t, c, "execute", map[string]any{"command": "true"}); !strings.Contains(resultText(res), "is being built") {
		t.Fatalf("first call: %q", resultText(res))
	}
	var entry *fleet.Entry
	sandboxes.Range(func(_, v any) bool {
		if e := v.(*fleet.Entry); e.Sandbox().Config().Container == s.container {
			entry = e
		}
		return true
	})
	if entry == nil {
		t.Fatal("no pool entry for the site's sandbox")
	}
	start := time.Now()
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("stopping took %v", d)
	}
	if started, done, err := entry.ImageBuild(); !started || !done || err == nil {
		t.Fatalf("the build still runs after the sandbox was released (done %v, err %v)", done, err)
	}
	if _, err := s.docker.ImageInspect(context.Background(), tag); err == nil {
		t.Fatal("the image exists: the build was not stopped")
	}
}

// TestMakeRunBuildsMissingImage: `make run` (scripts/run-local.sh) on a machine without
// the image builds it with its progress on the terminal, then serves. A small local
// recipe stands in for containers/Dockerfile.unified, whose base image needs a registry.
func TestMakeRunBuildsMissingImage(t *testing.T) {
	cli := dockerClient(t)
	tag := "mcp-sandbox-runlocal-" + randomHex(4) + ":latest"
	name := "mcp-sandbox-test-" + randomHex(4)
	port := freePort(t)
	key := "run-local-key-" + randomHex(16)
	recipe := filepath.Join(t.TempDir(), "Dockerfile")
	if err := os.WriteFile(recipe, []byte("FROM "+testImage()+"\nRUN echo made-by-make-run > /built.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true})
		_ = cli.VolumeRemove(ctx, name+"-data", true)
		_, _ = cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})

	cmd := exec.Command("scripts/run-local.sh")
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
	waitFor(t, 5*time.Minute, "make run to serve", func() bool {
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
	for _, want := range []string{"is missing; building it from " + recipe, "Step 1/2 : FROM " + testImage(), "Step 2/2 : RUN echo made-by-make-run", "run: built " + tag} {
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
	if got := structured(t, call(ctx, t, c, "execute", map[string]any{"command": "cat /built.txt"}))["stdout"]; got != "made-by-make-run\n" {
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
