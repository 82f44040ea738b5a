package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
)

const (
	// readyTrust is how long a successful Ensure is trusted without asking Docker again.
	// Exec retries once through a full Ensure when the container turned out to be gone,
	// so trusting it costs at most one failed exec create.
	readyTrust = 30 * time.Second
	// readyTrustOpen is how long it is trusted while the agent's channel stays open:
	// the agent is a process of the container, which runs as long as the channel does
	// (a container stopped, killed or restarted ends it). Only a pause by someone else
	// leaves it open; past this, an Ensure finds the container paused and unpauses it.
	readyTrustOpen = 5 * time.Minute
	// ensureTimeout bounds one full Ensure, which runs detached from its first caller so
	// that a caller giving up does not fail the others sharing it.
	ensureTimeout = 2 * time.Minute
	// restartWait is how long Ensure waits for a container Docker is restarting.
	restartWait = 30 * time.Second
	// imageRecheck is how often Ensure compares a container's image with the
	// configured one again once they matched.
	imageRecheck = 10 * time.Minute

	labelManaged = "mcp-sandbox.managed"
	labelVolume  = "mcp-sandbox.volume"
	labelEngine  = "mcp-sandbox.engine"
	labelPerson  = "mcp-sandbox.person"
)

// keepAlive is the container's main process: it has to stay up (commands come in
// through exec) and to stop promptly on SIGTERM. Without docker-init it is PID 1, and
// bash reaps the orphans it adopts whenever it wakes from wait. A child of it starts the
// agent's job runners on request (FIFO /run/mcp-sandbox/spawn, "<id> <agent binary>";
// cmd/sandbox-agent/spawn.go): under gVisor only what descends from the main process,
// not from an exec, outlives a save of the container's memory (keep_processes). Where
// mkfifo fails (a read-only root, no mkfifo), there is no FIFO and the agent starts its
// runners itself. Kept short: ps shows it in full, twice.
const keepAlive = `trap 'exit 0' TERM INT;d=/run/mcp-sandbox
(trap - TERM INT;{ mkdir -p -m 700 $d&&rm -f $d/spawn&&mkfifo -m 600 $d/spawn;}||exit;exec 3<>$d/spawn
while read -r i e<&3;do case $i in ''|*[!0-9a-f]*);;*)"$e" jobs --announce<$d/$i.in 3>$d/$i.ev&;;esac;done)>/dev/null 2>&1</dev/null&
while :;do sleep 86400&wait $!;done`

