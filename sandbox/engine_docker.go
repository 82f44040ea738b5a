package sandbox

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// Docker is the engine of the Docker client cli: Docker's own calls where API still
// names them, and the sandbox's terms (boxapi) where it speaks them, translated here
// and nowhere else.
func Docker(cli *client.Client) API { return dockerEngine{cli} }

// dockerEngine is a Docker client as an API. It keeps every method of the client (the
// optional ones the package asks for, such as the checkpoint calls, among them).
type dockerEngine struct{ *client.Client }

var _ API = dockerEngine{}

func (d dockerEngine) StatPath(ctx context.Context, box, path string) (boxapi.PathStat, error) {
	st, err := d.ContainerStatPath(ctx, box, path)
	return boxapi.PathStat(st), err
}

func (d dockerEngine) CopyOut(ctx context.Context, box, path string) (io.ReadCloser, boxapi.PathStat, error) {
	rc, st, err := d.CopyFromContainer(ctx, box, path)
	return rc, boxapi.PathStat(st), err
}

func (d dockerEngine) CopyIn(ctx context.Context, box, dir string, content io.Reader) error {
	return d.CopyToContainer(ctx, box, dir, content, container.CopyToContainerOptions{})
}

func (d dockerEngine) StartBox(ctx context.Context, box string) error {
	return d.ContainerStart(ctx, box, container.StartOptions{})
}

func (d dockerEngine) StopBox(ctx context.Context, box string, grace time.Duration) error {
	secs := graceSeconds(grace)
	return d.ContainerStop(ctx, box, container.StopOptions{Timeout: &secs})
}

func (d dockerEngine) RestartBox(ctx context.Context, box string, grace time.Duration) error {
	secs := graceSeconds(grace)
	return d.ContainerRestart(ctx, box, container.StopOptions{Timeout: &secs})
}

// graceSeconds is grace in Docker's whole seconds, rounded up.
func graceSeconds(grace time.Duration) int {
	return int((max(grace, 0) + time.Second - 1) / time.Second)
}

func (d dockerEngine) KillBox(ctx context.Context, box string) error {
	return d.ContainerKill(ctx, box, "KILL")
}

func (d dockerEngine) RemoveBox(ctx context.Context, box string) error {
	return d.ContainerRemove(ctx, box, container.RemoveOptions{Force: true})
}

func (d dockerEngine) RenameBox(ctx context.Context, box, to string) error {
	return d.ContainerRename(ctx, box, to)
}

func (d dockerEngine) InspectBox(ctx context.Context, box string) (boxapi.Box, error) {
	info, err := d.ContainerInspect(ctx, box)
	if err != nil {
		return boxapi.Box{}, err
	}
	return dockerBox(info), nil
}

// dockerBox is Docker's inspect of a container in the sandbox's terms.
func dockerBox(info container.InspectResponse) boxapi.Box {
	var b boxapi.Box
	if base := info.ContainerJSONBase; base != nil {
		b.ID, b.Name, b.ImageID = base.ID, strings.TrimPrefix(base.Name, "/"), base.Image
		b.Created, b.RestartCount, b.ExecIDs = dockerTime(base.Created), base.RestartCount, base.ExecIDs
		if st := base.State; st != nil {
			b.State = boxapi.BoxState{Status: string(st.Status), Running: st.Running, Paused: st.Paused,
				Restarting: st.Restarting, Dead: st.Dead, StartedAt: dockerTime(st.StartedAt),
				FinishedAt: dockerTime(st.FinishedAt), ExitCode: st.ExitCode, OOMKilled: st.OOMKilled, Error: st.Error}
		}
		if hc := base.HostConfig; hc != nil {
			b.Spec.Runtime, b.Spec.NetworkMode, b.Spec.RestartPolicy = hc.Runtime, string(hc.NetworkMode), string(hc.RestartPolicy.Name)
			b.Spec.CapDrop, b.Spec.SecurityOpt, b.Spec.Sysctls = hc.CapDrop, hc.SecurityOpt, hc.Sysctls
			b.Spec.Limits = boxapi.Limits{Memory: hc.Memory, MemorySwap: hc.MemorySwap, NanoCPUs: hc.NanoCPUs}
			if hc.PidsLimit != nil {
				b.Spec.Limits.PidsLimit = *hc.PidsLimit
			}
		}
	}
	if c := info.Config; c != nil {
		b.Spec.Image, b.Spec.Env, b.Spec.WorkingDir, b.Spec.Labels = c.Image, c.Env, c.WorkingDir, c.Labels
	}
	for _, m := range info.Mounts {
		b.Spec.Mounts = append(b.Spec.Mounts, boxapi.Mount{Volume: m.Name, Source: m.Source, Destination: m.Destination, ReadOnly: !m.RW})
	}
	return b
}

// dockerTime reads one of Docker's times; zero when it is none ("0001-01-01...").
func dockerTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}

// ListBoxes filters the list itself: a filter makes the Docker client read its API
// version unlocked, which races with a negotiation under way on a shared client.
func (d dockerEngine) ListBoxes(ctx context.Context, label string) ([]boxapi.BoxSummary, error) {
	list, err := d.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, err
	}
	key, value, withValue := strings.Cut(label, "=")
	out := make([]boxapi.BoxSummary, 0, len(list))
	for _, c := range list {
		if v, ok := c.Labels[key]; label != "" && (!ok || withValue && v != value) {
			continue
		}
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, boxapi.BoxSummary{ID: c.ID, Name: name, Labels: c.Labels, Status: string(c.State), Created: time.Unix(c.Created, 0)})
	}
	return out, nil
}
