package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// Docker is the engine of the Docker client cli: Docker's own calls where API still
// names them, and the sandbox's terms (boxapi) where it speaks them, translated here
// and nowhere else.
func Docker(cli *client.Client) API { return dockerEngine{cli} }

// dockerClients are the Docker clients SharedDocker made, by key.
var dockerClients struct {
	sync.Mutex
	m map[string]*client.Client
}

// SharedDocker is Docker over the client made by newClient, made once for key (an
// engine's address and whatever else sets the client up) and shared by every caller
// with that key in this process: the sandboxes on one engine share one pool of
// connections and one version negotiation, where a client each kept fifty pools of
// idle connections with fifty people (each check of a container, each scrape, left
// one open for 30 s). Closing it closes only its idle connections (what
// client.Client.Close does), so one sandbox's Close leaves the client working for the
// others.
func SharedDocker(key string, newClient func() (*client.Client, error)) (API, error) {
	dockerClients.Lock()
	defer dockerClients.Unlock()
	if cli, ok := dockerClients.m[key]; ok {
		return dockerEngine{cli}, nil
	}
	cli, err := newClient()
	if err != nil {
		return nil, err
	}
	if dockerClients.m == nil {
		dockerClients.m = map[string]*client.Client{}
	}
	dockerClients.m[key] = cli
	return dockerEngine{cli}, nil
}

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

// statsMax bounds one stats sample (a few KiB in practice): what its lists of devices
// and networks hold is not ours to trust without a bound.
const statsMax = 4 << 20

func (d dockerEngine) BoxUsage(ctx context.Context, box string, sample time.Duration) (boxapi.Usage, error) {
	first, err := d.stats(ctx, box)
	if err != nil || sample <= 0 {
		return usageOf(first, first, false), err
	}
	select {
	case <-ctx.Done():
		return boxapi.Usage{}, ctx.Err()
	case <-time.After(sample):
	}
	second, err := d.stats(ctx, box)
	if err != nil {
		return boxapi.Usage{}, err
	}
	return usageOf(first, second, true), nil
}

// stats takes one of Docker's one-shot stats samples.
func (d dockerEngine) stats(ctx context.Context, box string) (container.StatsResponse, error) {
	var v container.StatsResponse
	resp, err := d.ContainerStatsOneShot(ctx, box)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, statsMax)).Decode(&v); err != nil {
		return v, fmt.Errorf("decoding the engine's stats: %w", err)
	}
	return v, nil
}

// usageOf is the usage two samples show: CPU over the time between them (when cpu),
// the rest as the second one saw it.
func usageOf(first, second container.StatsResponse, cpu bool) boxapi.Usage {
	u := boxapi.Usage{CPU: -1}
	a, b := first.CPUStats.CPUUsage.TotalUsage, second.CPUStats.CPUUsage.TotalUsage
	if dt := second.Read.Sub(first.Read); cpu && dt > 0 && b >= a {
		u.CPU = float64(b-a) / float64(dt.Nanoseconds())
	}
	mem := second.MemoryStats
	used := mem.Usage
	// What `docker stats` shows: the page cache the kernel can drop is not "used".
	if v, ok := mem.Stats["inactive_file"]; ok && v < used {
		used -= v
	} else if v, ok := mem.Stats["total_inactive_file"]; ok && v < used {
		used -= v
	}
	u.Memory, u.MemoryCache, u.MemoryLimit = int64(used), int64(mem.Usage-used), int64(min(mem.Limit, 1<<62))
	u.PIDs, u.PIDsLimit = int64(second.PidsStats.Current), int64(min(second.PidsStats.Limit, 1<<62))
	return u
}

func (d dockerEngine) UpdateBox(ctx context.Context, box string, upd boxapi.BoxUpdate) ([]string, error) {
	var u container.UpdateConfig
	if l := upd.Limits; l != nil {
		u.Resources = container.Resources{Memory: l.Memory, MemorySwap: l.MemorySwap, NanoCPUs: l.NanoCPUs}
		pids := l.PidsLimit
		u.PidsLimit = &pids
	}
	u.RestartPolicy = container.RestartPolicy{Name: container.RestartPolicyMode(upd.RestartPolicy)}
	resp, err := d.ContainerUpdate(ctx, box, u)
	return resp.Warnings, err
}

