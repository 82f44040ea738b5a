package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/checkpoint"
	"github.com/docker/docker/api/types/container"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

// Processes kept across a stop (Config.KeepProcesses): the stop saves the running
// container's memory and processes as a Docker checkpoint of the container (the
// engine's `docker checkpoint create --leave-running=false`), which leaves it exited
// and its memory given back; the next start is `docker start --checkpoint`, and every
// process goes on where it was: the same pids, open files, loopback listeners, and the
// jobs and their runners. The agent is not among them: its channel to Caddy cannot be
// saved, so the stop ends it first and the next call starts a new one, as after any
// start. The checkpoint is deleted once restored, or when it cannot be, and then the
// container starts without it (processes ended, files kept).

// keptCheckpoint names the checkpoint a stop saves the processes in: one per container.
const keptCheckpoint = "mcp-sandbox-stopped"

// memoryEngine is an engine that can save a container's memory: Docker's checkpoint
// calls (experimental on the engine). The Kubernetes engine is not one.
type memoryEngine interface {
	CheckpointCreate(ctx context.Context, container string, options checkpoint.CreateOptions) error
	CheckpointDelete(ctx context.Context, container string, options checkpoint.DeleteOptions) error
	CheckpointList(ctx context.Context, container string, options checkpoint.ListOptions) ([]checkpoint.Summary, error)
	// ContainerStart with a CheckpointID starts the container from that save.
	ContainerStart(ctx context.Context, container string, options container.StartOptions) error
}

// noKeep is why this engine and runtime cannot keep processes across a stop, "" when
// they can.
func noKeep(r runtimeFacts, engine API, experimental bool) string {
	switch _, ok := engine.(memoryEngine); {
	case !ok:
		return "the engine cannot save a container's memory (a Kubernetes engine cannot)"
	case !r.gvisor:
		return fmt.Sprintf("the runtime %s cannot save a container's memory; use gVisor's runsc (`runtime runsc`, docs/security.md)", r.name)
	case !experimental:
		return "the Docker engine runs without experimental features, which docker checkpoint needs: set \"experimental\": true in its daemon.json and restart dockerd"
	}
	return ""
}

// keepStatus is whether a stop keeps the sandbox's processes, and if it does not
// although keep_processes is on, why.
func (s *saveStore) keepStatus(ctx context.Context) (bool, string) {
	if !s.cfg.KeepProcesses {
		return false, ""
	}
	host, err := s.cli.EngineInfo(ctx)
	if err != nil {
		return false, fmt.Sprintf("the engine did not say what it can do: %v", err)
	}
	why := noKeep(factsOf(host, s.sb.life.runtimeNow().name), s.cli, host.Experimental)
	s.sb.mu.Lock()
	s.keepOff = why
	s.sb.mu.Unlock()
	return why == "", why
}

