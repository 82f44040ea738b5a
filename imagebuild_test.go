package mcpsandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
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
