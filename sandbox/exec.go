package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

const (
	// killTimeout bounds the exec that kills a cancelled command.
	killTimeout = 30 * time.Second
	// cancelGrace is how long the result of a killed command may take to arrive.
	cancelGrace = 8 * time.Second
	// runnerGrace is how much longer than its own deadline a run exec may take before
	// Caddy gives up on it (the job runs on regardless).
	runnerGrace = time.Minute
	// liveInterval is how often running output is sampled for OnOutput.
	liveInterval = time.Second
	// liveBytes bounds one OnOutput sample per stream.
	liveBytes = 4096
	// inspectTimeout bounds the calls made after a command ended.
	inspectTimeout = 10 * time.Second
)

// Exec runs `bash -c command` as root in its own session and process group, as a job
// whose output goes to files inside the container (see JobsDir), and returns what it
// printed, cut to the output budget at line boundaries. With opts.TTY the agent's
// "pty" mode runs it under a pseudo-terminal and holds the terminal.
//
// It waits for the command to end, or for opts.Wait; a command still running then is
// returned with Running set and goes on until its timeout, in the container, whatever
// happens to the caller. When ctx is done while waiting, the command and every process
// of its group and session are killed and the result has Cancelled set; neither that nor
// a timeout is an error. Errors mean the sandbox itself failed (Docker unreachable,
// image missing, ...) or the request was refused (ErrNoCwd, ErrTooManyJobs). If the
// container turns out to be gone or stopped, Exec repairs it with Ensure and tries once
// more.
func (s *Sandbox) Exec(ctx context.Context, command string, opts boxapi.ExecOptions) (*boxapi.ExecResult, error) {
	if strings.ContainsRune(command, 0) {
		return nil, errors.New("running command: it contains a NUL byte, which no program can receive")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = s.cfg.ExecTimeout
	}
	if opts.MaxOutput <= 0 || opts.MaxOutput > s.cfg.MaxOutput {
		opts.MaxOutput = s.cfg.MaxOutput
	}
	opts.MaxOutput = max(opts.MaxOutput, minMaxOutput)
	if opts.MaxJobs <= 0 {
		opts.MaxJobs = DefaultMaxJobs
	}
	if opts.Cwd == "" {
		opts.Cwd = boxapi.WorkDir
	}
	begin := time.Now()
	if err := s.Ensure(ctx); err != nil {
		if ctx.Err() != nil {
			return &boxapi.ExecResult{ExitCode: -1, Cancelled: true}, nil
		}
		return nil, err
	}
	if opts.TTY {
		if s.link.agentSession(ctx); s.link.agentBinary() == "" {
			return nil, boxapi.ErrNoTTY
		}
		opts.Interactive = true
	}
	for attempt := 0; ; attempt++ {
		res, err := s.runner.execJob(ctx, newJobID(), command, opts, false, begin)
		if !errors.Is(err, errJobIDTaken) || attempt == 2 {
			return res, err
		}
	}
}