// Ensure makes sure the sandbox container exists and runs: it creates the volume, the
// network and the container when missing, starts a stopped container, applies changed
// memory, CPU and process limits in place, and warns when the configured image differs
// from the container's. A container without the current isolation (NET_RAW dropped,
// no-new-privileges) or on another network than configured is recreated on the same
// volume: /sandbox is kept, running processes end. It is cheap after a recent success, and concurrent
// callers share one check.
func (s *Sandbox) Ensure(ctx context.Context) error {
	if isUpkeep(ctx) {
		_, err := s.life.runningInfo(ctx)
		return err
	}
	s.mu.Lock()
	closed := s.life.closed
	seen, age := !s.life.readyAt.IsZero(), time.Since(s.life.readyAt)
	s.mu.Unlock()
	fresh := seen && (age < readyTrust || age < readyTrustOpen && s.link.agentOpen())
	switch {
	case closed:
		return ErrClosed
	case fresh:
		return nil
	}
	ch := s.life.ensureGroup.DoChan("ensure", func() (any, error) {
		ectx, done, err := s.life.startMaking(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		defer done()
		ectx, cancel := context.WithTimeout(ectx, ensureTimeout)
		defer cancel()
		if err := s.life.ensure(ectx); err != nil {
			if s.life.closing.Err() != nil {
				return nil, ErrClosed
			}
			return nil, err
		}
		s.life.ready()
		return nil, nil
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrClosed is what Ensure and Start return, instead of creating or starting the
// container, once [Sandbox.Close] was called.
var ErrClosed = errors.New("the server configuration this call ran under has ended (reloaded or stopped); call the tool again")

// startMaking counts a call that may create or start the container until done is
// called, and gives it a context that ends with Close. It fails once the Sandbox is
// closed.
func (s *lifecycle) startMaking(ctx context.Context) (_ context.Context, done func(), _ error) {
	s.sb.mu.Lock()
	defer s.sb.mu.Unlock()
	if s.closed {
		return nil, nil, ErrClosed
	}
	s.making.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	return ctx, func() { stop(); cancel(); s.making.Done() }, nil
}

// Close ends the Sandbox's part in its container's life: from then on nothing run
// through it (a call still under way, a task, a background loop) creates or starts the
// container, so a container removed after Close stays removed. It returns once the
// Ensures and Starts under way have ended. The container is left as it is.
func (s *Sandbox) Close() {
	s.mu.Lock()
	s.life.closed = true
	s.mu.Unlock()
	s.life.closeNow()
	s.life.making.Wait()
}

// ready records that the container was just seen running with our settings, and wakes
// those waiting on Ready.
func (s *lifecycle) ready() {
	s.sb.mu.Lock()
	s.readyAt = time.Now()
	ch := s.readyCh
	s.readyCh = nil
	s.sb.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// Ready returns a channel that is closed the next time an Ensure, Start or Restart
// through this Sandbox has made sure the container runs. Background work that must
// not start the container itself (the egress listener) waits on it.
func (s *Sandbox) Ready() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.life.readyCh == nil {
		s.life.readyCh = make(chan struct{})
	}
	return s.life.readyCh
}

// Upkeep marks ctx as background work: what runs under it uses the container while
// it runs and never creates, starts or repairs it (a call meets an error for which
// NotRunning is true instead).
func Upkeep(ctx context.Context) context.Context { return upkeep(ctx) }

// NotRunning reports whether err says the container is missing or stopped, as work
// under Upkeep meets it.
func NotRunning(err error) bool { return errors.Is(err, errNotRunning) }

// invalidate makes the next Ensure ask Docker again.
func (s *lifecycle) invalidate() {
	s.sb.mu.Lock()
	s.readyAt = time.Time{}
	s.sb.mu.Unlock()
}

func (s *lifecycle) ensure(ctx context.Context) error {
	name := s.cfg.Container
	if err := s.sb.saves.waitSaved(ctx); err != nil {
		return err
	}
	info, err := s.cli.InspectBox(ctx, name)
	missing := cerrdefs.IsNotFound(err)
	if err == nil && (info.State.Status == boxapi.StateRemoving || info.State.Dead) {
		// Caught while someone removes it: wait until it is gone, then make a new one.
		if err := s.waitGone(ctx); err != nil {
			return err
		}
		missing = true
	} else if err == nil {
		if why := s.outdated(info); why != "" {
			// Isolation cannot be changed on an existing container: replace it on the
			// same volume, so /sandbox and what it holds stay.
			s.log.Warn("recreating the sandbox container with the current isolation settings; running processes end, "+boxapi.WorkDir+" is kept",
				zap.String("reason", why), zap.String("old_id", info.ID), zap.String("volume", s.cfg.Volume))
			if err := s.cli.RemoveBox(ctx, name); err != nil && !cerrdefs.IsNotFound(err) {
				return fmt.Errorf("removing outdated sandbox container %s: %w", name, err)
			}
			missing = true
		}
	}
	if missing {
		err = s.create(ctx)
		if !cerrdefs.IsConflict(err) {
			return err
		}
		// Another process created it in the meantime: use theirs.
		info, err = s.cli.InspectBox(ctx, name)
	}
	if err != nil {
		return fmt.Errorf("inspecting sandbox container %s: %w", name, err)
	}
	s.noteEnv(info.Spec.Env)
	s.checkImage(ctx, info)
	host, err := s.hostFacts(ctx)
	if err != nil {
		return err
	}
	s.noteRuntime(info.Spec.Runtime, host.info)
	if err := s.applyLimits(ctx, info, host); err != nil {
		return err
	}
	err = s.start(ctx, info)
	if cerrdefs.IsNotFound(err) {
		// Removed between inspect and start: make a new one on the same volume.
		if err := s.create(ctx); err != nil && !cerrdefs.IsConflict(err) {
			return err
		}
		return nil
	}
	return err
}

// commandEnv is what commands get on top of the environment the container has from its
// image: PYTHONUNBUFFERED=1, because a command's output goes to files, where Python
// would otherwise hold it back until it ends. An image that sets PYTHONUNBUFFERED
// itself keeps its value (an exec's environment overrides the image's).
func commandEnv(imageEnv []string) []string {
	for _, kv := range imageEnv {
		if strings.HasPrefix(kv, "PYTHONUNBUFFERED=") {
			return nil
		}
	}
	return []string{"PYTHONUNBUFFERED=1"}
}

// noteEnv keeps the command environment for the container's environment env.
func (s *lifecycle) noteEnv(env []string) {
	e := commandEnv(env)
	s.sb.mu.Lock()
	s.sb.runner.cmdEnv = e
	s.sb.mu.Unlock()
}

// waitGone waits, briefly, until a container being removed is gone.
func (s *lifecycle) waitGone(ctx context.Context) error {
	for i := 0; i < 100; i++ {
		if _, err := s.cli.InspectBox(ctx, s.cfg.Container); cerrdefs.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("sandbox container %s is still being removed after 10s; try again", s.cfg.Container)
}

// Isolation of the container beyond the resource limits. NET_RAW is dropped so the
// sandbox cannot forge packets or sniff (raw and packet sockets); ping keeps working
// through unprivileged ICMP sockets, which the ping_group_range sysctl opens to every
// group inside the container's own network namespace. no-new-privileges stops setuid
// and file capabilities from raising a process's privileges.
var (
	capDrop      = []string{"NET_RAW"}
	securityOpts = []string{"no-new-privileges"}
	pingSysctl   = map[string]string{"net.ipv4.ping_group_range": "0 2147483647"}
)

// outdated says why an existing container lacks the isolation settings or the network
// of the configuration ("" when it has them).
func (s *lifecycle) outdated(info boxapi.Box) string {
	hc := info.Spec
	for _, want := range capDrop {
		if !slices.ContainsFunc(hc.CapDrop, func(c string) bool {
			return strings.EqualFold(strings.TrimPrefix(strings.ToUpper(c), "CAP_"), want)
		}) {
			return "capability " + want + " is not dropped"
		}
	}
	for _, want := range securityOpts {
		if !slices.ContainsFunc(hc.SecurityOpt, func(o string) bool { return o == want || o == want+":true" || o == want+"=true" }) {
			return "security option " + want + " is not set"
		}
	}
	if have := hc.NetworkMode; have != s.cfg.network() && !(have == "default" && s.cfg.network() == "bridge") {
		return fmt.Sprintf("network is %q, configured %q", have, s.cfg.network())
	}
	return ""
}

// builtinNetworks are Docker's own network modes, never created by Ensure.
func builtinNetwork(mode string) bool {
	switch mode {
	case "none", "bridge", "default", "host":
		return true
	}
	return strings.HasPrefix(mode, "container:")
}

// ensureNetwork creates the configured named network when it is missing: a bridge with
// inter-container traffic off, labelled as ours.
func (s *lifecycle) ensureNetwork(ctx context.Context) error {
	name := s.cfg.network()
	if _, docker := s.cli.(dockerOnly); builtinNetwork(name) || !docker {
		return nil // an engine without Docker's networks (Kubernetes: pods share the cluster's) has none to make
	}
	if _, err := dockerOf(s.cli).NetworkInspect(ctx, name, network.InspectOptions{}); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspecting sandbox network %s: %w", name, err)
	}
	opts := map[string]string{"com.docker.network.bridge.enable_icc": "false"}
	if name == DefaultNetwork {
		// A fixed interface name, so a host firewall rule can name it (see README).
		opts["com.docker.network.bridge.name"] = DefaultBridge
	}
	_, err := dockerOf(s.cli).NetworkCreate(ctx, name, network.CreateOptions{
		Driver:  "bridge",
		Options: opts,
		Labels:  map[string]string{labelManaged: "true"},
	})
	if err != nil && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("creating sandbox network %s: %w", name, err)
	}
	if err == nil {
		s.log.Info("created sandbox network (bridge, inter-container traffic off)", zap.String("network", name))
	}
	return nil
}

// create makes the volume, the network and the container and starts it.
func (s *lifecycle) create(ctx context.Context) error { return s.createFrom(ctx, s.cfg.Image, nil) }

// prepareFor checks that image is there and notes its environment, and makes the
// network and the volume a container from it needs.
func (s *lifecycle) prepareFor(ctx context.Context, image string) error {
	c := s.cfg
	img, err := s.cli.InspectImage(ctx, image)
	if err != nil {
		if cerrdefs.IsNotFound(err) && image == c.Image {
			return fmt.Errorf("%w: %s is not on this Docker host; build it first (%s)", boxapi.ErrImageMissing, c.Image, ImageBuildHint(c.Image))
		}
		return fmt.Errorf("inspecting sandbox image %s: %w", image, err)
	}
	s.noteEnv(img.Env)
	if err := s.ensureNetwork(ctx); err != nil {
		return err
	}
	// Creating an existing local volume returns it unchanged, so /sandbox survives a
	// removed container.
	if err := s.cli.CreateVolume(ctx, c.Volume, map[string]string{labelManaged: "true"}); err != nil {
		return fmt.Errorf("creating sandbox volume %s: %w", c.Volume, err)
	}
	return nil
}

// boxSpec is the container to make from image, on an engine with host's facts.
func (s *lifecycle) boxSpec(image string, host hostFacts) boxapi.BoxSpec {
	c := s.cfg
	res := s.resources(host)
	sp := boxapi.BoxSpec{
		Image:      image,
		Hostname:   "sandbox",
		User:       "root",
		WorkingDir: boxapi.WorkDir,
		// Our own main process, whatever the image would start: the image's
		// entrypoint might exit or expect a terminal.
		Entrypoint:    []string{"bash", "-c", keepAlive},
		Cmd:           []string{"mcp-sandbox"},
		Labels:        s.labels(),
		Mounts:        []boxapi.Mount{{Volume: c.Volume, Source: c.Volume, Destination: boxapi.WorkDir}},
		NetworkMode:   c.network(),
		RestartPolicy: string(container.RestartPolicyUnlessStopped),
		Init:          host.hasInit,
		Limits:        boxapi.Limits{Memory: res.Memory, MemorySwap: res.MemorySwap, NanoCPUs: res.NanoCPUs, PidsLimit: c.PidsLimit},
		CapDrop:       capDrop,
		SecurityOpt:   securityOpts,
		Sysctls:       s.sysctls(),
		Runtime:       c.Runtime,
	}
	if !s.sb.link.noBind.Load() {
		if m, ok := s.sb.link.directBind(); ok {
			sp.Mounts = append(sp.Mounts, m)
		}
	}
	return sp
}

// createFrom is create from image (the configured one or a checkpoint's); prepare,
// when set, runs on the created container before it starts, and a failure of it
// removes the container.
func (s *lifecycle) createFrom(ctx context.Context, image string, prepare func(ctx context.Context, id string) error) error {
	c := s.cfg
	if err := s.prepareFor(ctx, image); err != nil {
		return err
	}
	host, err := s.hostFacts(ctx)
	if err != nil {
		return err
	}
	if s.checkRuntime(host.info) != nil {
		// The runtime may have been registered since the engine's facts were kept.
		forgetEngineInfo(s.cli)
		if host, err = s.hostFacts(ctx); err != nil {
			return err
		}
		if err := s.checkRuntime(host.info); err != nil {
			return err
		}
	}
	sp := s.boxSpec(image, host)
	if image != c.Image {
		// A checkpoint's image carries the labels of the container it was saved from
		// (another person's, when seeding): state every one of ours.
		sp.Labels[labelPerson], sp.Labels[labelEngine] = c.Person, c.Engine
		if !c.Warm {
			sp.Labels[labelWarm] = "" // a taken warm sandbox's image carries the mark
		}
	}
	// A directory of Caddy's host (the direct channel's) that the engine may not see.
	bound := slices.ContainsFunc(sp.Mounts, func(m boxapi.Mount) bool { return m.Volume == "" })
	id, warnings, err := s.cli.CreateBox(ctx, c.Container, sp)
	if err != nil && bound && s.sb.link.bindRefused(err) {
		return s.createFrom(ctx, image, prepare)
	}
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return err
		}
		if rerr := s.runtimeRefused(err); rerr != nil {
			return rerr
		}
		return fmt.Errorf("creating sandbox container %s: %w", c.Container, err)
	}
	s.log.Info("created sandbox container",
		zap.String("id", id), zap.String("image", image), zap.String("volume", c.Volume), zap.String("runtime", c.Runtime))
	s.noteRuntime(c.Runtime, host.info)
	for _, w := range warnings {
		s.log.Warn("docker warning while creating sandbox container", zap.String("warning", w))
	}
	if prepare != nil {
		if err := prepare(ctx, id); err != nil {
			_ = s.cli.RemoveBox(context.WithoutCancel(ctx), id)
			return err
		}
	}
	if err := s.cli.StartBox(ctx, id); err != nil {
		if bound && s.sb.link.bindRefused(err) {
			// The engine cannot mount the direct channel's directory (it sees
			// another file system than Caddy): the container goes without it.
			_ = s.cli.RemoveBox(ctx, id)
			return s.createFrom(ctx, image, prepare)
		}
		if prepare != nil {
			_ = s.cli.RemoveBox(context.WithoutCancel(ctx), id)
		}
		return fmt.Errorf("starting sandbox container %s: %w", c.Container, err)
	}
	s.sb.link.agentFresh()
	s.starts.Add(1)
	if image == c.Image {
		s.setGitIdentity(ctx)
		if c.offline() {
			s.setOffline(ctx)
		}
	}
	return nil
}

// offlineScript tells apt and pip, where the image has them, not to retry: in a sandbox
// without a network every attempt fails the same way, and apt's retries with their
// growing delays made apt-get update take 7 to 15 s to fail. A file the image already
// has is left as it is.
const offlineScript = `if [ -d /etc/apt/apt.conf.d ] && [ ! -e /etc/apt/apt.conf.d/99mcp-sandbox-offline ]; then
	printf '// This sandbox has no network: fail at once instead of retrying.\nAcquire::Retries "0";\n' >/etc/apt/apt.conf.d/99mcp-sandbox-offline
fi
if [ ! -e /etc/pip.conf ]; then
	printf '# This sandbox has no network: fail at once instead of retrying.\n[global]\nretries = 0\ntimeout = 2\n' >/etc/pip.conf
fi`

// setOffline prepares a new container without a network for commands that would
// download. A failure only costs time when they fail, so it is logged, not returned.
func (s *lifecycle) setOffline(ctx context.Context) {
	// Upkeep: inside ensure, a failed exec must not start another Ensure.
	var out bytes.Buffer
	code, err := s.sb.runner.collectExec(upkeep(ctx), []string{"bash", "-c", offlineScript, "offline"}, &out, 1024)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d", code)
	}
	if err != nil {
		s.log.Warn("telling apt and pip not to retry in an offline sandbox", zap.Error(err))
	}
}