func (d dockerEngine) CreateVolume(ctx context.Context, name string, labels map[string]string) error {
	_, err := d.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: labels})
	return err
}

func (d dockerEngine) InspectVolume(ctx context.Context, name string) (boxapi.Volume, error) {
	v, err := d.VolumeInspect(ctx, name)
	if err != nil {
		return boxapi.Volume{}, err
	}
	return boxapi.Volume{Name: v.Name, Labels: v.Labels, Created: dockerTime(v.CreatedAt)}, nil
}

func (d dockerEngine) RemoveVolume(ctx context.Context, name string, force bool) error {
	return d.VolumeRemove(ctx, name, force)
}

// dockerOf is cli's Docker-only calls. An engine without them (Kubernetes) answers each
// with a not-implemented error naming what was asked; the sandbox checks the engine's
// capabilities first, so that answer is a guard, not a path.
func dockerOf(cli API) dockerOnly {
	if d, ok := cli.(dockerOnly); ok {
		return d
	}
	return notDocker{}
}

// notDocker is dockerOnly on an engine that is no Docker engine.
type notDocker struct{}

func (notDocker) refuse(what string) error {
	return fmt.Errorf("%s needs a Docker engine; this engine has no such call: %w", what, cerrdefs.ErrNotImplemented)
}

func (notDocker) ClientVersion() string                           { return "" }
func (notDocker) Dialer() func(context.Context) (net.Conn, error) { return nil }
func (n notDocker) ContainerCreate(context.Context, *container.Config, *container.HostConfig, *network.NetworkingConfig, *ocispec.Platform, string) (container.CreateResponse, error) {
	return container.CreateResponse{}, n.refuse("making a helper container")
}
func (n notDocker) ContainerInspectWithRaw(context.Context, string, bool) (container.InspectResponse, []byte, error) {
	return container.InspectResponse{}, nil, n.refuse("measuring a container's writes")
}
func (n notDocker) ContainerPause(context.Context, string) error {
	return n.refuse("pausing a container")
}
func (n notDocker) ContainerUnpause(context.Context, string) error {
	return n.refuse("unpausing a container")
}
func (n notDocker) ContainerWait(context.Context, string, container.WaitCondition) (<-chan container.WaitResponse, <-chan error) {
	errC := make(chan error, 1)
	errC <- n.refuse("waiting for a container")
	return nil, errC
}
func (n notDocker) ContainerLogs(context.Context, string, container.LogsOptions) (io.ReadCloser, error) {
	return nil, n.refuse("reading a container's logs")
}
func (n notDocker) ContainerCommit(context.Context, string, container.CommitOptions) (container.CommitResponse, error) {
	return container.CommitResponse{}, n.refuse("saving a container as an image")
}
func (n notDocker) ContainerExecCreate(context.Context, string, container.ExecOptions) (container.ExecCreateResponse, error) {
	return container.ExecCreateResponse{}, n.refuse("Docker's exec")
}
func (n notDocker) ContainerExecAttach(context.Context, string, container.ExecAttachOptions) (types.HijackedResponse, error) {
	return types.HijackedResponse{}, n.refuse("Docker's exec")
}
func (n notDocker) ContainerExecInspect(context.Context, string) (container.ExecInspect, error) {
	return container.ExecInspect{}, n.refuse("Docker's exec")
}
func (n notDocker) ImageBuild(context.Context, io.Reader, build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	return build.ImageBuildResponse{}, n.refuse("building an image")
}
func (n notDocker) ImageList(context.Context, image.ListOptions) ([]image.Summary, error) {
	return nil, n.refuse("listing images")
}
func (n notDocker) ImageRemove(context.Context, string, image.RemoveOptions) ([]image.DeleteResponse, error) {
	return nil, n.refuse("removing an image")
}
func (n notDocker) NetworkCreate(context.Context, string, network.CreateOptions) (network.CreateResponse, error) {
	return network.CreateResponse{}, n.refuse("making a network")
}
func (n notDocker) NetworkInspect(context.Context, string, network.InspectOptions) (network.Inspect, error) {
	return network.Inspect{}, n.refuse("inspecting a network")
}
func (n notDocker) VolumeList(context.Context, volume.ListOptions) (volume.ListResponse, error) {
	return volume.ListResponse{}, n.refuse("listing volumes")
}
func (n notDocker) VolumeCreate(context.Context, volume.CreateOptions) (volume.Volume, error) {
	return volume.Volume{}, n.refuse("making a volume with driver options")
}