// execJob is Exec with the job id drawn and opts filled in; rerun says the agent went
// before the runner claimed the job's id, and the command is started again.
func (s *jobRunner) execJob(ctx context.Context, id, command string, opts boxapi.ExecOptions, rerun bool, begin time.Time) (*boxapi.ExecResult, error) {
	maxOutput := opts.MaxOutput
	// failed is a failure to start: a cancelled call is answered as cancelled.
	failed := func(err error) (*boxapi.ExecResult, error) {
		if ctx.Err() != nil {
			return &boxapi.ExecResult{ExitCode: -1, Cancelled: true}, nil
		}
		return nil, err
	}
	if err := s.reserveJob(ctx, id, opts.MaxJobs); err != nil {
		return failed(err)
	}
	if opts.OnStart != nil {
		opts.OnStart(id)
	}
	ended := false // the job is known to have ended, or never started
	defer func() {
		if ended {
			s.jobSeen(id, false)
		}
	}()
	_, head, tail := budget(maxOutput)
	j, wait := s.jobSpec(id, command, opts, head, tail)
	if err := s.sb.life.confirmRunning(ctx); err != nil {
		ended = true
		return failed(err)
	}
	// A place among the commands starting on the engine's host (admit.go), held until
	// the call is answered or for admitHold.
	release, err := admit(ctx, s.cli)
	if err != nil {
		ended = true
		return failed(err)
	}
	defer release()
	gen := s.sb.life.starts.Load()
	run, err := s.startJob(ctx, j, head+tail)
	if err != nil {
		ended = true
		return failed(err)
	}
	defer run.close()

	stopLive := func() {}
	if opts.OnOutput != nil && wait > liveInterval {
		stopLive = s.followLive(ctx, id, opts.OnOutput)
	}
	backup := time.NewTimer(wait + runnerGrace)
	defer backup.Stop()
	var readErr error
	select {
	case readErr = <-run.done:
	case <-backup.C:
		run.close()
		<-run.done
		stopLive()
		return nil, fmt.Errorf("the job runner in the sandbox did not answer within %v; the command may still be running as job %s", wait+runnerGrace, id)
	case <-opts.Yield:
		stopLive()
		return s.yieldRun(id, run, begin), nil
	case <-ctx.Done():
		stopLive()
		ended = true
		return s.cancelRun(ctx, id, run, maxOutput, begin), nil
	}
	stopLive()
	release()
	if errors.Is(readErr, agentwire.ErrLost) {
		res, err := s.followLost(ctx, id, readErr, wait, begin, maxOutput, opts.OnOutput)
		switch {
		case errors.Is(err, boxapi.ErrJobNotFound) && s.sb.life.starts.Load() != gen:
			// The container was made or started again meanwhile: the job went with
			// the one it ran in. It may have done part of its work: never run twice.
			ended = true
			return nil, fmt.Errorf("%w: the sandbox's container stopped or was replaced while it ran (job %s), so it did not finish and is not run again; /sandbox is kept, files elsewhere may be gone: check what it did, then run it again if needed", boxapi.ErrCommandLost, id)
		case errors.Is(err, boxapi.ErrJobNotFound) && !rerun:
			// No runner claimed the id: the agent went before it ran the command.
			// Start it again under the same id: a first runner that claims it late
			// makes this start answer "taken" (and is followed instead), so the
			// command never runs twice.
			s.log.Info("the agent went before the command started; starting it again", zap.String("job", id))
			run.close()
			s.jobSeen(id, false)
			return s.execJob(ctx, id, command, opts, true, begin)
		}
		return res, err
	}
	if readErr != nil {
		return nil, fmt.Errorf("reading command output: %w", readErr)
	}
	h, err := run.out.header()
	if err != nil {
		return nil, err
	}
	if err := scriptError(h, id); err != nil {
		if rerun && errors.Is(err, errJobIDTaken) {
			return s.sb.JobOutput(ctx, id, max(wait-time.Since(begin), 0), nil, maxOutput, opts.OnOutput)
		}
		ended = true
		return nil, err
	}
	res := s.result(h, id, run.out, maxOutput)
	res.Duration = time.Since(begin)
	ended = !res.Running
	return res, nil
}

// jobSpec is the runner's request for a job and how long the call waits for it.
func (s *jobRunner) jobSpec(id, command string, opts boxapi.ExecOptions, head, tail int) (jobStart, time.Duration) {
	j := jobStart{dir: JobsDir, id: id, timeout: opts.Timeout, wait: opts.Wait, interactive: opts.Interactive,
		tty: opts.TTY, cwd: opts.Cwd, head: head, tail: tail, command: command}
	wait := opts.Wait
	switch {
	case wait < 0:
		j.wait = 0
	case wait > 0 && wait < opts.Timeout:
	default:
		wait, j.wait = opts.Timeout, waitToEnd
	}
	if opts.TTY {
		j.agent = s.sb.link.agentBinary()
	}
	s.sb.mu.Lock()
	j.env = append(j.env, s.cmdEnv...)
	s.sb.mu.Unlock()
	j.env = append(j.env, s.cfg.proxyEnv(id)...)
	return j, wait
}

