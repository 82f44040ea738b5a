package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

// Status is what an operator wants to know of the sandbox container at a glance.
type Status struct {
	Container string // configured container name
	ID        string // Docker's container id; empty when the container does not exist
	Exists    bool
	// State is Docker's state word: created, running, paused, restarting, exited,
	// dead; "missing" when the container does not exist (the next command creates it).
	State        string
	Image        string // image the container was created from (its name)
	CreatedAt    time.Time
	StartedAt    time.Time // zero when never started
	RestartCount int       // restarts Docker made on its own (restart policy)
	Volume       string    // the named volume mounted at WorkDir
	// Node is the cluster node the container runs on, when its engine says
	// (a Kubernetes engine's pod); "" on Docker.
	Node string
	// Runtime is the engine's container runtime it runs under (runc, runsc, ...);
	// "" when the engine names none (its default).
	Runtime string

	// Live use, when running. CPU is in CPUs (1.0 = one core busy for the whole sample).
	CPU         float64
	CPULimit    float64 // configured CPU limit
	Memory      int64   // bytes in use, page cache that can be dropped left out
	MemoryLimit int64
	PIDs        int64
	PIDsLimit   int64
	// DiskUsed is the space used under WorkDir (on the volume), -1 when unknown.
	DiskUsed int64
	// NoUsage: the engine gives no samples of CPU, memory and PIDs (a Kubernetes
	// engine), so CPU, Memory and PIDs are zero for want of a measure, not idle.
	NoUsage bool
}

// validNode is a DNS-1123 subdomain: a node's name.
var validNode = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// Sampling facts of [Sandbox.Status].
const (
	// cpuSample is the time CPU use is measured over.
	cpuSample = 300 * time.Millisecond
	// duTimeout bounds the disk-usage walk; a huge volume gives "unknown" rather than
	// a hanging page.
	duTimeout = 20 * time.Second
)

// Status inspects the container and, when it runs, samples its CPU, memory, PIDs and
// the disk space used under WorkDir. It never creates or starts the container: a
// missing container is reported as State "missing".
func (s *Sandbox) Status(ctx context.Context) (Status, error) {
	st := Status{
		Container: s.cfg.Container, Volume: s.cfg.Volume, State: "missing",
		CPULimit: s.cfg.CPUs, MemoryLimit: s.cfg.Memory, PIDsLimit: s.cfg.PidsLimit, DiskUsed: -1,
	}
	info, err := s.cli.InspectBox(ctx, s.cfg.Container)
	if cerrdefs.IsNotFound(err) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("inspecting sandbox container %s: %w", s.cfg.Container, err)
	}
	st.Exists, st.ID, st.RestartCount = true, info.ID, info.RestartCount
	st.Image, st.CreatedAt = info.Spec.Image, info.Created
	if n := info.Node; validNode.MatchString(n) {
		st.Node = n // only a DNS name (Kubernetes' node names are)
	}
	st.State, st.StartedAt = info.State.Status, info.State.StartedAt
	st.Runtime = info.Spec.Runtime
	if n := info.Spec.Limits.NanoCPUs; n > 0 {
		st.CPULimit = float64(n) / 1e9
	}
	if m := info.Spec.Limits.Memory; m > 0 {
		st.MemoryLimit = m
	}
	if p := info.Spec.Limits.PidsLimit; p > 0 {
		st.PIDsLimit = p
	}
	if st.State != "running" {
		return st, nil
	}

	// The disk walk runs while the engine samples the CPU.
	du := make(chan int64, 1)
	go func() { du <- s.life.diskUsed(ctx) }()
	u, err := s.cli.BoxUsage(ctx, s.cfg.Container, cpuSample)
	if cerrdefs.IsNotImplemented(err) {
		st.NoUsage = true
		st.DiskUsed = <-du
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("reading the usage of sandbox container %s: %w", s.cfg.Container, err)
	}
	st.CPU = max(u.CPU, 0)
	st.Memory = u.Memory
	if u.MemoryLimit > 0 && (st.MemoryLimit == 0 || u.MemoryLimit < st.MemoryLimit) {
		st.MemoryLimit = u.MemoryLimit
	}
	st.PIDs = u.PIDs
	if l := u.PIDsLimit; l > 0 && l < 1<<40 {
		st.PIDsLimit = l
	}
	st.DiskUsed = <-du
	return st, nil
}