// labels are a new container's: ours, its volume, and the engine it is placed on.
func (s *lifecycle) labels() map[string]string {
	l := map[string]string{labelManaged: "true", labelVolume: s.cfg.Volume}
	if s.cfg.Engine != "" {
		l[labelEngine] = s.cfg.Engine
	}
	if s.cfg.Person != "" {
		l[labelPerson] = s.cfg.Person
	}
	if s.cfg.Warm {
		l[labelWarm] = "true"
		if s.cfg.WarmPool != "" {
			l[labelWarmPool] = s.cfg.WarmPool
		}
	}
	return l
}

// Git identity of a new container, so that `git commit` works from the start. It is
// written to the system-level /etc/gitconfig, which the person's own `git config
// --global` (or a repository's) overrides; environment variables such as
// GIT_AUTHOR_NAME would override those instead.
const (
	gitName  = "Sandbox"
	gitEmail = "sandbox@localhost"
)

// gitIdentityScript adds the identity to /etc/gitconfig unless the file already has a
// [user] section (section names are case-insensitive), which is left as it is.
const gitIdentityScript = `f=/etc/gitconfig
shopt -s nocasematch
if [ -f "$f" ]; then
	while IFS= read -r l || [ -n "$l" ]; do
		case $l in *"[user]"* | *"[user "*) exit 0 ;; esac
	done <"$f"
fi
printf '[user]
	name = %s
	email = %s
' "$1" "$2" >>"$f"`