// KeepsProcesses tells whether a stop keeps the sandbox's running processes (as last
// seen), and, when keep_processes is on but it cannot, why.
func (s *Sandbox) KeepsProcesses() (bool, string) {
	if !s.cfg.KeepProcesses {
		return false, ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves.keepOff == "", s.saves.keepOff
}

// saveProcesses, under keep_processes, saves the running container's processes and
// memory and leaves it exited. It reports whether it did; when it did not, the caller
// stops the container as without keep_processes (its processes end). A save that
// failed leaves no checkpoint behind, and the next call is told.
func (s *saveStore) saveProcesses(ctx context.Context, why string) bool {
	ok, off := s.keepStatus(ctx)
	if !ok {
		if off != "" && s.sb.life.firstTime(&s.warnedKeep, off) {
			s.log.Warn("keep_processes is on, but this sandbox's stops end its processes", zap.String("reason", off))
		}
		return false
	}
	if info, err := s.cli.InspectBox(ctx, s.cfg.Container); err != nil || !info.State.Running || info.State.Paused {
		return false // nothing runs to save (or it cannot be saved now): a plain stop
	}
	me := s.cli.(memoryEngine)
	mem := s.memoryInUse(ctx)
	begin := time.Now()
	// The container's exit at the save is no stop to the engine: under its restart
	// policy (unless-stopped) it would start it again at once, without the save. Off
	// until the save is restored (applyLimits puts it back at any Ensure too).
	err := s.restartPolicy(ctx, container.RestartPolicyDisabled)
	if err == nil {
		// A save left behind (the container was restarted without it since) goes.
		s.dropKept(ctx, "")
		s.awaitExecs(ctx)
		err = me.CheckpointCreate(ctx, s.cfg.Container, checkpoint.CreateOptions{CheckpointID: keptCheckpoint, Exit: true})
	}
	if err == nil {
		s.awaitExited(ctx)
	}
	if err != nil {
		s.dropKept(context.WithoutCancel(ctx), "the save failed")
		s.keepRestarting(context.WithoutCancel(ctx))
		s.log.Warn("saving the sandbox's running processes failed; stopping it without them (they end, files are kept)",
			zap.String("by", why), zap.Error(err))
		s.noteLost(fmt.Sprintf("The sandbox was stopped (%s) without its running processes, which could not be saved (%s): they ended; files are kept.", stopCause(why), clipErr(err)))
		return false
	}
	s.sb.mu.Lock()
	s.keptBytes, s.kept = mem, true
	s.sb.mu.Unlock()
	s.log.Info("saved the sandbox's running processes and memory, and stopped it",
		zap.String("by", why), zap.Duration("took", time.Since(begin)), zap.Int64("memory_bytes", mem))
	return true
}

// restoreProcesses starts a container whose processes a stop saved, from that save.
// It reports whether it started the container (or tried to: err is then why not). A
// save that cannot be restored is deleted, the container started without it, and the
// next call told; so is a save this Sandbox made that is gone.
func (s *saveStore) restoreProcesses(ctx context.Context) (bool, error) {
	me, ok := s.cli.(memoryEngine)
	if !ok || !s.sb.life.runtimeNow().gvisor && !s.cfg.KeepProcesses {
		return false, nil
	}
	s.sb.mu.Lock()
	saved := s.kept
	s.sb.mu.Unlock()
	list, err := me.CheckpointList(ctx, s.cfg.Container, checkpoint.ListOptions{})
	if err != nil || !slices.ContainsFunc(list, func(c checkpoint.Summary) bool { return c.Name == keptCheckpoint }) {
		if !saved || err != nil {
			return false, nil
		}
		s.sb.mu.Lock()
		s.kept, s.keptBytes = false, 0
		s.sb.mu.Unlock()
		s.log.Warn("the sandbox's processes saved at its stop are gone from the engine; starting it without them")
		s.noteLost("The sandbox's processes saved at its last stop are gone (deleted from the engine): they ended; files are kept.")
		return true, s.startPlain(ctx)
	}
	// The engine answers a start of a running container with success (304), its
	// processes untouched: one started without the save (by hand, or by the engine)
	// must not pass for a restore.
	if info, err := s.cli.InspectBox(ctx, s.cfg.Container); err == nil && info.State.Running {
		s.startedWithout(ctx)
		return true, nil
	}
	begin := time.Now()
	err = me.ContainerStart(ctx, s.cfg.Container, container.StartOptions{CheckpointID: keptCheckpoint})
	if err == nil && s.startedBefore(ctx, begin) {
		s.startedWithout(ctx)
		return true, nil
	}
	if err == nil {
		s.keepRestarting(ctx)
		s.dropKept(context.WithoutCancel(ctx), "")
		s.log.Info("restored the sandbox's running processes", zap.Duration("took", time.Since(begin)))
		return true, nil
	}
	if ctx.Err() != nil {
		return true, err
	}
	s.log.Warn("the sandbox's saved processes could not be restored; starting it without them (files are kept)", zap.Error(err))
	s.dropKept(context.WithoutCancel(ctx), "it could not be restored")
	s.noteLost(fmt.Sprintf("The sandbox's processes saved at its last stop could not be restored (%s): they ended; files are kept.", clipErr(err)))
	return true, s.startPlain(ctx)
}

// startedWithout drops the save of a container that was started without it (its
// processes ended then) and tells the next call.
func (s *saveStore) startedWithout(ctx context.Context) {
	s.keepRestarting(ctx)
	s.dropKept(context.WithoutCancel(ctx), "the container was started without it")
	s.log.Warn("the sandbox was started without the processes its stop saved (by hand or by the engine); they ended, files are kept")
	s.noteLost("The sandbox's processes saved at its last stop could not be restored (the container was started without them, by hand or by the engine): they ended; files are kept.")
}

// startedBefore tells whether the running container started before t: a start from
// t on found it running already.
func (s *saveStore) startedBefore(ctx context.Context, t time.Time) bool {
	info, err := s.cli.InspectBox(ctx, s.cfg.Container)
	return err == nil && !info.State.StartedAt.IsZero() && info.State.StartedAt.Before(t)
}

// startPlain starts the container without a save, its restart policy set back.
func (s *saveStore) startPlain(ctx context.Context) error {
	if err := s.cli.StartBox(ctx, s.cfg.Container); err != nil {
		return err
	}
	s.keepRestarting(ctx)
	return nil
}

// keepRestarting sets back the restart policy a save turned off.
func (s *saveStore) keepRestarting(ctx context.Context) {
	if err := s.restartPolicy(ctx, container.RestartPolicyUnlessStopped); err != nil {
		s.log.Warn("the sandbox's restart policy could not be set back (the next Ensure sets it)", zap.Error(err))
	}
}

// startContainer starts the stopped container: from the processes its stop saved,
// when there are, else as it is.
func (s *saveStore) startContainer(ctx context.Context) error {
	if kept, err := s.restoreProcesses(ctx); kept {
		return err
	}
	return s.cli.StartBox(ctx, s.cfg.Container)
}

// execsGrace bounds how long a save waits for the container's execs to end;
// execReapGrace is how long it waits after, for the engine to delete their processes.
const (
	execsGrace    = 5 * time.Second
	execReapGrace = time.Second
)

// awaitExecs waits, up to execsGrace, until no exec runs in the container: the agent's
// ends once its channel is closed (the stop did), and gVisor saves no container with an
// exec under way. One still running then makes the save fail (the stop goes on as a
// plain one).
func (s *saveStore) awaitExecs(ctx context.Context) {
	deadline := time.Now().Add(execsGrace)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		info, err := s.cli.InspectBox(ctx, s.cfg.Container)
		if err != nil {
			return
		}
		running := 0
		for _, id := range info.ExecIDs {
			if x, err := dockerOf(s.cli).ContainerExecInspect(ctx, id); err == nil && x.Running {
				running++
			}
		}
		if running == 0 {
			// The engine deletes an ended exec's process in the background, after
			// saying it no longer runs; a save under way then breaks the container's
			// runtime shim (seen on Docker 20.10 with runsc). Give it that time.
			time.Sleep(execReapGrace)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitExited waits, up to 10 s, until the engine sees the container exited: Docker
// answers the save before it has handled the container's exit, and a start asked for
// meanwhile finds it "running" and does nothing (its answer is success all the same).
func (s *saveStore) awaitExited(ctx context.Context) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		info, err := s.cli.InspectBox(ctx, s.cfg.Container)
		if err != nil || !info.State.Running {
			return
		}
	}
	s.log.Warn("the engine still sees the sandbox running 10 s after saving its processes")
}

// restartPolicy sets the container's restart policy.
// The engine passes an update to the runtime too, and runsc refuses one for a
// container it has not yet marked running after a restore ("cannot update a stopped
// container"): that is tried again for up to 3 s.
func (s *saveStore) restartPolicy(ctx context.Context, p container.RestartPolicyMode) error {
	var err error
	for range 15 {
		_, err = s.cli.UpdateBox(ctx, s.cfg.Container, boxapi.BoxUpdate{RestartPolicy: string(p)})
		if err == nil || !strings.Contains(err.Error(), "stopped container") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	return err
}

// dropKept deletes the saved processes; why, when not "", is logged with a failure.
func (s *saveStore) dropKept(ctx context.Context, why string) {
	s.sb.mu.Lock()
	s.keptBytes, s.kept = 0, false
	s.sb.mu.Unlock()
	me, ok := s.cli.(memoryEngine)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := me.CheckpointDelete(ctx, s.cfg.Container, checkpoint.DeleteOptions{CheckpointID: keptCheckpoint})
	// None there is what a failed save leaves: the engine says "does not exist".
	if err != nil && why != "" && !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "does not exist") {
		s.log.Warn("deleting the sandbox's saved processes failed", zap.String("why", why), zap.Error(err))
	}
}

// Kept reports whether a stop of this Sandbox saved the processes and they wait for
// the next start, and about their size (the memory the container used when saved;
// 0 when the engine did not say).
func (s *Sandbox) Kept() (bool, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves.kept, s.saves.keptBytes
}

// memoryInUse is the memory the container uses now, by the engine's figures, 0 when
// not known: about the size of a save of its processes.
func (s *saveStore) memoryInUse(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u, err := s.cli.BoxUsage(ctx, s.cfg.Container, 0)
	if err != nil {
		return 0
	}
	return u.Memory + u.MemoryCache
}

// noteLost keeps, for the next command's result, what a stop or start lost.
func (s *saveStore) noteLost(msg string) {
	s.sb.mu.Lock()
	s.lostNote = msg
	s.sb.mu.Unlock()
}

// TakeNote returns, once, what the sandbox's last stop or start lost that the model
// should know of ("" when nothing).
func (s *Sandbox) TakeNote() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.saves.lostNote
	s.saves.lostNote = ""
	return n
}

// stopCause says who or what stopped the sandbox, from Stop's why.
func stopCause(why string) string {
	switch why {
	case "idle_stop":
		return "unused for a while"
	case "operator":
		return "by the operator"
	}
	return why
}

// clipErr is err's text, at most 200 bytes, for a note to the model.
func clipErr(err error) string {
	m := err.Error()
	if len(m) > 200 {
		m = m[:200] + "..."
	}
	return m
}
