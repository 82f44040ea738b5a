package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// execStream is a program running in the container (no shell, argv as given) whose
// standard output is read as a stream, straight into the caller's buffer: no goroutine,
// no copy in between. Standard error is kept, bounded, for error messages. Memory does
// not depend on how much the program writes: while nobody reads, the program waits.
type execStream struct {
	p      proc
	err    error
	stderr *boundedBuffer
	done   chan struct{} // closed when the output ended or the stream was closed
	once   sync.Once
}

// startStream starts argv in the container as root, in dir, and returns its output.
// When stdin is not nil it is copied to the program's standard input, which is then
// closed. The container is repaired once if it is gone. Closing ends the program's
// output; so does the end of ctx.
func (s *jobRunner) startStream(ctx context.Context, dir string, argv []string, stdin io.Reader) (*execStream, error) {
	e, err := s.startRaw(ctx, dir, argv, stdin != nil)
	if err != nil {
		return nil, err
	}
	if stdin != nil {
		go func() {
			_, _ = io.Copy(e.p, stdin)
			_ = e.p.CloseWrite()
		}()
	}
	e.bind(ctx)
	return e, nil
}

// startRaw starts argv; with attachStdin the caller writes the program's input to e.p
// and closes it with CloseWrite.
func (s *jobRunner) startRaw(ctx context.Context, dir string, argv []string, attachStdin bool) (*execStream, error) {
	if err := s.sb.Ensure(ctx); err != nil {
		return nil, err
	}
	p, err := s.startExec(ctx, container.ExecOptions{
		User: "root", WorkingDir: dir, Cmd: argv,
		AttachStdout: true, AttachStderr: true, AttachStdin: attachStdin,
	})
	if err != nil {
		return nil, err
	}
	return &execStream{p: p, stderr: &boundedBuffer{max: 4096}, done: make(chan struct{})}, nil
}

// bind closes e when ctx ends before the output does.
func (e *execStream) bind(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { e.Close() })
	go func() {
		<-e.done
		stop()
	}()
}

// Read reads the program's standard output; its standard error goes to e.stderr on
// the way (p serves as scratch for it).
func (e *execStream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if e.err != nil {
			return 0, e.err
		}
		n, st, err := e.p.ReadOutput(p)
		if st == boxapi.Stderr {
			_, _ = e.stderr.Write(p[:n])
			n = 0
		}
		if err != nil {
			_ = e.finish(err)
		}
		if n > 0 {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

func (e *execStream) finish(err error) error {
	e.err = err
	e.once.Do(func() { close(e.done) })
	return err
}

// Close stops reading; a program still writing gets a broken pipe.
func (e *execStream) Close() error {
	e.once.Do(func() { close(e.done) })
	return e.p.Close()
}

// wait reads what is left of the output and returns the program's exit code and the
// start of its standard error.
func (e *execStream) wait(ctx context.Context) (int, string, error) {
	if e.err == nil {
		_, _ = io.Copy(io.Discard, e)
	}
	code, ok := e.p.exitCode(ctx, false)
	if !ok {
		return 0, e.stderr.String(), errors.New("the program in the sandbox did not report an exit code")
	}
	return code, e.stderr.String(), nil
}

// runCapture runs argv and returns its exit code and bounded standard output and error.
func (s *jobRunner) runCapture(ctx context.Context, argv []string, stdin io.Reader, maxOut int) (code int, stdout, stderr string, err error) {
	e, err := s.startStream(ctx, "/", argv, stdin)
	if err != nil {
		return 0, "", "", err
	}
	defer e.Close()
	out := &boundedBuffer{max: maxOut}
	if _, err := io.Copy(out, e); err != nil {
		return 0, "", "", fmt.Errorf("reading output of %s: %w", argv[0], err)
	}
	code, serr, err := e.wait(ctx)
	return code, out.String(), serr, err
}

// boundedBuffer keeps the first max bytes written to it and counts the rest.
type boundedBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.b.Len(); room > 0 {
		b.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(strings.ToValidUTF8(b.b.String(), ""))
}

// warmReadScript is a ranged reader started ahead of need: it waits for its request on
// standard input (file, skip and count, each ended by NUL; an empty count reads to the
// end) and then becomes dd. Starting a process in a container costs tens of
// milliseconds; writing to one already running costs almost nothing, so a seek in a
// video or a resumed download answers at once.
var warmReadScript = `IFS= read -r -d '' -t 300 f && IFS= read -r -d '' skip && IFS= read -r -d '' count || exit 0
exec dd if="$f" bs=` + strconv.Itoa(rangeBlock) + ` skip="$skip" ${count:+count="$count"}`

// warmMaxAge bounds how long a started reader is trusted to be waiting: the script
// gives up after 300 s without a request (so none outlives its use, not even when the
// sandbox is dropped from the config), and one from a container that was since
// recreated is not kept around.
const warmMaxAge = 4 * time.Minute

// warmReads holds one ranged reader started ahead of need.
type warmReads struct {
	mu      sync.Mutex
	ready   *execStream
	started time.Time
	filling bool
}

// takeWarm returns the reader started ahead, if any, and starts the next one.
func (s *jobRunner) takeWarm() *execStream {
	w := &s.warm
	w.mu.Lock()
	e, age := w.ready, time.Since(w.started)
	w.ready = nil
	fill := !w.filling
	w.filling = true
	w.mu.Unlock()
	if fill {
		go s.fillWarm()
	}
	if e == nil {
		return nil
	}
	select {
	case <-e.done: // it ended while waiting, e.g. with its container
		e.Close()
		return nil
	default:
	}
	if age > warmMaxAge {
		e.Close()
		return nil
	}
	return e
}

// fillWarm starts the next reader in the background. Like other upkeep it never
// creates or starts the container: one removed on purpose (an operator, a test's
// cleanup) must not come back because a reader was due.
func (s *jobRunner) fillWarm() {
	ctx, cancel := context.WithTimeout(upkeep(context.Background()), 30*time.Second)
	defer cancel()
	e, err := s.startRaw(ctx, "/", []string{"bash", "-c", warmReadScript}, true)
	w := &s.warm
	w.mu.Lock()
	defer w.mu.Unlock()
	w.filling = false
	if err != nil {
		return
	}
	if w.ready != nil {
		w.ready.Close()
	}
	w.ready, w.started = e, time.Now()
}

// request sends a warm reader its request.
func (e *execStream) request(file string, skip, count int64) error {
	c := ""
	if count >= 0 {
		c = fmt.Sprint(count)
	}
	if _, err := fmt.Fprintf(e.p, "%s\x00%d\x00%s\x00", file, skip, c); err != nil {
		return err
	}
	return e.p.CloseWrite()
}
