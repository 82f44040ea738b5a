package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap"
)

// Stream names one of a command's output streams.
type Stream int

// The output streams of a command.
const (
	Stdout Stream = 1
	Stderr Stream = 2
)

// String returns "stdout" or "stderr".
func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return fmt.Sprintf("stream(%d)", int(s))
}

// ExecOptions tune one [Sandbox.Exec]. The zero value uses the configured defaults.
type ExecOptions struct {
	// Timeout after which the command's process group is killed; 0 means
	// Config.ExecTimeout.
	Timeout time.Duration
	// OnOutput, when set, receives every chunk of output as it arrives, from the
	// goroutine reading the stream (calls never overlap). It must not retain chunk.
	OnOutput func(stream Stream, chunk []byte)
}

// ExecResult is what a command did.
type ExecResult struct {
	// Stdout and Stderr are valid UTF-8. When a stream was longer than
	// Config.MaxOutput, its middle is replaced by a line saying how many bytes were
	// omitted.
	Stdout, Stderr string
	// ExitCode is the command's exit status. After a timeout or cancellation it is
	// what Docker reports once the group is killed (137 for SIGKILL), or -1 when
	// that is unknown.
	ExitCode int
	// TimedOut and Cancelled say why the command was killed, if it was.
	TimedOut, Cancelled bool
	// StdoutBytes and StderrBytes count every byte each stream produced.
	StdoutBytes, StderrBytes int64
	// StdoutTruncated and StderrTruncated say whether the middle of a stream was cut.
	StdoutTruncated, StderrTruncated bool
	// Duration is the time from the start of the command to its result.
	Duration time.Duration
}

const (
	// execEnv carries "<exec id>:<process group id>" into every process a command
	// starts, so that its process group can be found and killed from a second exec
	// even after the command's first process has exited.
	execEnv = "MCP_SANDBOX_EXEC"
	// killTimeout bounds the exec that kills a timed-out command.
	killTimeout = 30 * time.Second
	// drainGrace is how long output may still arrive after the kill; a detached
	// process that kept the stream open must not hold up the result longer.
	drainGrace = 2 * time.Second
	// inspectTimeout bounds the calls made after a command ended.
	inspectTimeout = 10 * time.Second
)

// execWrapper exports the marker and then replaces itself with the user's command, so the
// command runs as a plain `bash -c` in a process that leads its own process group.
// Arguments: $0 exec id, $1 command.
const execWrapper = `export ` + execEnv + `="$0:$$"; exec bash -c "$1"`

// killScript kills the process group of the exec whose id is $1. The group id is read
// from the environment of any process still carrying the marker, so leftovers of a
// command whose first process already exited are found too. Processes the command
// detached with setsid live in another group and survive. Only bash builtins are used on
// the first try: a command may have used up the process limit.
const killScript = `id=$1 pg=
for try in 1 2 3 4 5 6 7 8 9 10; do
	for e in /proc/[0-9]*/environ; do
		while IFS= read -r -d '' kv; do
			if [[ $kv == "` + execEnv + `=$id:"* ]]; then pg=${kv##*:}; break 3; fi
		done <"$e"
	done 2>/dev/null
	sleep 0.1
done
[ -n "$pg" ] || exit 0
kill -KILL -- "-$pg" 2>/dev/null
kill -KILL -- "-$pg" 2>/dev/null
exit 0`

// Exec runs `bash -c command` as root in WorkDir, in a fresh process with empty stdin.
//
// Output is kept up to Config.MaxOutput bytes per stream (the first and last halves) and
// passed live to opts.OnOutput. On timeout or when ctx is done, the command's whole
// process group is killed inside the container and the output so far is returned with
// TimedOut or Cancelled set; neither is an error. Errors mean the sandbox itself failed
// (Docker unreachable, image missing, ...); when the output stream breaks, the partial
// result comes back with the error. If the container turns out to be gone or stopped,
// Exec repairs it with Ensure and tries once more.
//
// The command's processes see MCP_SANDBOX_EXEC=<exec id>:<process group id> in their
// environment; that is how the group is found when it has to be killed.
func (s *Sandbox) Exec(ctx context.Context, command string, opts ExecOptions) (*ExecResult, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = s.cfg.ExecTimeout
	}
	return s.run(ctx, command, timeout, s.cfg.MaxOutput, opts.OnOutput)
}

func (s *Sandbox) run(ctx context.Context, command string, timeout time.Duration, maxOutput int, onOutput func(Stream, []byte)) (*ExecResult, error) {
	if strings.ContainsRune(command, 0) {
		return nil, errors.New("running command: it contains a NUL byte, which no program can receive as an argument")
	}
	res := &ExecResult{ExitCode: -1}
	begin := time.Now()
	if err := s.Ensure(ctx); err != nil {
		if ctx.Err() != nil {
			res.Cancelled = true
			return res, nil
		}
		return nil, err
	}
	id := newExecID()
	execID, hj, err := s.startExec(ctx, container.ExecOptions{
		User:         "root",
		WorkingDir:   WorkDir,
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          []string{"bash", "-c", execWrapper, id, command},
	})
	if err != nil {
		if ctx.Err() != nil {
			res.Cancelled = true
			return res, nil
		}
		return nil, err
	}

	stdout, stderr := newBoundedOutput(maxOutput), newBoundedOutput(maxOutput)
	sink := func(st Stream, out *boundedOutput) func([]byte) {
		return func(p []byte) {
			out.Write(p)
			if onOutput != nil {
				onOutput(st, p)
			}
		}
	}
	done := make(chan error, 1)
	go func() { done <- demux(hj.Reader, sink(Stdout, stdout), sink(Stderr, stderr)) }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var readErr error
	finished := false
	select {
	case readErr = <-done:
		finished = true
	case <-timer.C:
		res.TimedOut = true
	case <-ctx.Done():
		res.Cancelled = true
	}
	if !finished {
		s.killGroup(context.WithoutCancel(ctx), id)
		select {
		case <-done:
			finished = true
		case <-time.After(drainGrace):
		}
	}
	hj.Close()
	if !finished {
		<-done // the closed connection ends the read
	}

	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), inspectTimeout)
	defer cancel()
	killed := res.TimedOut || res.Cancelled
	if code, ok := s.exitCode(ictx, execID, killed); ok {
		res.ExitCode = code
	}
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	res.StdoutBytes, res.StderrBytes = stdout.Total(), stderr.Total()
	res.StdoutTruncated, res.StderrTruncated = stdout.Truncated(), stderr.Truncated()
	res.Duration = time.Since(begin)
	if readErr != nil && !killed {
		return res, fmt.Errorf("reading command output: %w", readErr)
	}
	return res, nil
}

