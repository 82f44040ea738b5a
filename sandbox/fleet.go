package sandbox

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"go.uber.org/zap"
)

// Count is how many sandbox containers, running or stopped, an engine holds.
func Count(ctx context.Context, cli API) (int, error) {
	list, err := cli.ListBoxes(ctx, labelVolume)
	return len(list), err
}

// Exists reports whether an engine has a container named name.
func Exists(ctx context.Context, cli API, name string) (bool, error) {
	_, err := cli.InspectBox(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// Container is a sandbox container as an engine lists it.
type Container struct {
	Name   string // without Docker's leading slash
	State  string // running, exited, created, ...
	Volume string // the volume at WorkDir, from its label
	Person string // from its label; "" on the operator's and on containers made before the label
	// Warm: made ahead of need (label mcp-sandbox.warm); under a person's name, taken
	// by that person. WarmPool names the pool that made it (Config.WarmPool).
	Warm     bool
	WarmPool string
}

// Containers lists the sandbox containers, running or stopped, an engine holds.
func Containers(ctx context.Context, cli API) ([]Container, error) {
	list, err := cli.ListBoxes(ctx, labelVolume)
	if err != nil {
		return nil, fmt.Errorf("listing sandbox containers: %w", err)
	}
	out := make([]Container, 0, len(list))
	for _, c := range list {
		if c.Name == "" {
			continue
		}
		warm := c.Labels[labelWarm] == "true"
		out = append(out, Container{
			Name: c.Name, State: c.Status,
			Volume: c.Labels[labelVolume], Person: c.Labels[labelPerson], Warm: warm, WarmPool: c.Labels[labelWarmPool],
		})
	}
	return out, nil
}

// Delete removes the container, whatever its state, and with volume also its volume
// (everything under WorkDir). What is already gone is no error. Closing the Sandbox
// first keeps anything still holding it from making the container again.
func (s *Sandbox) Delete(ctx context.Context, volume bool) error {
	end := s.link.beginStop()
	defer end()
	s.life.invalidate()
	err := s.cli.RemoveBox(ctx, s.cfg.Container)
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("removing sandbox container %s: %w", s.cfg.Container, err)
	}
	if volume {
		err := s.cli.RemoveVolume(ctx, s.cfg.Volume, false)
		if err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("removing sandbox volume %s (the container is removed; try again, or docker volume rm %s): %w", s.cfg.Volume, s.cfg.Volume, err)
		}
	}
	s.log.Info("deleted sandbox container", zap.Bool("volume_removed", volume), zap.String("volume", s.cfg.Volume))
	return nil
}