// diskUsed runs `du -sxk` on WorkDir inside the container (never on host paths) and
// returns bytes, or -1 when it cannot tell.
func (s *lifecycle) diskUsed(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, duTimeout)
	defer cancel()
	out, err := s.internalOutput(ctx, []string{"du", "-sxk", boxapi.WorkDir})
	if err != nil {
		s.log.Debug("measuring disk use of the sandbox", zap.Error(err))
		return -1
	}
	return parseDiskUsage(out)
}

// parseDiskUsage reads the output of `du -sk`: a number of KiB, whitespace, the path.
// It returns bytes, or -1 for anything else (18 digits at most, so the sum cannot
// overflow), and allocates nothing whatever the output.
func parseDiskUsage(out string) int64 {
	end := strings.IndexAny(out[:min(len(out), 19)], " \t\n")
	if end < 1 {
		return -1
	}
	var kb int64
	for _, c := range []byte(out[:end]) {
		if c < '0' || c > '9' {
			return -1
		}
		kb = kb*10 + int64(c-'0')
	}
	if kb > math.MaxInt64>>10 {
		return -1
	}
	return kb << 10
}

// internalOutput runs a short internal command and returns its stdout (at most 64 KiB).
// Unlike Exec it never repairs the container: it only looks.
func (s *lifecycle) internalOutput(ctx context.Context, cmd []string) (string, error) {
	var out bytes.Buffer
	code, err := s.sb.runner.collectExec(upkeep(ctx), cmd, &out, 64<<10)
	if err != nil {
		return "", err
	}
	if code != 0 && out.Len() == 0 {
		// du exits 1 when a file vanished during the walk; its total is still good.
		return "", fmt.Errorf("%s exited with %d", cmd[0], code)
	}
	return out.String(), nil
}

// restartStopTimeout is how long Restart and Recreate let processes end on SIGTERM.
const restartStopTimeout = 10 * time.Second

// Restart restarts the container: every process in it ends, /sandbox and everything
// else written to the container's own filesystem (installed packages) stay. A missing
// container is created, as the next command would.
func (s *Sandbox) Restart(ctx context.Context) error {
	if err := s.saves.waitSaved(ctx); err != nil { // as Stop
		return err
	}
	defer s.life.invalidate()
	end := s.link.beginStop() // as Stop: no agent starts in the container going down
	err := s.cli.RestartBox(ctx, s.cfg.Container, restartStopTimeout)
	if err == nil {
		s.link.agentFresh()
	}
	end()
	if cerrdefs.IsNotFound(err) {
		s.life.invalidate()
		return s.Ensure(ctx)
	}
	if err != nil {
		return fmt.Errorf("restarting sandbox container %s: %w", s.cfg.Container, err)
	}
	if saved, _ := s.Kept(); saved {
		// A restart ends the processes by intent: their save goes.
		s.saves.dropKept(ctx, "")
		s.saves.keepRestarting(ctx)
	}
	s.life.ready() // wakes Ready's waiters; the deferred invalidate still makes the next Ensure look
	s.log.Info("restarted sandbox container")
	return nil
}

// Recreate removes the container and creates it again from the configured image with
// the configured limits, keeping the volume: /sandbox survives, while processes,
// installed packages and anything else outside /sandbox are gone.
func (s *Sandbox) Recreate(ctx context.Context) error {
	if err := s.saves.waitSaved(ctx); err != nil { // as Stop
		return err
	}
	name := s.cfg.Container
	end := s.link.beginStop() // as Stop; the new container gets its agent
	defer end()
	err := s.cli.StopBox(ctx, name, restartStopTimeout)
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("stopping sandbox container %s: %w", name, err)
	}
	// The named volume at WorkDir stays.
	err = s.cli.RemoveBox(ctx, name)
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("removing sandbox container %s: %w", name, err)
	}
	end()
	s.life.invalidate()
	s.mu.Lock()
	s.life.warnedImage = false
	s.mu.Unlock()
	if err := s.Ensure(ctx); err != nil {
		return fmt.Errorf("recreating sandbox container %s: %w", name, err)
	}
	s.log.Info("recreated sandbox container", zap.String("image", s.cfg.Image), zap.String("volume", s.cfg.Volume))
	return nil
}
