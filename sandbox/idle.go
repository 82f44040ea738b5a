package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

// stopTimeout is how long Stop gives the container's processes after SIGTERM.
const stopTimeout = 5 * time.Second

// Stop stops the container: every process in it ends; the volume (/sandbox) and the
// container's own files stay. The next [Sandbox.Ensure] starts it again. Upkeep never
// starts it, and the idle-file cleanup skips it until then (and catches up then). why
// says who or what stopped it, for the log ("idle_stop", "operator", ...).
func (s *Sandbox) Stop(ctx context.Context, why string) error {
	// A checkpoint or restore under way ends first: stopped halfway, a paused
	// container's processes would write during the copy, a new one be stopped unready.
	if err := s.saves.waitSaved(ctx); err != nil {
		return err
	}
	// No agent starts in the container while it stops (the egress listener would
	// listen again at once), and none that fails in it sends the sandbox to the
	// fallback.
	end := s.link.beginStop()
	s.life.invalidate()
	if s.saves.saveProcesses(ctx, why) {
		s.life.invalidate()
		end()
		return nil
	}
	err := s.cli.StopBox(ctx, s.cfg.Container, stopTimeout)
	s.life.invalidate() // an Ensure that ran meanwhile saw it running
	end()
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("stopping sandbox container %s: %w", s.cfg.Container, err)
	}
	s.log.Info("stopped sandbox container; /sandbox is kept", zap.String("by", why))
	return nil
}

// Start starts the container again after Stop. When this Sandbox has ensured it
// before, it only starts it: the settings were applied then, and a full Ensure costs
// seconds on a busy engine. Otherwise, or when the start fails, it is [Sandbox.Ensure].
func (s *Sandbox) Start(ctx context.Context) error {
	ctx, done, err := s.life.startMaking(ctx)
	if err != nil {
		return err
	}
	defer done()
	s.mu.Lock()
	known := s.life.hostCPUs > 0
	s.mu.Unlock()
	if !known || isUpkeep(ctx) {
		return s.Ensure(ctx)
	}
	if err := s.saves.startContainer(ctx); err != nil {
		return s.Ensure(ctx)
	}
	s.link.agentFresh()
	s.life.ready()
	s.log.Info("started stopped sandbox container")
	s.life.started()
	return nil
}

// Running reports whether the container exists and runs. It changes nothing.
func (s *Sandbox) Running(ctx context.Context) (bool, error) {
	_, err := s.life.runningInfo(ctx)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, errNotRunning) {
		return false, nil
	}
	return false, err
}

// jobOutputScript prints the first job output file (JobsDir/<id>.out or .err)
// modified after the Unix time $2, in the jobs directory $1.
const jobOutputScript = `ref=/tmp/.mcp-sandbox-idle.$$
touch -d "@$2" "$ref" || exit 1
trap 'rm -f "$ref"' EXIT
[ -d "$1" ] || exit 0
find "$1" -maxdepth 1 -type f \( -name '*.out' -o -name '*.err' \) -newer "$ref" -print -quit 2>/dev/null
exit 0`

// JobOutputSince reports whether a job wrote output after t: a training run printing
// progress is busy; a dev server waiting for requests is not. It is upkeep: a stopped
// container is not started (and has no output: false).
func (s *Sandbox) JobOutputSince(ctx context.Context, t time.Time) (bool, error) {
	var out bytes.Buffer
	res, err := s.runner.run(upkeep(ctx), "bash -c "+shellQuote(jobOutputScript)+" idle "+JobsDir+" "+strconv.FormatInt(t.Unix(), 10),
		30*time.Second, minMaxOutput, func(st boxapi.Stream, p []byte) {
			if st == boxapi.Stdout && out.Len() < 4096 {
				out.Write(p)
			}
		})
	if errors.Is(err, errNotRunning) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("looking for job output: %w", err)
	}
	if res.ExitCode != 0 {
		return false, fmt.Errorf("looking for job output: script exited with %d", res.ExitCode)
	}
	return out.Len() > 0, nil
}

// noteCleanupSkipped remembers that a cleanup pass found the container stopped, so
// that starting it again runs the pass that was missed.
func (s *lifecycle) noteCleanupSkipped() {
	s.sb.mu.Lock()
	s.cleanupMissed = true
	s.sb.mu.Unlock()
}

// started is called when Ensure has started a stopped container: a cleanup pass
// missed while it was stopped runs now, not at the next interval.
func (s *lifecycle) started() {
	s.starts.Add(1)
	s.sb.mu.Lock()
	missed := s.cleanupMissed
	s.cleanupMissed = false
	s.sb.mu.Unlock()
	if !missed {
		return
	}
	select {
	case s.cleanupKick <- struct{}{}:
		s.log.Debug("container started again: running the missed cleanup pass")
	default:
	}
}

// Listening reports whether a listener of ListenPort on port is open through a live
// agent channel.
func (s *Sandbox) Listening(port int) bool {
	s.link.agentMu.Lock()
	defer s.link.agentMu.Unlock()
	for k, l := range s.link.agent.listeners {
		if l.port == port && k.sess != nil && k.sess.Err() == nil {
			return true
		}
	}
	return false
}