// yieldRun leaves the job running for the caller to follow later.
func (s *jobRunner) yieldRun(id string, run *scriptRun, begin time.Time) *boxapi.ExecResult {
	run.close()
	err := <-run.done
	if h, herr := run.out.header(); err == nil && herr == nil && (h.outSent > 0 || h.errSent > 0) {
		// The runner answered before it was closed: its delivery reaches nobody.
		s.resendNext(id)
	}
	return &boxapi.ExecResult{JobID: id, Running: true, ExitCode: -1, Duration: time.Since(begin)}
}

// cancelRun kills the job of a cancelled call and answers what it had done.
func (s *jobRunner) cancelRun(ctx context.Context, id string, run *scriptRun, maxOutput int, begin time.Time) *boxapi.ExecResult {
	// Killing is upkeep: a container that went away took the command with it, and
	// must not be brought back (the caller, or a test's cleanup, may have removed it).
	kctx, cancel := context.WithTimeout(upkeep(context.WithoutCancel(ctx)), killTimeout)
	kres, kerr := s.killJob(kctx, id, maxOutput, "cancelled")
	cancel()
	var answered *header
	select {
	case err := <-run.done:
		if h, herr := run.out.header(); err == nil && herr == nil {
			answered = &h
		}
	case <-time.After(cancelGrace):
	}
	run.close()
	if kerr != nil {
		s.log.Warn("killing cancelled command in sandbox", zap.String("job", id), zap.Error(kerr))
		kres = &boxapi.ExecResult{JobID: id, ExitCode: -1}
	}
	kres.Cancelled, kres.Killed = true, false
	kres.Duration = time.Since(begin)
	// This result reaches nobody. The runner's answer, when the command ended before
	// the kill marked it cancelled, recorded its output as delivered: the next
	// JobOutput sends that again. (Once marked, the runners record nothing.)
	if answered != nil && !answered.cancelled && (answered.outSent > 0 || answered.errSent > 0) {
		s.resendNext(id)
	}
	return kres
}

// followLost follows a job whose agent went (the command may have killed it): the job
// lives in its files, and a new agent follows it for what is left of the wait. The new
// agent may break too (a program in the agent's place): each try starts another,
// until the sandbox falls back to Docker execs.
func (s *jobRunner) followLost(ctx context.Context, id string, lost error, wait time.Duration, begin time.Time, maxOutput int, onOutput func(boxapi.Stream, []byte)) (*boxapi.ExecResult, error) {
	s.log.Info("the agent's channel ended during a command; following its job through a new one", zap.String("job", id), zap.Error(lost))
	var res *boxapi.ExecResult
	err := lost
	for try := 0; errors.Is(err, agentwire.ErrLost) && try < agentMaxBroken; try++ {
		res, err = s.jobOutput(ctx, id, max(wait-time.Since(begin), 0), nil, maxOutput, onOutput, true)
	}
	return res, err
}

// followLive samples the job's output not delivered yet every liveInterval for
// onOutput, until the returned stop is called. Each sample is one short exec that
// reads the files.
func (s *jobRunner) followLive(ctx context.Context, id string, onOutput func(boxapi.Stream, []byte)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		outOff, errOff := int64(-1), int64(-1) // -1: from what was delivered
		// The first sample comes early, so a command that prints at once shows it.
		t := time.NewTimer(liveInterval / 4)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				t.Reset(liveInterval)
			}
			from := []string{"-", "-"}
			if outOff >= 0 {
				from = []string{strconv.FormatInt(outOff, 10), strconv.FormatInt(errOff, 10)}
			}
			h, o, err := s.runScript(ctx, []string{"peek", JobsDir, id, from[0], from[1], strconv.Itoa(liveBytes)}, nil, nil, 2*liveBytes)
			if err != nil || h.state != "peek" {
				continue
			}
			os, es := h.outSize, h.errSize
			if ctx.Err() != nil {
				return
			}
			if len(o.out) > 0 {
				onOutput(boxapi.Stdout, o.out)
			}
			if len(o.err) > 0 {
				onOutput(boxapi.Stderr, o.err)
			}
			outOff, errOff = max(outOff, os), max(errOff, es)
		}
	}()
	return func() {
		cancel()
		<-finished
	}
}

