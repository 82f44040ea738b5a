// Programs in a pod as the sandbox sees them: output in pieces tagged with their
// stream, straight from the exec's streams, with no exec table and no framing.

package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// maxQueued bounds the output a process holds that its reader has not taken: past it
// the exec's stream waits, and so does the program.
const maxQueued = 1 << 20

// StartProcess runs spec in the pod name's sandbox container, attached as spec says.
// The stream outlives ctx.
func (c *Client) StartProcess(ctx context.Context, name string, spec boxapi.ProcessSpec) (boxapi.Process, error) {
	argv, err := processArgv(spec.User, spec.Dir, spec.Env, spec.Argv)
	if err != nil {
		return nil, fmt.Errorf("kubernetes engine %s: exec in %s: %w", c.cfg.Name, name, err)
	}
	if err := c.podRunning(ctx, name); err != nil {
		return nil, err
	}
	pe := &v1.PodExecOptions{Container: execContainer, Command: argv, Stdin: spec.Stdin,
		Stdout: spec.Stdout || spec.TTY, Stderr: spec.Stderr && !spec.TTY, TTY: spec.TTY}
	if !pe.Stdin && !pe.Stdout && !pe.Stderr {
		pe.Stdout = true // the API server wants one stream at least; its output is dropped
	}
	ex, err := c.executor(name, pe)
	if err != nil {
		return nil, err
	}
	p := newProcess()
	so := remotecommand.StreamOptions{Tty: spec.TTY}
	if pe.Stdout {
		so.Stdout = io.Discard
		if spec.Stdout || spec.TTY {
			so.Stdout = p.writer(boxapi.Stdout)
		}
	}
	if pe.Stderr {
		so.Stderr = p.writer(boxapi.Stderr)
	}
	var inR net.Conn
	if spec.Stdin {
		inR, p.in = net.Pipe()
		so.Stdin = inR
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	go func() {
		err := ex.StreamWithContext(sctx, so)
		cancel()
		if msg, ok := startFailure(err); ok {
			// As Docker does: the runtime's message on stdout, exit code 126.
			p.put(boxapi.Stdout, []byte(msg+"\r\n"))
			err = utilexec.CodeExitError{Err: err, Code: 126}
		} else if !p.abandoned() {
			err = c.streamErr(name, err)
			err = c.killedWithPod(name, err)
		}
		p.finish(err)
		if inR != nil {
			inR.Close()
		}
	}()
	return p, nil
}

// chunk is a piece of output and its stream.
type chunk struct {
	from boxapi.Stream
	data []byte
}

// process is a program StartProcess started.
type process struct {
	in     net.Conn // its stdin; nil when not attached
	cancel context.CancelFunc

	mu       sync.Mutex
	space    *sync.Cond // the queue has room, or the process was closed (writers wait on it)
	q        []chunk
	queued   int
	ended    bool  // the stream ended: nothing more comes
	err      error // why the output broke; nil for its end
	code     int
	exited   bool
	closed   bool          // Close was called
	deadline time.Time     // ReadOutput's
	ready    chan struct{} // wakes the reader: output came, the stream ended, the deadline moved
	done     chan struct{} // closed when the stream has ended
}

func newProcess() *process {
	p := &process{ready: make(chan struct{}, 1), done: make(chan struct{})}
	p.space = sync.NewCond(&p.mu)
	return p
}

// wake wakes the reader.
func (p *process) wake() {
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// put queues output, waiting while the reader is maxQueued behind; output after Close
// is dropped.
func (p *process) put(from boxapi.Stream, b []byte) {
	p.mu.Lock()
	for p.queued >= maxQueued && !p.closed {
		p.space.Wait()
	}
	if !p.closed {
		p.q = append(p.q, chunk{from, append([]byte(nil), b...)})
		p.queued += len(b)
	}
	p.mu.Unlock()
	p.wake()
}

// streamWriter is one of the exec's output streams.
type streamWriter struct {
	p    *process
	from boxapi.Stream
}

func (w streamWriter) Write(b []byte) (int, error) {
	if len(b) > 0 {
		w.p.put(w.from, b)
	}
	return len(b), nil
}

func (p *process) writer(from boxapi.Stream) io.Writer { return streamWriter{p, from} }

// finish records the stream's end.
func (p *process) finish(err error) {
	p.mu.Lock()
	var ee utilexec.ExitError
	switch {
	case err == nil:
		p.exited = true
	case errors.As(err, &ee) && ee.Exited():
		p.code, p.exited = ee.ExitStatus(), true
	case p.closed:
	default:
		p.err = err
	}
	p.ended = true
	p.mu.Unlock()
	close(p.done)
	p.wake()
}

func (p *process) abandoned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *process) ReadOutput(b []byte) (int, boxapi.Stream, error) {
	for {
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			return 0, 0, net.ErrClosed
		case len(p.q) > 0:
			c := &p.q[0]
			n := copy(b, c.data)
			from := c.from
			c.data = c.data[n:]
			if len(c.data) == 0 {
				p.q[0] = chunk{}
				p.q = p.q[1:]
			}
			p.queued -= n
			p.space.Broadcast()
			p.mu.Unlock()
			return n, from, nil
		case p.ended:
			err := p.err
			if err == nil {
				err = io.EOF
			}
			p.mu.Unlock()
			return 0, 0, err
		}
		deadline := p.deadline
		p.mu.Unlock()
		if deadline.IsZero() {
			<-p.ready
			continue
		}
		d := time.Until(deadline)
		if d <= 0 {
			return 0, 0, os.ErrDeadlineExceeded
		}
		t := time.NewTimer(d)
		select {
		case <-p.ready:
		case <-t.C:
		}
		t.Stop()
	}
}

func (p *process) Write(b []byte) (int, error) {
	if p.in == nil {
		return 0, errors.New("the program's stdin is not attached")
	}
	return p.in.Write(b)
}

func (p *process) CloseWrite() error {
	if p.in == nil {
		return nil
	}
	return p.in.Close()
}

func (p *process) Close() error {
	p.mu.Lock()
	p.closed = true
	p.q, p.queued = nil, 0
	p.space.Broadcast()
	p.mu.Unlock()
	p.wake()
	if p.cancel != nil {
		p.cancel()
	}
	if p.in != nil {
		p.in.Close()
	}
	return nil
}

func (p *process) Wait(ctx context.Context) (int, bool) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code, p.exited
}

func (p *process) SetReadDeadline(t time.Time) error {
	p.mu.Lock()
	p.deadline = t
	p.mu.Unlock()
	p.wake()
	return nil
}

func (p *process) SetWriteDeadline(t time.Time) error {
	if p.in == nil {
		return nil
	}
	return p.in.SetWriteDeadline(t)
}
