// The guard: a script beside each upload that resolves the directory's real path,
// then gives the finished file a free name or removes the unfinished one.

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/docker/docker/api/types/container"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// guardScript runs beside an upload, in the directory $1 (created when missing) with
// the temporary file name $2 and the candidate names after it, all relative. It prints
// the directory's real path (symbolic links resolved) ended by a NUL byte, so the bytes
// can be sent where they belong, then waits for a verdict on its standard input. On
// "commit" it gives the complete temporary file the first free candidate name, never
// replacing anything (link(2) fails when the name exists, which makes the check and the
// creation one step), and prints the name it took, ended by a NUL byte, so the server
// need not wait for the exec to wind down. On anything else, including the end of input
// when the server went away mid-upload, it removes the temporary file. On its way it
// removes temporary files of the directory older than a day, which only an engine that
// died mid-upload leaves.
const guardScript = `dir=$1 tmp=$2; shift 2
mkdir -p -- "$dir" && cd -- "$dir" || exit 2
find . -maxdepth 1 -name '` + tempPrefix + `*' -type f -mmin +1440 -exec rm -f -- {} + 2>/dev/null
pwd -P && printf '\0' || exit 2
IFS= read -r verdict
if [ "$verdict" != commit ]; then rm -f -- "$tmp"; exit 4; fi
for c in "$@"; do
	[ -e "$c" ] || [ -L "$c" ] && continue
	if ln -n -- "$tmp" "$c" 2>/dev/null; then rm -f -- "$tmp"; printf '%s\0' "$c"; exit 0; fi
	if [ ! -e "$c" ] && [ ! -L "$c" ] && mv -n -- "$tmp" "$c" 2>/dev/null && [ ! -e "$tmp" ]; then printf '%s\0' "$c"; exit 0; fi
done
rm -f -- "$tmp"
echo "every candidate name is taken" >&2
exit 3`

// maxRealDir bounds the directory path the guard reports, as PATH_MAX does on Linux.
const maxRealDir = 4096

// realDirPath reads the guard's report of where the directory really is ("pwd -P" and
// its newline). It comes from the container, and it ends up in answers, the log and
// the audit log: it must be one line of valid UTF-8 without control characters, an
// absolute clean path of at most maxRealDir bytes. A directory whose real path is not
// (a symbolic link to "/tmp/a\nb", say) fails with [boxapi.ErrBadName]: the upload could not
// say truthfully where the file went.
func realDirPath(out string) (string, error) {
	p, ok := strings.CutSuffix(out, "\n")
	if !ok || len(p) > maxRealDir || !path.IsAbs(p) || path.Clean(p) != p || !utf8.ValidString(p) ||
		strings.ContainsFunc(p, unicode.IsControl) {
		return "", fmt.Errorf("the directory's real path %.100q: %w: it must be one absolute line of text", out, boxapi.ErrBadName)
	}
	return p, nil
}

// guard is a running guardScript.
type guard struct {
	s       *Sandbox
	p       proc
	records chan string // what it printed, split at NUL bytes; closed when it ends
	ended   chan error  // how reading its output ended, once records is closed

	mu     sync.Mutex
	stderr bytes.Buffer
}

// guardExitError is a guard that ended without the record expected of it.
type guardExitError struct {
	code   int
	stderr string
}

func (e *guardExitError) Error() string {
	if e.code == 0 && e.stderr == "" {
		return "the upload's guard ended without its answer (exit code 0); the upload can be tried again"
	}
	return fmt.Sprintf("exit code %d: %s", e.code, human.Clip(e.stderr, 300))
}

// startGuard starts guardScript for the directory dir and waits until it is ready; it
// returns the directory's real path (see realDirPath). A directory that cannot be made fails with
// [boxapi.ErrNotDir] when a file is in the way.
func (s *fileStore) startGuard(ctx context.Context, dir, tmpName string, names []string) (*guard, string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadStepTimeout)
	defer cancel()
	p, err := s.sb.runner.startExec(ctx, container.ExecOptions{
		User: "root", WorkingDir: "/", AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: append([]string{"bash", "-c", guardScript, "upload", dir, tmpName}, names...),
	})
	if err != nil {
		return nil, "", fmt.Errorf("starting the upload's guard: %w", err)
	}
	g := &guard{s: s.sb, p: p, records: make(chan string, 4), ended: make(chan error, 1)}
	go g.read()
	real, err := g.next(ctx)
	if err != nil {
		_ = p.Close()
		var exit *guardExitError
		if errors.As(err, &exit) && (strings.Contains(exit.stderr, "Not a directory") || strings.Contains(exit.stderr, "File exists")) {
			return nil, "", fmt.Errorf("%s: %w (%s)", dir, boxapi.ErrNotDir, human.Clip(exit.stderr, 300))
		}
		return nil, "", fmt.Errorf("creating %s in the sandbox: %w", dir, err)
	}
	if real, err = realDirPath(real); err != nil {
		_ = p.Close() // the guard then removes the temporary file, not yet written
		return nil, "", fmt.Errorf("%s: %w", dir, err)
	}
	return g, real, nil
}

// read splits the guard's output into records until it ends.
func (g *guard) read() {
	var pending []byte
	err := drain(g.p, func(p []byte) {
		pending = append(pending, p...)
		for {
			i := bytes.IndexByte(pending, 0)
			if i < 0 {
				break
			}
			select {
			case g.records <- string(pending[:i]):
			default: // more than the guard ever prints
			}
			pending = pending[i+1:]
		}
		if len(pending) > 64<<10 {
			pending = nil
		}
	}, func(p []byte) {
		g.mu.Lock()
		if g.stderr.Len() < 64<<10 {
			g.stderr.Write(p)
		}
		g.mu.Unlock()
	})
	close(g.records)
	g.ended <- err
}

// next waits for the guard's next record. When the guard ends instead, the error is a
// [guardExitError] with its exit code and what it wrote to stderr.
func (g *guard) next(ctx context.Context) (string, error) {
	select {
	case r, ok := <-g.records:
		if ok {
			return r, nil
		}
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for the upload's guard: %w", ctx.Err())
	}
	if err := <-g.ended; err != nil {
		return "", fmt.Errorf("reading the upload's guard: %w", err)
	}
	code, ok := g.p.exitCode(ctx, false)
	if !ok {
		return "", errors.New("the upload's guard reported no exit code")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return "", &guardExitError{code: code, stderr: strings.TrimSpace(g.stderr.String())}
}

// finish sends the verdict and returns the name the guard gave the file. After an
// "abort" it returns a guardExitError with code 4 once the temporary file is gone.
func (g *guard) finish(ctx context.Context, verdict string) (string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadStepTimeout)
	defer cancel()
	// Once the name is printed the file is in place; the exec finishes on its own.
	defer g.p.Close()
	stop := context.AfterFunc(ctx, func() { _ = g.p.Close() })
	defer stop()
	if _, err := io.WriteString(g.p, verdict+"\n"); err != nil {
		return "", fmt.Errorf("telling the guard: %w", err)
	}
	_ = g.p.CloseWrite()
	return g.next(ctx)
}