// setGitIdentity gives a new container its git identity. A failure only costs the
// default identity, so it is logged, not returned.
func (s *lifecycle) setGitIdentity(ctx context.Context) {
	// Upkeep: inside ensure, a failed exec must not start another Ensure.
	var out bytes.Buffer
	code, err := s.sb.runner.collectExec(upkeep(ctx), []string{"bash", "-c", gitIdentityScript, "gitidentity", gitName, gitEmail}, &out, 1024)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d", code)
	}
	if err != nil {
		s.log.Warn("writing the default git identity to /etc/gitconfig", zap.Error(err))
	}
}

// sysctls are the container's sysctls: the ping range needs a network namespace of the
// container's own, which host and container: modes do not give.
func (s *lifecycle) sysctls() map[string]string {
	if n := s.cfg.network(); n == "host" || strings.HasPrefix(n, "container:") {
		return nil
	}
	return maps.Clone(pingSysctl)
}

// start brings an existing container to the running state.
func (s *lifecycle) start(ctx context.Context, info boxapi.Box) error {
	name := s.cfg.Container
	st := info.State
	switch {
	case st.Running && !st.Paused && !st.Restarting:
		return nil
	case st.Paused:
		if _, ok := saving.Load(name); ok {
			return s.sb.saves.waitSaved(ctx)
		}
		if err := dockerOf(s.cli).ContainerUnpause(ctx, name); err != nil {
			return fmt.Errorf("unpausing sandbox container %s: %w", name, err)
		}
		s.log.Info("unpaused sandbox container")
		return nil
	case st.Restarting:
		return s.waitRunning(ctx)
	}
	// It was stopped behind this Sandbox's back: an agent channel still held belongs
	// to a process that ended with it, whether or not its end was seen.
	s.sb.CloseAgent()
	if err := s.sb.saves.startContainer(ctx); err != nil {
		return fmt.Errorf("starting sandbox container %s: %w", name, err)
	}
	s.sb.link.agentFresh()
	s.log.Info("started stopped sandbox container", zap.String("id", info.ID))
	s.started()
	return nil
}