// startExec creates and starts an exec, repairing the container once if it is gone.
func (s *Sandbox) startExec(ctx context.Context, opts container.ExecOptions) (string, types.HijackedResponse, error) {
	for attempt := 0; ; attempt++ {
		id, hj, err := s.tryStartExec(ctx, opts)
		if err == nil || attempt > 0 || !containerGone(err) || ctx.Err() != nil {
			return id, hj, err
		}
		s.log.Info("sandbox container is gone or stopped; repairing it", zap.Error(err))
		s.invalidate()
		if err := s.Ensure(ctx); err != nil {
			return "", hj, err
		}
	}
}

func (s *Sandbox) tryStartExec(ctx context.Context, opts container.ExecOptions) (string, types.HijackedResponse, error) {
	resp, err := s.cli.ContainerExecCreate(ctx, s.cfg.Container, opts)
	if err != nil {
		return "", types.HijackedResponse{}, fmt.Errorf("creating exec in sandbox container %s: %w", s.cfg.Container, err)
	}
	hj, err := s.cli.ContainerExecAttach(ctx, resp.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", hj, fmt.Errorf("starting exec in sandbox container %s: %w", s.cfg.Container, err)
	}
	return resp.ID, hj, nil
}

// exitCode asks Docker for the exit status. Right after the stream ends Docker may still
// report the exec as running for a moment, so it asks a few times.
func (s *Sandbox) exitCode(ctx context.Context, execID string, killed bool) (int, bool) {
	wait := 2 * time.Second
	if killed {
		wait = 500 * time.Millisecond
	}
	deadline := time.Now().Add(wait)
	for {
		ins, err := s.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			s.log.Warn("inspecting finished exec", zap.Error(err))
			return 0, false
		}
		if !ins.Running {
			return ins.ExitCode, true
		}
		if time.Now().After(deadline) {
			return 0, false
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// killGroup kills the process group of exec id from a second exec. It retries a few
// times because a command exhausting the process limit can make the exec fail to start.
func (s *Sandbox) killGroup(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		var code int
		code, err = s.quickExec(ctx, []string{"bash", "-c", killScript, "kill", id})
		if err == nil && code == 0 {
			return
		}
		if err == nil {
			err = fmt.Errorf("kill script exited with %d", code)
		}
		if ctx.Err() != nil {
			break
		}
	}
	s.log.Warn("killing timed-out command in sandbox", zap.String("exec", id), zap.Error(err))
}

// quickExec runs a short internal command, discarding its output, and returns its exit
// code.
func (s *Sandbox) quickExec(ctx context.Context, cmd []string) (int, error) {
	execID, hj, err := s.tryStartExec(ctx, container.ExecOptions{
		User: "root", WorkingDir: "/", AttachStdout: true, AttachStderr: true, Cmd: cmd,
	})
	if err != nil {
		return 0, err
	}
	stop := context.AfterFunc(ctx, hj.Close)
	defer stop()
	err = demux(hj.Reader, func([]byte) {}, func([]byte) {})
	hj.Close()
	if err != nil {
		return 0, fmt.Errorf("reading internal command output: %w", err)
	}
	code, ok := s.exitCode(ctx, execID, false)
	if !ok {
		return 0, errors.New("internal command did not report an exit code")
	}
	return code, nil
}

// demux splits Docker's multiplexed exec stream (8-byte header: stream, 3 zero bytes,
// big-endian length; then the payload) into stdout and stderr chunks as they arrive,
// never holding more than one small buffer.
func demux(r io.Reader, stdout, stderr func([]byte)) error {
	var hdr [8]byte
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		size := int(binary.BigEndian.Uint32(hdr[4:]))
		var sink func([]byte)
		switch hdr[0] {
		case 0, 1:
			sink = stdout
		case 2:
			sink = stderr
		case 3: // Docker reports its own errors on stream 3
			msg := make([]byte, min(size, 4096))
			n, _ := io.ReadFull(r, msg)
			return fmt.Errorf("docker: %s", msg[:n])
		default:
			return fmt.Errorf("unknown stream %d in exec output", hdr[0])
		}
		for size > 0 {
			n, err := r.Read(buf[:min(size, len(buf))])
			if n > 0 {
				sink(buf[:n])
				size -= n
			}
			if err != nil {
				if err == io.EOF && size == 0 {
					break
				}
				if err == io.EOF {
					return io.ErrUnexpectedEOF
				}
				return err
			}
		}
	}
}

// newExecID returns a random id naming one exec inside the container.
func newExecID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
