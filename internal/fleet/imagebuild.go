package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

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

// ImageMissing answers a tool call or download that found the sandbox's image missing
// on its engine: it starts the background build there from dockerfile when there is
// one (nil: the image is not ours to build), and says what is happening and what to do.
// Nothing is built for a Kubernetes engine: its nodes pull images from a registry.
func (e *Entry) ImageMissing(dockerfile []byte) string {
	image := e.sb.Config().Image
	if e.engine.IsKubernetes() {
		return fmt.Sprintf("The sandbox image %s is not available to the Kubernetes cluster's nodes. The server's operator must push it to a registry the nodes pull from (or import it into the nodes) and set image to that name; the plugin builds no image on a cluster.", image)
	}
	manual := sandbox.ImageBuildHint(image)
	if dockerfile == nil {
		// Not ours: its recipe is the operator's, so the standard image's is no hint.
		return fmt.Sprintf("The sandbox image %[1]s does not exist on the server's Docker engine. The server's operator must provide it there: docker pull %[1]s from its registry, or docker build -t %[1]s from its own Dockerfile (or leave image out: the standard code-sandbox:latest is built by the plugin itself).", image)
	}
	b := e.startImageBuild(e.cli, image, dockerfile)
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

// ImageBuild tells whether a build of the image was started, whether it has ended,
// and how.
func (e *Entry) ImageBuild() (started, done bool, err error) {
	e.buildMu.Lock()
	b := e.build
	e.buildMu.Unlock()
	if b == nil {
		return false, false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return true, b.done, b.err
}

// startImageBuild returns the entry's build of image, starting one unless one is
// running, has succeeded, or failed recently. The build runs under the entry's context,
// so Destruct (the last config letting go of the sandbox) stops it and waits for it.
func (e *Entry) startImageBuild(cli sandbox.API, image string, dockerfile []byte) *imageBuild {
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
		err := sandbox.BuildImage(ctx, cli, image, dockerfile, func(line string) {
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