// waitRunning waits while Docker restarts the container.
func (s *lifecycle) waitRunning(ctx context.Context) error {
	name := s.cfg.Container
	deadline := time.Now().Add(restartWait)
	for {
		info, err := s.cli.InspectBox(ctx, name)
		if err != nil {
			return fmt.Errorf("waiting for sandbox container %s to restart: %w", name, err)
		}
		if info.State.Running && !info.State.Restarting {
			return nil
		}
		if !info.State.Restarting {
			return s.start(ctx, info)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for sandbox container %s to restart: still restarting after %v", name, restartWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// hostFacts are the engine properties the container's settings depend on.
type hostFacts struct {
	cpus    int  // CPUs Docker can give a container
	hasInit bool // the engine has an init binary for HostConfig.Init
	info    boxapi.EngineInfo
}

func (s *lifecycle) hostFacts(ctx context.Context) (hostFacts, error) {
	info, err := engineInfo(ctx, s.cli)
	if err != nil {
		return hostFacts{}, fmt.Errorf("asking Docker for host information: %w", err)
	}
	s.sb.mu.Lock()
	s.hostCPUs = info.CPUs
	s.sb.mu.Unlock()
	return hostFacts{cpus: info.CPUs, hasInit: info.HasInit, info: info}, nil
}

// infoTrust is how long an engine's answer to Info serves every sandbox on it. Info
// is one of the engine's slowest calls (it counts containers and images, asks each
// driver), and each Ensure past readyTrust needs its facts: fifty people's sandboxes
// asking at once made it the engine's longest queue.
const infoTrust = 30 * time.Second

// infoCache is one engine client's last Info, shared by the sandboxes on it.
type infoCache struct {
	mu    sync.Mutex
	at    time.Time
	info  boxapi.EngineInfo
	group singleflight.Group
}

// infoCaches holds an infoCache per engine, by its address (engineKey).
var infoCaches sync.Map

// engineKey is what keys an engine's shared state: its address. Every sandbox has a
// client of its own, and those of one engine share its answers and its queue. ok is
// false for a client that tells no address.
func engineKey(cli API) (key string, ok bool) {
	h := cli.DaemonHost()
	return h, h != ""
}

// infoCacheOf is the infoCache of cli's engine; false for a client that tells no
// address (nothing to keep its answers under).
func infoCacheOf(cli API) (*infoCache, bool) {
	key, ok := engineKey(cli)
	if !ok {
		return nil, false
	}
	v, _ := infoCaches.LoadOrStore(key, &infoCache{})
	return v.(*infoCache), true
}

// last is the last good answer and when it came; a zero time when none did.
func (c *infoCache) last() (time.Time, boxapi.EngineInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at, c.info
}

// engineInfo is cli's Info, asked at most once per infoTrust whatever the number of
// sandboxes (and clients) asking; concurrent callers share one request.
func engineInfo(ctx context.Context, cli API) (boxapi.EngineInfo, error) {
	c, ok := infoCacheOf(cli)
	if !ok {
		return cli.EngineInfo(ctx)
	}
	if at, info := c.last(); !at.IsZero() && time.Since(at) < infoTrust {
		return info, nil
	}
	select {
	case r := <-c.ask(ctx, cli):
		if r.Err != nil {
			return boxapi.EngineInfo{}, r.Err
		}
		return r.Val.(boxapi.EngineInfo), nil
	case <-ctx.Done():
		return boxapi.EngineInfo{}, ctx.Err()
	}
}

// ask asks cli for Info, one request for all who ask at once, and keeps a good answer.
// The request goes on when ctx ends.
func (c *infoCache) ask(ctx context.Context, cli API) <-chan singleflight.Result {
	return c.group.DoChan("info", func() (any, error) {
		info, err := cli.EngineInfo(context.WithoutCancel(ctx))
		if err == nil {
			c.mu.Lock()
			c.at, c.info = time.Now(), info
			c.mu.Unlock()
		}
		return info, err
	})
}

// engineInfoLast is engineInfo for callers that can use an answer past infoTrust (the
// host's processor count, for the queue of commands): the last answer, when there is
// one, with a new one asked in the background once it is past infoTrust. The first
// burst of commands after a quiet spell then waits on no Info, one of the engine's
// slowest calls.
func engineInfoLast(ctx context.Context, cli API) (boxapi.EngineInfo, error) {
	c, ok := infoCacheOf(cli)
	if !ok {
		return cli.EngineInfo(ctx)
	}
	at, info := c.last()
	if at.IsZero() {
		return engineInfo(ctx, cli)
	}
	if time.Since(at) >= infoTrust {
		c.ask(ctx, cli) // not waited for
	}
	return info, nil
}

// forgetEngineInfo drops what engineInfo keeps of cli's engine: the next call asks it.
func forgetEngineInfo(cli API) {
	if key, ok := engineKey(cli); ok {
		infoCaches.Delete(key)
	}
}

// CPUs is the container's CPU limit: cpus, or the engine's CPU count when that is
// smaller. known is false until the engine has been asked (when the container is
// first ensured); cpus is then the configured value.
func (s *Sandbox) CPUs() (cpus float64, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.life.hostCPUs <= 0 {
		return s.cfg.CPUs, false
	}
	return min(s.cfg.CPUs, float64(s.life.hostCPUs)), true
}

// resources are the limits the container should have on this host. Docker refuses a CPU
// limit above the host's CPU count, so the limit is clamped there.
func (s *lifecycle) resources(host hostFacts) container.Resources {
	nano := s.cfg.nanoCPUs()
	if host.cpus > 0 && nano > int64(host.cpus)*1e9 {
		nano = int64(host.cpus) * 1e9
		s.sb.mu.Lock()
		warn := !s.warnedCPUs
		s.warnedCPUs = true
		s.sb.mu.Unlock()
		if warn {
			s.log.Warn("sandbox CPU limit is above the host's CPU count; using all host CPUs",
				zap.Float64("configured_cpus", s.cfg.CPUs), zap.Int("host_cpus", host.cpus))
		}
	}
	// Swap equal to memory means no swap on top: the limit is what the sandbox gets,
	// and on cgroup v1 both must always change together.
	return container.Resources{Memory: s.cfg.Memory, MemorySwap: s.cfg.Memory, NanoCPUs: nano}
}

// applyLimits updates memory, CPU and process limits in place when they differ from the
// configuration, so that a changed limit needs no new container.
func (s *lifecycle) applyLimits(ctx context.Context, info boxapi.Box, host hostFacts) error {
	want := s.resources(host)
	have := info.Spec.Limits
	restart := container.RestartPolicyMode(info.Spec.RestartPolicy)
	keepsRestarting := restart == container.RestartPolicyUnlessStopped || restart == container.RestartPolicyAlways
	if have.Memory == want.Memory && have.MemorySwap == want.MemorySwap &&
		have.NanoCPUs == want.NanoCPUs && have.PidsLimit == s.cfg.PidsLimit && keepsRestarting {
		return nil
	}
	pids := s.cfg.PidsLimit
	upd := boxapi.BoxUpdate{Limits: &boxapi.Limits{Memory: want.Memory, MemorySwap: want.MemorySwap, NanoCPUs: want.NanoCPUs, PidsLimit: pids}}
	if !keepsRestarting {
		upd.RestartPolicy = string(container.RestartPolicyUnlessStopped)
	}
	warnings, err := s.cli.UpdateBox(ctx, s.cfg.Container, upd)
	if err != nil {
		return fmt.Errorf("updating limits of sandbox container %s: %w", s.cfg.Container, err)
	}
	for _, w := range warnings {
		s.log.Warn("docker warning while updating sandbox limits", zap.String("warning", w))
	}
	s.log.Info("updated sandbox container limits",
		zap.Int64("memory", want.Memory), zap.Int64("nano_cpus", want.NanoCPUs), zap.Int64("pids_limit", pids))
	return nil
}

// checkImage warns (once) when the container was made from another image than the
// configured one. Recreating would be the only way to apply it, and that is left to the
// operator because it ends every running process.
func (s *lifecycle) checkImage(ctx context.Context, info boxapi.Box) {
	s.sb.mu.Lock()
	warned := s.warnedImage
	// The same container found on the configured image a moment ago: an image rebuilt
	// since is told at the next check, imageRecheck later at most.
	recent := s.imageOK.id == info.ID && time.Since(s.imageOK.at) < imageRecheck
	s.sb.mu.Unlock()
	if warned || recent {
		return
	}
	var problem string
	img, err := s.cli.InspectImage(ctx, s.cfg.Image)
	switch {
	case cerrdefs.IsNotFound(err):
		problem = "configured sandbox image is not on this Docker host; the existing container keeps running on its own image"
	case err != nil:
		s.log.Debug("could not inspect sandbox image", zap.Error(err))
		return
	case img.ID == info.ImageID: // same image, whatever name it was created under
		s.sb.mu.Lock()
		s.imageOK.id, s.imageOK.at = info.ID, time.Now()
		s.sb.mu.Unlock()
		return
	case info.Spec.Image == s.cfg.Image:
		problem = "sandbox image was rebuilt since the container was created; the new image is not applied to an existing container"
	default:
		problem = "sandbox container was created from another image; the configured image is not applied to an existing container"
	}
	s.sb.mu.Lock()
	s.warnedImage = true
	s.sb.mu.Unlock()
	s.log.Warn(problem,
		zap.String("container_image", info.Spec.Image),
		zap.String("configured_image", s.cfg.Image),
		zap.String("to_recreate", fmt.Sprintf("docker rm -f %s (the volume %s keeps %s; the next command recreates the container)",
			s.cfg.Container, s.cfg.Volume, boxapi.WorkDir)))
}

// containerGone reports whether a Docker error means the container is missing or not
// running, which a full Ensure can repair.
func containerGone(err error) bool {
	return cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err)
}

type upkeepKey struct{}

// upkeep marks ctx as background upkeep (pruning old jobs, counting jobs, detecting
// tools). Upkeep uses the container when it runs but never creates, starts or repairs
// it: a container that was removed on purpose must not come back because some
// housekeeping woke up after it.
func upkeep(ctx context.Context) context.Context { return context.WithValue(ctx, upkeepKey{}, true) }

func isUpkeep(ctx context.Context) bool { return ctx.Value(upkeepKey{}) != nil }

// runningInfo inspects the container and fails unless it runs; it changes nothing.
func (s *lifecycle) runningInfo(ctx context.Context) (boxapi.Box, error) {
	info, err := s.cli.InspectBox(ctx, s.cfg.Container)
	if cerrdefs.IsNotFound(err) {
		return info, fmt.Errorf("sandbox container %s: %w", s.cfg.Container, errNotRunning)
	}
	if err != nil {
		return info, fmt.Errorf("inspecting sandbox container %s: %w", s.cfg.Container, err)
	}
	if !info.State.Running {
		return info, fmt.Errorf("sandbox container %s: %w", s.cfg.Container, errNotRunning)
	}
	return info, nil
}

// errNotRunning is what upkeep meets when the container is missing or stopped: it
// waits for the next call that needs the container to bring it back.
var errNotRunning = errors.New("not running (upkeep waits for the next command)")
