package sandbox

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

// proc is a program started in the container: a stream of the agent, or a Docker exec
// where the agent does not run. Either yields its output as bytes of one stream at a
// time. The agent's chunks come tagged with their channel; only a Docker exec's output
// is taken apart from Docker's multiplexed format (dockerReader), and nothing is ever
// put back into it.
type proc interface {
	// ReadOutput reads the next bytes of output into p and says whose they are;
	// io.EOF once all of it was read.
	ReadOutput(p []byte) (int, boxapi.Stream, error)
	// Write writes to the program's standard input, when it was started with one.
	Write(p []byte) (int, error)
	// CloseWrite ends the program's standard input.
	CloseWrite() error
	// Close abandons the program's input and output; a program still writing gets a
	// broken pipe.
	Close() error
	// exitCode waits a moment (less when killed says the program was killed) for the
	// program's exit status; false when none came.
	exitCode(ctx context.Context, killed bool) (int, bool)

	LocalAddr() net.Addr
	SetDeadline(t time.Time) error
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
}

// exitWait is how long exitCode waits for a program that ended its output: right after
// the output ends Docker may still report the exec as running for a moment.
func exitWait(killed bool) time.Duration {
	if killed {
		return 500 * time.Millisecond
	}
	return 2 * time.Second
}

// drain reads p's output to its end, handing each piece to stdout or stderr as it
// arrives, through one buffer of 32 KiB.
func drain(p proc, stdout, stderr func([]byte)) error {
	buf := make([]byte, 32<<10)
	for {
		n, st, err := p.ReadOutput(buf)
		if n > 0 {
			if st == boxapi.Stderr {
				stderr(buf[:n])
			} else {
				stdout(buf[:n])
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// demux splits Docker's multiplexed exec stream read from r (8-byte header: stream, 3
// zero bytes, big-endian length; then the payload) into stdout and stderr chunks as
// they arrive, never holding more than one small buffer.
func demux(r io.Reader, stdout, stderr func([]byte)) error {
	return drain(&dockerProc{out: dockerReader{r: r}}, stdout, stderr)
}

// dockerReader takes Docker's multiplexed exec stream apart, frame by frame, straight
// into the caller's buffer: whatever the frames, it holds nothing but a header.
type dockerReader struct {
	r    io.Reader
	left int           // bytes of the current frame not read yet
	st   boxapi.Stream // the current frame's stream
	err  error
	hdr  [8]byte
}

// ReadOutput reads payload bytes of the current frame, reading the next header first
// when none is left. io.EOF comes only at a frame boundary; an end inside a frame is
// io.ErrUnexpectedEOF.
func (d *dockerReader) ReadOutput(p []byte) (int, boxapi.Stream, error) {
	for d.left == 0 {
		if d.err != nil {
			return 0, 0, d.err
		}
		if _, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
			d.err = err
			return 0, 0, err
		}
		size := int(binary.BigEndian.Uint32(d.hdr[4:]))
		switch d.hdr[0] {
		case 0, 1:
			d.st = boxapi.Stdout
		case 2:
			d.st = boxapi.Stderr
		case 3: // Docker reports its own errors on stream 3
			msg := make([]byte, min(size, 4096))
			n, _ := io.ReadFull(d.r, msg)
			d.err = fmt.Errorf("docker: %s", msg[:n])
			return 0, 0, d.err
		default:
			d.err = fmt.Errorf("unknown stream %d in exec output", d.hdr[0])
			return 0, 0, d.err
		}
		d.left = size
	}
	if len(p) == 0 {
		return 0, d.st, nil
	}
	n, err := d.r.Read(p[:min(len(p), d.left)])
	d.left -= n
	if err == io.EOF {
		if d.left > 0 {
			err = io.ErrUnexpectedEOF
		} else {
			err = nil // the end comes with the next header's read
		}
	}
	if err != nil {
		d.err = err
	}
	return n, d.st, err
}

// dockerProc is a program started by a Docker exec.
type dockerProc struct {
	s   *Sandbox
	id  string
	hj  types.HijackedResponse
	out dockerReader
}

func newDockerProc(s *Sandbox, id string, hj types.HijackedResponse) *dockerProc {
	return &dockerProc{s: s, id: id, hj: hj, out: dockerReader{r: hj.Reader}}
}

func (d *dockerProc) ReadOutput(p []byte) (int, boxapi.Stream, error) { return d.out.ReadOutput(p) }
func (d *dockerProc) Write(p []byte) (int, error)                     { return d.hj.Conn.Write(p) }
func (d *dockerProc) CloseWrite() error                               { return d.hj.CloseWrite() }
func (d *dockerProc) Close() error                                    { d.hj.Close(); return nil }
func (d *dockerProc) LocalAddr() net.Addr                             { return d.hj.Conn.LocalAddr() }
func (d *dockerProc) SetDeadline(t time.Time) error                   { return d.hj.Conn.SetDeadline(t) }
func (d *dockerProc) SetReadDeadline(t time.Time) error               { return d.hj.Conn.SetReadDeadline(t) }
func (d *dockerProc) SetWriteDeadline(t time.Time) error              { return d.hj.Conn.SetWriteDeadline(t) }

// exitCode asks Docker for the exit status, a few times while it still says running.
func (d *dockerProc) exitCode(ctx context.Context, killed bool) (int, bool) {
	return d.s.runner.dockerExitCode(ctx, d.id, exitWait(killed))
}

// dockerExitCode asks Docker for an exec's exit status until it no longer runs, for up
// to wait.
func (s *jobRunner) dockerExitCode(ctx context.Context, execID string, wait time.Duration) (int, bool) {
	deadline := time.Now().Add(wait)
	for {
		ins, err := dockerOf(s.cli).ContainerExecInspect(ctx, execID)
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

// agentProc is a program the agent runs: its chunks are handed on as they came, with
// their channel as the stream.
type agentProc struct {
	streamEnd
	data []byte // the current chunk's bytes not read yet
	from boxapi.Stream
}

func (a *agentProc) ReadOutput(p []byte) (int, boxapi.Stream, error) {
	for len(a.data) == 0 {
		ch, err := a.st.ReadChunk()
		if err != nil {
			return 0, 0, err
		}
		if ch.EOF || len(ch.Data) == 0 {
			continue
		}
		a.data, a.from = ch.Data, boxapi.Stdout
		if ch.Ch == agentwire.Stderr {
			a.from = boxapi.Stderr
		}
	}
	n := copy(p, a.data)
	a.data = a.data[n:]
	return n, a.from, nil
}

func (a *agentProc) exitCode(ctx context.Context, killed bool) (int, bool) {
	return agentExitCode(ctx, a.st, exitWait(killed))
}

// procStdout reads a program's standard output, keeping the start of its standard
// error (as much as stderr takes) for the reason it failed.
type procStdout struct {
	p      proc
	stderr *boundedBuffer
	head   *boundedBuffer // if set, keeps the first bytes of stdout
}

func (r *procStdout) Read(b []byte) (int, error) {
	for {
		n, st, err := r.p.ReadOutput(b)
		if st == boxapi.Stderr {
			_, _ = r.stderr.Write(b[:n])
			n = 0
		} else if r.head != nil {
			_, _ = r.head.Write(b[:n])
		}
		if n > 0 || err != nil || len(b) == 0 {
			return n, err
		}
	}
}
