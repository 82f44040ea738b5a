// Files in a pod: stat and tar streams as execs of stat and tar, as kubectl cp does;
// the image needs tar.

package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	v1 "k8s.io/api/core/v1"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// maxStderr is how much of a command's stderr an error message quotes.
const maxStderr = 4 << 10

// exitMissing is what the scripts below exit with when the path is missing.
const exitMissing = 3

// statScript prints, for the path $1 (not followed): the raw mode in hex, the size
// and the modification time in seconds, on one line; then, for a symbolic link, its
// target. GNU and busybox stat both take this format.
const statScript = `[ -e "$1" ] || [ -L "$1" ] || exit 3; stat -c '%f %s %Y' -- "$1" || exit 1; [ -L "$1" ] || exit 0; readlink -- "$1"`

// statTimeout bounds a stat: the container's stat and shell run it, and a hostile
// container's may never answer.
var statTimeout = 30 * time.Second

// StatPath stats path in the pod (a symbolic link itself, not what it points
// to). LinkTarget is the link's text as it is (possibly relative), not resolved. A
// missing path is a not-found error.
func (c *Client) StatPath(ctx context.Context, name, p string) (boxapi.PathStat, error) {
	// The container's own stat answers: one that never does must not hold the caller.
	ctx, cancel := context.WithTimeout(ctx, statTimeout)
	defer cancel()
	var out, stderr bytes.Buffer
	err := c.run(ctx, name, []string{"/bin/sh", "-c", statScript, "stat", p}, nil, &limitWriter{w: &out, n: 8 << 10}, &limitWriter{w: &stderr, n: maxStderr})
	if code, ok := exitCode(err); ok {
		switch code {
		case exitMissing:
			return boxapi.PathStat{}, fmt.Errorf("kubernetes engine %s: could not find the file %s in container %s: %w", c.cfg.Name, p, name, cerrdefs.ErrNotFound)
		case 126, 127:
			return boxapi.PathStat{}, fmt.Errorf("kubernetes engine %s: stat of %s in %s: the image has no stat or /bin/sh (exit code %d), which this engine needs to read files: add them to the image: %s", c.cfg.Name, p, name, code, quote(&stderr))
		default:
			return boxapi.PathStat{}, fmt.Errorf("kubernetes engine %s: stat of %s in %s: exit code %d: %s", c.cfg.Name, p, name, code, quote(&stderr))
		}
	}
	if err != nil {
		return boxapi.PathStat{}, fmt.Errorf("kubernetes engine %s: stat of %s in %s: %w", c.cfg.Name, p, name, err)
	}
	st, perr := parseStat(out.Bytes())
	if perr != nil {
		return boxapi.PathStat{}, fmt.Errorf("kubernetes engine %s: stat of %s in %s: %w", c.cfg.Name, p, name, perr)
	}
	st.Name = path.Base(p)
	return st, nil
}

// parseStat reads statScript's output strictly.
func parseStat(b []byte) (boxapi.PathStat, error) {
	line, rest, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Split(string(line), " ")
	if len(f) != 3 {
		return boxapi.PathStat{}, fmt.Errorf("unexpected output of stat: %q", clip(string(line), 100))
	}
	raw, err1 := strconv.ParseUint(f[0], 16, 32)
	size, err2 := strconv.ParseInt(f[1], 10, 64)
	mtime, err3 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil || size < 0 {
		return boxapi.PathStat{}, fmt.Errorf("unexpected output of stat: %q", clip(string(line), 100))
	}
	st := boxapi.PathStat{Size: size, Mode: unixMode(uint32(raw)), Mtime: time.Unix(mtime, 0)}
	if st.Mode&os.ModeSymlink != 0 {
		t, ok := bytes.CutSuffix(rest, []byte("\n"))
		if !ok || len(t) == 0 || len(t) > 4096 || bytes.IndexByte(t, 0) >= 0 {
			return boxapi.PathStat{}, fmt.Errorf("unexpected output of readlink: %q", clip(string(rest), 100))
		}
		st.LinkTarget = string(t)
	} else if len(rest) != 0 {
		return boxapi.PathStat{}, fmt.Errorf("unexpected output after stat's line: %q", clip(string(rest), 100))
	}
	return st, nil
}