func (d dockerEngine) EngineInfo(ctx context.Context) (boxapi.EngineInfo, error) {
	info, err := d.Info(ctx)
	if err != nil {
		return boxapi.EngineInfo{}, err
	}
	out := boxapi.EngineInfo{CPUs: info.NCPU, DefaultRuntime: info.DefaultRuntime,
		HasInit: info.InitBinary != "", Experimental: info.ExperimentalBuild}
	if len(info.Runtimes) > 0 {
		out.Runtimes = make(map[string]boxapi.RuntimeInfo, len(info.Runtimes))
		for name, rt := range info.Runtimes {
			out.Runtimes[name] = boxapi.RuntimeInfo{Path: rt.Path, Args: rt.Args}
		}
	}
	return out, nil
}

func (d dockerEngine) Reachable(ctx context.Context) error {
	_, err := d.Ping(ctx)
	return err
}

func (d dockerEngine) InspectImage(ctx context.Context, ref string) (boxapi.Image, error) {
	img, err := d.ImageInspect(ctx, ref)
	if err != nil {
		return boxapi.Image{}, err
	}
	out := boxapi.Image{ID: img.ID, Architecture: img.Architecture, Comment: img.Comment}
	if img.Config != nil {
		out.Env = img.Config.Env
	}
	return out, nil
}

func (d dockerEngine) CreateBox(ctx context.Context, name string, sp boxapi.BoxSpec) (string, []string, error) {
	cfg, hc := dockerConfig(sp)
	resp, err := d.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	return resp.ID, resp.Warnings, err
}

// dockerConfig is a box's spec as Docker's container and host configuration.
func dockerConfig(sp boxapi.BoxSpec) (*container.Config, *container.HostConfig) {
	cfg := &container.Config{
		Image: sp.Image, Hostname: sp.Hostname, User: sp.User, WorkingDir: sp.WorkingDir,
		Entrypoint: sp.Entrypoint, Cmd: sp.Cmd, Env: sp.Env, Labels: sp.Labels,
	}
	pids, init := sp.Limits.PidsLimit, sp.Init
	hc := &container.HostConfig{
		NetworkMode:   container.NetworkMode(sp.NetworkMode),
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyMode(sp.RestartPolicy)},
		Init:          &init,
		Resources: container.Resources{Memory: sp.Limits.Memory, MemorySwap: sp.Limits.MemorySwap,
			NanoCPUs: sp.Limits.NanoCPUs, PidsLimit: &pids},
		CapDrop:     sp.CapDrop,
		SecurityOpt: sp.SecurityOpt,
		Sysctls:     sp.Sysctls,
		Runtime:     sp.Runtime,
	}
	for _, m := range sp.Mounts {
		if m.Volume != "" {
			hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Source: m.Volume, Target: m.Destination, ReadOnly: m.ReadOnly})
			continue
		}
		b := m.Source + ":" + m.Destination
		if m.ReadOnly {
			b += ":ro"
		}
		hc.Binds = append(hc.Binds, b)
	}
	if f := hostConfigForTest.Get(); f != nil {
		(*f)(hc)
	}
	return cfg, hc
}
