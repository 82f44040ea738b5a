package mcpsandbox

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// unifiedDockerfile is the production image's recipe, built in the background when the
// default image is missing so that a new install works without a manual build.
//
//go:embed containers/Dockerfile.unified
var unifiedDockerfile []byte

// autoBuildImages are the image names built from unifiedDockerfile when missing. A
// custom image name is never built from our recipe: the error says how to provide it.
var autoBuildImages = map[string]bool{"code-sandbox:latest": true}

// retryFailedBuildAfter keeps a failing build from being retried on every tool call;
// imageBuildTimeout bounds one build.
const (
	retryFailedBuildAfter = 10 * time.Minute
	imageBuildTimeout     = 2 * time.Hour
)

// imageBuild is one background build of the sandbox image.
type imageBuild struct {
	image   string
	started time.Time

	mu    sync.Mutex
	step  string
	done  bool
	ended time.Time
	err   error
}

// imageMissing answers a tool call or download that found the image missing on e's
// engine: it starts the background build there when it may, and says what is
// happening and what to do.
func (h *Handler) imageMissing(e *sandboxEntry) string {
	image := e.sb.Config().Image
	manual := sandbox.ImageBuildHint(image)
	if !autoBuildImages[image] {
		return fmt.Sprintf("The sandbox image %s does not exist on the server's Docker engine. The server's operator must build or pull it (for the standard image: %s in the plugin's repository).", image, manual)
	}
	b := e.startImageBuild(e.cli, image)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.done:
		msg := fmt.Sprintf("The sandbox image %s is being built (started %s ago); the first build takes several minutes. Try again in a minute.", image, time.Since(b.started).Round(time.Second))
		if b.step != "" {
			msg += " Current step: " + human.Clip(b.step, 160)
		}
		return msg
	case b.err != nil:
		return fmt.Sprintf("Building the sandbox image %s failed: %v. The server's operator can build it by hand: %s (it is retried automatically after %s).", image, b.err, manual, retryFailedBuildAfter)
	}
	return fmt.Sprintf("The sandbox image %s has just been built. Try again.", image)
}

// startImageBuild returns the entry's build of image, starting one unless one is
// running, has succeeded, or failed recently. The build runs under the entry's context,
// so Destruct (the last config letting go of the sandbox) stops it and waits for it.
func (e *sandboxEntry) startImageBuild(cli client.APIClient, image string) *imageBuild {
	e.buildMu.Lock()
	defer e.buildMu.Unlock()
	if b := e.build; b != nil {
		b.mu.Lock()
		stale := b.done && (b.err == nil || time.Since(b.ended) > retryFailedBuildAfter)
		b.mu.Unlock()
		if !stale {
			return b
		}
	}
	b := &imageBuild{image: image, started: time.Now()}
	e.build = b
	if e.buildCtx.Err() != nil { // destructed: report, do not start
		b.done, b.ended, b.err = true, time.Now(), e.buildCtx.Err()
		return b
	}
	logger := e.logger
	logger.Info("sandbox image is missing; building it in the background", zap.String("image", image))
	e.builds.Add(1)
	go func() {
		defer e.builds.Done()
		ctx, cancel := context.WithTimeout(e.buildCtx, imageBuildTimeout)
		defer cancel()
		err := sandbox.BuildImage(ctx, cli, image, unifiedDockerfile, func(line string) {
			if strings.HasPrefix(line, "Step ") {
				logger.Info("building sandbox image", zap.String("image", image), zap.String("step", line))
				b.mu.Lock()
				b.step = line
				b.mu.Unlock()
			} else {
				logger.Debug("building sandbox image", zap.String("image", image), zap.String("output", line))
			}
		})
		b.mu.Lock()
		b.done, b.ended, b.err = true, time.Now(), err
		b.mu.Unlock()
		if err != nil {
			logger.Error("building sandbox image failed; build it by hand with "+sandbox.ImageBuildHint(image),
				zap.String("image", image), zap.Error(err))
			return
		}
		logger.Info("sandbox image built", zap.String("image", image), zap.Duration("took", time.Since(b.started)))
	}()
	return b
}
