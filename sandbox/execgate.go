package sandbox

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"golang.org/x/sync/semaphore"
)

// An engine exec must not start while the container is being paused: on cgroup v1, the
// `runc init` of an exec that the freezer catches halfway stays frozen, `runc exec`
// waits on it forever, and with it the container in Docker (inspect, unpause and
// remove hang until the cgroup is thawed by hand). So the execs this process starts in
// a container and a checkpoint's pause of it exclude each other: an exec holds its
// container's gate from before it is created until its process runs, and a checkpoint
// holds all of it from before the pause until after the unpause.

// execGateAll is what a pause takes of a gate; each starting exec takes one.
const execGateAll = 1 << 30

// execGates are the gates by container name, shared by every Sandbox of the process.
var execGates sync.Map // string -> *semaphore.Weighted

func execGate(name string) *semaphore.Weighted {
	v, _ := execGates.LoadOrStore(name, semaphore.NewWeighted(execGateAll))
	return v.(*semaphore.Weighted)
}

// execStartWait bounds how long an exec's start is waited for before the gate is
// released anyway.
const execStartWait = 10 * time.Second

// processEngine is an engine that runs programs in the sandbox's terms (the
// Kubernetes engine): no exec ids to create, attach and inspect, and output that is
// never put into Docker's multiplexed format to be taken apart again.
type processEngine interface {
	StartProcess(ctx context.Context, container string, spec boxapi.ProcessSpec) (boxapi.Process, error)
}

// startEngineProc starts a program in the container through the engine (never the
// agent): the engine's own processes where it has them, else a Docker exec.
func (s *jobRunner) startEngineProc(ctx context.Context, opts container.ExecOptions) (proc, error) {
	pe, ok := s.cli.(processEngine)
	if !ok {
		id, hj, err := s.startEngineExec(ctx, opts)
		if err != nil {
			return nil, err
		}
		return newDockerProc(s.sb, id, hj), nil
	}
	name := s.cfg.Container
	if s.caps().Pause {
		// Held until the program runs: the engine's start returns once it does.
		g := execGate(name)
		if err := g.Acquire(ctx, 1); err != nil {
			return nil, fmt.Errorf("starting a program in sandbox container %s (a checkpoint holds it): %w", name, err)
		}
		defer g.Release(1)
	}
	p, err := pe.StartProcess(ctx, name, boxapi.ProcessSpec{Argv: opts.Cmd, Env: opts.Env, Dir: opts.WorkingDir, User: opts.User,
		Stdin: opts.AttachStdin, Stdout: opts.AttachStdout, Stderr: opts.AttachStderr, TTY: opts.Tty})
	if err != nil {
		return nil, fmt.Errorf("starting a program in sandbox container %s: %w", name, err)
	}
	return engineProc{p}, nil
}

// engineProc is a program an engine started in the sandbox's terms.
type engineProc struct{ boxapi.Process }

func (e engineProc) exitCode(ctx context.Context, killed bool) (int, bool) {
	ctx, cancel := context.WithTimeout(ctx, exitWait(killed))
	defer cancel()
	return e.Wait(ctx)
}

func (engineProc) LocalAddr() net.Addr { return engineAddr{} }

func (e engineProc) SetDeadline(t time.Time) error {
	if err := e.SetReadDeadline(t); err != nil {
		return err
	}
	return e.SetWriteDeadline(t)
}

type engineAddr struct{}

func (engineAddr) Network() string { return "engine-process" }
func (engineAddr) String() string  { return "engine-process" }

// startEngineExec creates an engine exec in the container and starts it, attached. The
// exec holds the container's gate until its process runs (or failed to start), waited
// for in the background: the caller reads its streams at once, and no pause of the
// container catches it starting. Its errors name the step that failed.
func (s *jobRunner) startEngineExec(ctx context.Context, opts container.ExecOptions) (string, types.HijackedResponse, error) {
	name := s.cfg.Container
	var g *semaphore.Weighted // none where the container cannot be paused
	if s.caps().Pause {
		g = execGate(name)
		if err := g.Acquire(ctx, 1); err != nil {
			return "", types.HijackedResponse{}, fmt.Errorf("starting exec in sandbox container %s (a checkpoint holds it): %w", name, err)
		}
	}
	release := func() {
		if g != nil {
			g.Release(1)
		}
	}
	resp, err := dockerOf(s.cli).ContainerExecCreate(ctx, name, opts)
	if err != nil {
		release()
		return "", types.HijackedResponse{}, fmt.Errorf("creating exec in sandbox container %s: %w", name, err)
	}
	hj, err := dockerOf(s.cli).ContainerExecAttach(ctx, resp.ID, container.ExecAttachOptions{})
	if err != nil {
		release() // not started: Docker starts an exec when it is attached
		return "", types.HijackedResponse{}, fmt.Errorf("starting exec in sandbox container %s: %w", name, err)
	}
	if g != nil {
		go func() {
			defer release()
			s.awaitExecStarted(context.WithoutCancel(ctx), resp.ID)
		}()
	}
	return resp.ID, hj, nil
}

// awaitExecStarted waits until Docker reports the exec's process (its pid), or that it
// could not start (an exit code without a pid), or execStartWait passes. Docker answers
// the attach before it runs `runc exec`.
func (s *jobRunner) awaitExecStarted(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, execStartWait)
	defer cancel()
	for wait := 2 * time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		ins, err := dockerOf(s.cli).ContainerExecInspect(ctx, id)
		if err != nil || ins.Pid != 0 || (!ins.Running && ins.ExitCode != 0) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// holdExecs takes the whole gate of container name (waiting for the execs starting in it)
// until the returned function is called.
func holdExecs(ctx context.Context, name string) (release func(), err error) {
	g := execGate(name)
	if err := g.Acquire(ctx, execGateAll); err != nil {
		return nil, err
	}
	return func() { g.Release(execGateAll) }, nil
}
