package sandbox

import (
	"context"
	"io"
	"net"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// API is what the package asks of a container engine, in the sandbox's terms
// (boxapi): its boxes (containers) made, started, stopped and inspected, their files,
// usage and volumes. Docker (a client wrapped by Docker) is one engine; the
// Kubernetes engine (package kube) is another, which keeps each box as a pod. What an
// engine does beyond these it states through optional interfaces: Capabilities, its
// own programs (processEngine), a liveness check (liveEngine), memory saves
// (memoryEngine), and Docker's own calls (dockerOnly). A call an engine cannot serve
// fails with an error that says so (errdefs.ErrNotImplemented).
type API interface {
	Close() error
	DaemonHost() string
	// EngineInfo is what the engine says of itself.
	EngineInfo(ctx context.Context) (boxapi.EngineInfo, error)
	// Reachable is nil when the engine answers.
	Reachable(ctx context.Context) error
	// CreateBox makes the container name as sp says, not started; a name in use is a
	// conflict. The warnings are the engine's.
	CreateBox(ctx context.Context, name string, sp boxapi.BoxSpec) (id string, warnings []string, err error)
	// InspectBox tells of the container box (a name or an ID); a missing one is a
	// not-found error.
	InspectBox(ctx context.Context, box string) (boxapi.Box, error)
	// ListBoxes lists the engine's containers, running or not, that carry label
	// ("key" or "key=value"; "" all of them).
	ListBoxes(ctx context.Context, label string) ([]boxapi.BoxSummary, error)
	// StartBox starts the container box (made, or stopped) and returns once it runs.
	StartBox(ctx context.Context, box string) error
	// StopBox stops box, its processes given grace to end before they are killed;
	// a box that does not run is left as it is.
	StopBox(ctx context.Context, box string, grace time.Duration) error
	// RestartBox stops box as StopBox does and starts it again.
	RestartBox(ctx context.Context, box string, grace time.Duration) error
	// KillBox kills box's processes at once; a box that does not run is a conflict.
	KillBox(ctx context.Context, box string) error
	// RemoveBox removes box, running or not; its volumes stay.
	RemoveBox(ctx context.Context, box string) error
	// RenameBox gives box the name to.
	RenameBox(ctx context.Context, box, to string) error
	// UpdateBox changes box's limits or restart policy in place; the warnings say what
	// the engine could not apply at once.
	UpdateBox(ctx context.Context, box string, upd boxapi.BoxUpdate) (warnings []string, err error)
	// BoxUsage is what the running box uses now, its CPU measured over sample (none:
	// CPU is -1); a not-implemented error where the engine has no figures.
	BoxUsage(ctx context.Context, box string, sample time.Duration) (boxapi.Usage, error)
	// StatPath describes path in the container box, not following a final link.
	StatPath(ctx context.Context, box, path string) (boxapi.PathStat, error)
	// CopyOut is a tar stream of path in the container box, and what path is.
	CopyOut(ctx context.Context, box, path string) (io.ReadCloser, boxapi.PathStat, error)
	// CopyIn unpacks the tar stream content into the directory dir of the container
	// box.
	CopyIn(ctx context.Context, box, dir string, content io.Reader) error
	// InspectImage tells of the image ref; a missing one is a not-found error.
	InspectImage(ctx context.Context, ref string) (boxapi.Image, error)
	// CreateVolume makes the named volume name with labels; one that exists is left
	// as it is.
	CreateVolume(ctx context.Context, name string, labels map[string]string) error
	// InspectVolume tells of volume name; a missing one is a not-found error.
	InspectVolume(ctx context.Context, name string) (boxapi.Volume, error)
	// RemoveVolume removes volume name; one a container mounts is a conflict unless
	// force.
	RemoveVolume(ctx context.Context, name string, force bool) error
}

// dockerOnly is what only a Docker engine does for the sandbox, in Docker's terms:
// checkpoints (pauses, commits, images, volumes with driver options, short-lived
// containers to copy them), image builds, networks, its own execs, and its archive
// endpoint over its socket. The sandbox asks for it where its engine's capabilities
// (boxapi.Capabilities) say the engine has it; see dockerOf.
type dockerOnly interface {
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ClientVersion() string
	Dialer() func(context.Context) (net.Conn, error)
	ContainerInspectWithRaw(ctx context.Context, container string, getSize bool) (container.InspectResponse, []byte, error)
	ContainerPause(ctx context.Context, container string) error
	ContainerUnpause(ctx context.Context, container string) error
	ContainerWait(ctx context.Context, container string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerLogs(ctx context.Context, container string, options container.LogsOptions) (io.ReadCloser, error)
	ContainerCommit(ctx context.Context, container string, options container.CommitOptions) (container.CommitResponse, error)
	ContainerExecCreate(ctx context.Context, container string, options container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, options container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
	ImageBuild(ctx context.Context, context io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error)
	ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error)
	ImageRemove(ctx context.Context, image string, options image.RemoveOptions) ([]image.DeleteResponse, error)
	NetworkCreate(ctx context.Context, name string, options network.CreateOptions) (network.CreateResponse, error)
	NetworkInspect(ctx context.Context, network string, options network.InspectOptions) (network.Inspect, error)
	VolumeList(ctx context.Context, options volume.ListOptions) (volume.ListResponse, error)
	VolumeCreate(ctx context.Context, options volume.CreateOptions) (volume.Volume, error)
}

// liveEngine is an engine whose container can go without the agent's channel noticing
// at once: a Kubernetes pod deleted with no grace period is gone from the API at once,
// while its exec streams end only once the node has killed it. ContainerRunning asks
// the engine itself; its error is a not-found or conflict one when the container is
// gone or does not run.
type liveEngine interface {
	ContainerRunning(ctx context.Context, name string) error
}

// confirmRunning, on a liveEngine, makes sure a new command goes to a container that
// still runs: one the engine reports gone or going has its agent's channel closed and
// is made again first, so the command runs there once instead of being sent into the
// old one and reported lost with it. Other errors leave things as they are (the command
// then meets whatever is wrong).
func (s *lifecycle) confirmRunning(ctx context.Context) error {
	le, ok := s.cli.(liveEngine)
	if !ok {
		return nil
	}
	err := le.ContainerRunning(ctx, s.cfg.Container)
	if err == nil || !containerGone(err) || ctx.Err() != nil {
		return nil
	}
	s.log.Info("the sandbox's container is gone or stopping; making it again before the command", zap.Error(err))
	s.sb.CloseAgent()
	s.invalidate()
	return s.sb.Ensure(ctx)
}

// capable is an engine that states its capabilities (the Kubernetes engine); any
// other is taken for a Docker engine.
type capable interface {
	Capabilities() boxapi.Capabilities
}

// capabilitiesOf is what cli can do; nil, nothing.
func capabilitiesOf(cli API) boxapi.Capabilities {
	switch c := cli.(type) {
	case nil:
		return boxapi.Capabilities{}
	case capable:
		return c.Capabilities()
	default:
		return boxapi.DockerCapabilities(cli.DaemonHost())
	}
}

// EngineDown reports whether err means the Docker engine did not answer: it could not
// be reached, or the connection to it broke. Trying again later may work; nothing is
// wrong with the command or the path.
func EngineDown(err error) bool {
	return client.IsErrConnectionFailed(err) || boxapi.EngineDown(err)
}