// run executes an internal command (not a job) with a timeout, passing its output to
// onOutput and keeping maxOutput bytes of each stream. On timeout or cancellation the
// exec is abandoned and Docker kills its process.
func (s *jobRunner) run(ctx context.Context, command string, timeout time.Duration, maxOutput int, onOutput func(boxapi.Stream, []byte)) (*boxapi.ExecResult, error) {
	res := &boxapi.ExecResult{ExitCode: -1}
	begin := time.Now()
	if err := s.sb.Ensure(ctx); err != nil {
		if ctx.Err() != nil {
			res.Cancelled = true
			return res, nil
		}
		return nil, err
	}
	p, err := s.startExec(ctx, container.ExecOptions{
		User: "root", WorkingDir: boxapi.WorkDir, AttachStdout: true, AttachStderr: true,
		Cmd: []string{"bash", "-c", command},
	})
	if err != nil {
		if ctx.Err() != nil {
			res.Cancelled = true
			return res, nil
		}
		return nil, err
	}
	stdout, stderr := newBoundedOutput(maxOutput), newBoundedOutput(maxOutput)
	sink := func(st boxapi.Stream, out *boundedOutput) func([]byte) {
		return func(p []byte) {
			_, _ = out.Write(p)
			if onOutput != nil {
				onOutput(st, p)
			}
		}
	}
	done := make(chan error, 1)
	go func() { done <- drain(p, sink(boxapi.Stdout, stdout), sink(boxapi.Stderr, stderr)) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var readErr error
	select {
	case readErr = <-done:
	case <-timer.C:
		res.TimedOut = true
	case <-ctx.Done():
		res.Cancelled = true
	}
	p.Close()
	if res.TimedOut || res.Cancelled {
		<-done
	} else {
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), inspectTimeout)
		defer cancel()
		if code, ok := p.exitCode(ictx, false); ok {
			res.ExitCode = code
		}
	}
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	res.StdoutBytes, res.StderrBytes = stdout.Total(), stderr.Total()
	res.StdoutTruncated, res.StderrTruncated = stdout.Truncated(), stderr.Truncated()
	res.Duration = time.Since(begin)
	if readErr != nil {
		return res, fmt.Errorf("reading command output: %w", readErr)
	}
	return res, nil
}

// startExec starts a program in the container, on the agent when it runs, else as a
// Docker exec, repairing the container once if it is gone.
func (s *jobRunner) startExec(ctx context.Context, opts container.ExecOptions) (proc, error) {
	for attempt := 0; ; attempt++ {
		p, err := s.tryStartExec(ctx, opts)
		if err == nil || attempt > 0 || !containerGone(err) || ctx.Err() != nil || isUpkeep(ctx) {
			return p, err
		}
		s.log.Info("sandbox container is gone or stopped; repairing it", zap.Error(err))
		s.sb.life.invalidate()
		if err := s.sb.Ensure(ctx); err != nil {
			return nil, err
		}
	}
}

func (s *jobRunner) tryStartExec(ctx context.Context, opts container.ExecOptions) (proc, error) {
	if sess := s.sb.link.agentSession(ctx); sess != nil {
		if p, err := s.sb.link.agentExec(sess, opts); err == nil {
			return p, nil
		}
		// The channel ended under this call: it takes a Docker exec; the next starts a
		// new agent.
	}
	return s.startEngineProc(ctx, opts)
}

// newExecID returns a random id naming one exec inside the container.
func newExecID() string { return randomHex(12) }

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