// unixMode converts a st_mode to an os.FileMode, as Go's os package does.
func unixMode(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	switch m & 0o170000 {
	case 0o060000:
		mode |= os.ModeDevice
	case 0o020000:
		mode |= os.ModeDevice | os.ModeCharDevice
	case 0o040000:
		mode |= os.ModeDir
	case 0o010000:
		mode |= os.ModeNamedPipe
	case 0o120000:
		mode |= os.ModeSymlink
	case 0o140000:
		mode |= os.ModeSocket
	}
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// tarOutScript writes a tar of $2 (in the directory $1) to stdout.
const tarOutScript = `cd -- "$1" || exit 3; exec tar -c -f - -- "$2"`

// CopyOut streams a tar archive of srcPath (a directory with all it holds),
// read by tar in the pod, with srcPath's stat. A failure of tar after the stat is the
// reader's error at the end.
func (c *Client) CopyOut(ctx context.Context, name, srcPath string) (io.ReadCloser, boxapi.PathStat, error) {
	st, err := c.StatPath(ctx, name, srcPath)
	if err != nil {
		return nil, boxapi.PathStat{}, err
	}
	clean := path.Clean(srcPath)
	dir, base := path.Dir(clean), path.Base(clean)
	if clean == "/" {
		dir, base = "/", "."
	}
	pr, pw := io.Pipe()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		var stderr bytes.Buffer
		err := c.run(sctx, name, []string{"/bin/sh", "-c", tarOutScript, "tar", dir, base}, nil, pw, &limitWriter{w: &stderr, n: maxStderr})
		if err != nil {
			err = c.tarErr("reading", srcPath, name, err, &stderr)
		}
		pw.CloseWithError(err)
		cancel()
	}()
	return &cancelReader{PipeReader: pr, cancel: cancel}, st, nil
}

// tarInScript extracts the tar on stdin in the directory $1.
const tarInScript = `cd -- "$1" || exit 3; exec tar -x -f -`

// CopyIn extracts the tar archive content in the directory dstPath, with tar
// in the pod. The archive is read to its end (up to 64 KiB past what tar took).
func (c *Client) CopyIn(ctx context.Context, name, dstPath string, content io.Reader) error {
	pr, pw := io.Pipe()
	var fed sync.WaitGroup
	fed.Add(1)
	go func() {
		defer fed.Done()
		_, err := io.Copy(pw, content)
		if err != nil && errors.Is(err, io.ErrClosedPipe) {
			// tar stopped at the archive's end marker: read the padding after it.
			_, _ = io.Copy(io.Discard, io.LimitReader(content, 64<<10))
		}
		pw.CloseWithError(err)
	}()
	var stderr bytes.Buffer
	err := c.run(ctx, name, []string{"/bin/sh", "-c", tarInScript, "tar", dstPath}, pr, io.Discard, &limitWriter{w: &stderr, n: maxStderr})
	pr.Close()
	fed.Wait()
	if err != nil {
		return c.tarErr("writing", dstPath, name, err, &stderr)
	}
	return nil
}

// tarErr says why tar failed.
func (c *Client) tarErr(doing, p, name string, err error, stderr *bytes.Buffer) error {
	code, ok := exitCode(err)
	switch {
	case !ok:
		return fmt.Errorf("kubernetes engine %s: %s %s in %s with tar: %w", c.cfg.Name, doing, p, name, err)
	case code == exitMissing:
		return fmt.Errorf("kubernetes engine %s: %s %s in %s: no such directory: %w", c.cfg.Name, doing, p, name, cerrdefs.ErrNotFound)
	case code == 127 || code == 126:
		return fmt.Errorf("kubernetes engine %s: %s %s in %s: the image has no tar or /bin/sh (exit code %d); this engine copies files with tar, as kubectl cp does: add tar to the image: %s", c.cfg.Name, doing, p, name, code, quote(stderr))
	}
	return fmt.Errorf("kubernetes engine %s: %s %s in %s: tar failed with exit code %d: %s", c.cfg.Name, doing, p, name, code, quote(stderr))
}

// run runs argv in the pod to its end, with the given streams (stdin may be nil). Its
// error is a utilexec.ExitError for a nonzero exit code, else as streamErr says.
func (c *Client) run(ctx context.Context, pod string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if err := c.podRunning(ctx, pod); err != nil {
		return err // not running, or a pod of another's that nothing is run in
	}
	ex, err := c.executor(pod, &v1.PodExecOptions{Container: execContainer, Command: argv, Stdin: stdin != nil, Stdout: true, Stderr: true})
	if err != nil {
		return err
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if msg, ok := startFailure(err); ok {
		_, _ = io.WriteString(stderr, msg)
		return utilexec.CodeExitError{Err: err, Code: 126}
	}
	return c.streamErr(pod, err)
}

func exitCode(err error) (int, bool) {
	var ee utilexec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return ee.ExitStatus(), true
	}
	return 0, false
}

// quote is a command's stderr for a message: trimmed, "(nothing on stderr)" if empty.
func quote(b *bytes.Buffer) string {
	s := strings.TrimSpace(strings.ToValidUTF8(b.String(), "?"))
	if s == "" {
		return "(nothing on stderr)"
	}
	return strconv.Quote(s)
}

// limitWriter keeps the first n bytes written and discards the rest.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.n -= k
		_, _ = l.w.Write(p[:k])
	}
	return len(p), nil
}

// cancelReader ends its stream when closed.
type cancelReader struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (r *cancelReader) Close() error {
	r.cancel()
	return r.PipeReader.Close()
}
