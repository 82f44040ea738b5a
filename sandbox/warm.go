package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	cerrdefs "github.com/containerd/errdefs"
	"go.uber.org/zap"
)

// labelWarm marks a container made ahead of need (Config.Warm). A person who takes it
// keeps the label: the container's name, not its labels, says whose it is then, and
// its volume label names the volume it was made with.
const labelWarm = "mcp-sandbox.warm"

// labelWarmPool names the pool that made a warm container (Config.WarmPool).
const labelWarmPool = "mcp-sandbox.warm-pool"

// Warm makes the container of a warm sandbox (Config.Warm) and starts it and its
// agent, so that a person who takes it (TakeOver) finds it ready. Where the agent
// cannot run, the sandbox is warm without it, as such a sandbox would run anyway.
func (s *Sandbox) Warm(ctx context.Context) error {
	if !s.cfg.Warm {
		return errors.New("warming a sandbox that is not a warm one (Config.Warm)")
	}
	if err := s.Ensure(ctx); err != nil {
		return err
	}
	s.link.agentSession(ctx)
	return nil
}

// TakeOver makes the running container of the warm sandbox w this sandbox's: w is
// closed, its agent ends, its container is renamed to this sandbox's name and the
// directory of its agent's direct channel goes with it. This sandbox's configuration
// must name w's volume (Docker cannot change a container's mounts): the caller records
// that volume as the person's. The next call ensures the container as usual and starts
// this sandbox's agent in it.
func (s *Sandbox) TakeOver(ctx context.Context, w *Sandbox) error {
	if !w.cfg.Warm {
		return fmt.Errorf("taking over %s: it is not a warm sandbox", w.cfg.Container)
	}
	if s.cfg.Volume != w.cfg.Volume {
		return fmt.Errorf("taking over %s: its volume is %s, this sandbox's %s", w.cfg.Container, w.cfg.Volume, s.cfg.Volume)
	}
	w.Close()
	w.CloseAgent()
	if err := s.cli.RenameBox(ctx, w.cfg.Container, s.cfg.Container); err != nil {
		return fmt.Errorf("renaming warm sandbox container %s to %s: %w", w.cfg.Container, s.cfg.Container, err)
	}
	s.takeDirectDir(w)
	// The warm sandbox made sure of the container moments ago with the same settings:
	// what its Ensure learnt holds for this one, which starts its agent at once.
	w.mu.Lock()
	env, cpus := w.runner.cmdEnv, w.life.hostCPUs
	w.mu.Unlock()
	s.mu.Lock()
	s.runner.cmdEnv, s.life.hostCPUs = env, cpus
	s.mu.Unlock()
	s.link.agentFresh()
	s.life.ready()
	s.log.Info("took a warm sandbox", zap.String("warm", w.cfg.Container), zap.String("volume", s.cfg.Volume))
	return nil
}

// takeDirectDir makes the directory of w's direct channel this sandbox's: the
// container binds it by its path, so this sandbox's directory becomes a symbolic link
// to it, which a container made again later binds too.
func (s *Sandbox) takeDirectDir(w *Sandbox) {
	from, to := w.link.directDir(), s.link.directDir()
	if from == "" || to == "" || from == to {
		return
	}
	if _, err := os.Stat(from); err != nil {
		return
	}
	err := os.RemoveAll(to)
	if err == nil {
		err = os.Symlink(from, to)
	}
	if err != nil {
		s.log.Warn("linking the direct channel's directory of a taken warm sandbox; its agent's channel goes through Docker until the container is made again",
			zap.String("from", from), zap.String("to", to), zap.Error(err))
	}
}

// sameDir reports whether the paths a and b name the same directory, symbolic links
// followed.
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ra, err := filepath.EvalSymlinks(a)
	if err != nil {
		return false
	}
	rb, err := filepath.EvalSymlinks(b)
	return err == nil && ra == rb
}

// Discard removes a warm sandbox's container and its volume, which hold nobody's
// files. What is gone already is no error.
func (s *Sandbox) Discard(ctx context.Context) error {
	if !s.cfg.Warm {
		return fmt.Errorf("discarding %s: only a warm sandbox is discarded", s.cfg.Container)
	}
	s.Close()
	s.CloseAgent()
	if d := s.link.directDir(); d != "" {
		defer os.RemoveAll(d)
	}
	return s.Delete(ctx, true)
}

// Inspect finds the sandbox container name on an engine: ok is false when the engine
// has none of that name.
func Inspect(ctx context.Context, cli API, name string) (c Container, ok bool, err error) {
	info, err := cli.InspectBox(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("inspecting sandbox container %s: %w", name, err)
	}
	labels := info.Spec.Labels
	c.Name, c.State = name, info.State.Status
	c.Volume, c.Person, c.Warm = labels[labelVolume], labels[labelPerson], labels[labelWarm] == "true"
	return c, true, nil
}

// VolumeExists reports whether an engine has a volume named name.
func VolumeExists(ctx context.Context, cli API, name string) (bool, error) {
	_, err := cli.InspectVolume(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspecting sandbox volume %s: %w", name, err)
	}
	return true, nil
}
