package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap"
)

// Errors of [Sandbox.Upload], wrapped; test them with errors.Is. A stream over the
// limit fails with [ErrTooLarge], shared with EditFile.
var (
	ErrBadName = errors.New("file name is not usable")
	ErrNotDir  = errors.New("not a directory")
)

// MaxNameBytes bounds a file name, as Linux file systems do.
const MaxNameBytes = 255

// tempPrefix starts the hidden name a file is written under until it is complete.
const tempPrefix = ".mcp-upload-"

// uploadStepTimeout bounds each short step of an upload (mkdir, rename, removal).
const uploadStepTimeout = 30 * time.Second

// SanitizeName turns a name a person or a client sent into a single safe path
// component: the part after the last '/' or '\', without control characters (NUL and
// newlines included) or bidirectional overrides, trimmed of spaces, cut to [MaxNameBytes] bytes of valid UTF-8 at
// a character boundary (keeping the extension). It returns "" when nothing usable is
// left ("", ".", ".." and the like), and changed reports whether the name differs from
// what was sent.
func SanitizeName(name string) (clean string, changed bool) {
	s := strings.ToValidUTF8(name, "\uFFFD")
	if i := strings.LastIndexAny(s, `/\`); i >= 0 {
		s = s[i+1:]
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || isBidiOrInvisible(r) {
			return -1
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > MaxNameBytes {
		s = fitName(s, MaxNameBytes)
	}
	if strings.Trim(s, ".") == "" || strings.HasPrefix(s, tempPrefix) {
		return "", name != ""
	}
	return s, s != name
}

// isBidiOrInvisible reports characters that change how a name is shown without being
// part of it: bidirectional overrides (which can make "gnp.exe" read as "exe.png"),
// line and paragraph separators, and the byte order mark.
func isBidiOrInvisible(r rune) bool {
	switch {
	case r >= '\u202A' && r <= '\u202E', r >= '\u2066' && r <= '\u2069',
		r == '\u200E', r == '\u200F', r == '\u061C', r == '\u2028', r == '\u2029', r == '\uFEFF':
		return true
	}
	return false
}

// validName reports whether name is already what SanitizeName makes of it.
func validName(name string) bool {
	c, changed := SanitizeName(name)
	return c != "" && !changed
}

// splitExt splits a name into a stem and an extension (".txt", ".tar.gz"); a leading
// dot (".bashrc") is not an extension.
func splitExt(name string) (stem, ext string) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || i == len(name)-1 {
		return name, ""
	}
	stem, ext = name[:i], name[i:]
	if strings.HasSuffix(stem, ".tar") && len(stem) > 4 {
		stem, ext = stem[:len(stem)-4], ".tar"+ext
	}
	if len(ext) > 32 { // not an extension, just a dot in a long name
		return name, ""
	}
	return stem, ext
}

// fitName cuts name to at most max bytes at a character boundary, keeping its
// extension.
func fitName(name string, max int) string {
	if len(name) <= max {
		return name
	}
	stem, ext := splitExt(name)
	keep := max - len(ext)
	if keep < 1 {
		stem, ext, keep = name, "", max
	}
	for keep > 0 && !utf8.RuneStart(stem[keep]) {
		keep--
	}
	return strings.TrimSpace(stem[:keep]) + ext
}

// candidates lists the names tried in turn for a file called name: the name itself,
// then "name (1).ext" up to "name (19).ext", then one with a random suffix, each cut to
// MaxNameBytes.
func candidates(name string) []string {
	stem, ext := splitExt(name)
	out := []string{name}
	for i := 1; i < 20; i++ {
		out = append(out, numbered(stem, ext, strconv.Itoa(i)))
	}
	return append(out, numbered(stem, ext, newExecID()[:8]))
}

func numbered(stem, ext, n string) string {
	suffix := " (" + n + ")" + ext
	return cutStem(stem, MaxNameBytes-len(suffix)) + suffix
}

// cutStem cuts stem to at most max bytes at a character boundary.
func cutStem(stem string, max int) string {
	if len(stem) <= max {
		return stem
	}
	for max > 0 && !utf8.RuneStart(stem[max]) {
		max--
	}
	return stem[:max]
}

// UploadOptions describe the stream given to [Sandbox.Upload].
type UploadOptions struct {
	// Size is the stream's length when known (from Content-Length), else -1. A stream
	// that ends before Size bytes is an aborted upload.
	Size int64
	// Max is the largest file accepted, in bytes; 0 means no limit. It is enforced
	// while the bytes flow, whether or not Size is known.
	Max int64
}

// UploadResult says where an uploaded file landed.
type UploadResult struct {
	Path    string // absolute path of the file in the container
	Name    string // its final name
	Renamed bool   // true when Name differs from the name asked for, because that one existed
	Size    int64  // bytes written
}

// guardScript runs beside an upload. It waits for a verdict on its standard input;
// on "commit" it gives the complete temporary file $1 the first free name among the
// remaining arguments, never replacing anything (link(2) fails when the name exists,
// which makes the check and the creation one step) and prints the name it took. On
// anything else, including the end of input when the server went away mid-upload, it
// removes the temporary file. On its way it removes temporary files of the same
// directory older than a day, which only an engine that died mid-upload leaves.
const guardScript = `tmp=$1; shift
find "${tmp%/*}" -maxdepth 1 -name '` + tempPrefix + `*' -type f -mmin +1440 -exec rm -f -- {} + 2>/dev/null
IFS= read -r verdict
if [ "$verdict" != commit ]; then rm -f -- "$tmp"; exit 4; fi
for c in "$@"; do
	[ -e "$c" ] || [ -L "$c" ] && continue
	if ln -n -- "$tmp" "$c" 2>/dev/null; then rm -f -- "$tmp"; printf '%s' "$c"; exit 0; fi
	if [ ! -e "$c" ] && [ ! -L "$c" ] && mv -n -- "$tmp" "$c" 2>/dev/null && [ ! -e "$tmp" ]; then printf '%s' "$c"; exit 0; fi
done
rm -f -- "$tmp"
echo "every candidate name is taken" >&2
exit 3`

// prepareScript creates the directory $1 and removes temporary files of uploads that
// were cut off by a crash more than a day ago.
const prepareScript = `mkdir -p -- "$1" || exit 2
find "$1" -maxdepth 1 -name '` + tempPrefix + `*' -type f -mmin +1440 -exec rm -f -- {} + 2>/dev/null
exit 0`

// Upload streams r into the container as the file name in the directory dir (created
// when missing), in bounded memory and without touching the host's disk. The bytes go
// to a hidden temporary file in dir which is renamed only once complete; an existing
// file is never replaced: the first free name among "name", "name (1).ext", ... is
// taken and reported. When r fails, ends early, or passes opts.Max bytes
// ([ErrTooLarge]), nothing is left behind.
//
// A stream of known length goes through Docker's archive API (the fastest path); one of
// unknown length through the standard input of `cat` in an exec. The container is
// created or repaired first, as for Exec.
func (s *Sandbox) Upload(ctx context.Context, dir, name string, r io.Reader, opts UploadOptions) (UploadResult, error) {
	if !path.IsAbs(dir) {
		return UploadResult{}, fmt.Errorf("%q: %w", dir, ErrRelativePath)
	}
	if strings.ContainsRune(dir, 0) {
		return UploadResult{}, fmt.Errorf("directory %q contains a NUL byte: %w", dir, ErrBadName)
	}
	dir = path.Clean(dir)
	if !validName(name) {
		return UploadResult{}, fmt.Errorf("%q: %w", name, ErrBadName)
	}
	if opts.Max > 0 && opts.Size > opts.Max {
		return UploadResult{}, fmt.Errorf("%d bytes: %w of %d bytes", opts.Size, ErrTooLarge, opts.Max)
	}
	if err := s.MakeDir(ctx, dir); err != nil {
		return UploadResult{}, err
	}
	tmp := path.Join(dir, tempPrefix+newExecID()+".part")
	names := []string{tmp}
	for _, c := range candidates(name) {
		names = append(names, path.Join(dir, c))
	}
	// The guard starts while the bytes flow, so its cost hides behind the transfer.
	guardc := make(chan guardResult, 1)
	go func() {
		g, err := s.startGuard(context.WithoutCancel(ctx), names)
		guardc <- guardResult{g, err}
	}()
	src := &limitedReader{r: r, max: opts.Max}
	var n int64
	var err error
	if opts.Size >= 0 {
		n, err = s.copyIn(ctx, dir, path.Base(tmp), src, opts.Size)
	} else {
		n, err = s.catIn(ctx, tmp, src)
		if err == nil {
			err = s.checkSize(ctx, tmp, n)
		}
	}
	if src.over.Load() {
		err = fmt.Errorf("more than %d bytes: %w", opts.Max, ErrTooLarge)
	}
	gr := <-guardc
	if gr.err != nil {
		s.removeTemp(ctx, tmp)
		if err != nil {
			return UploadResult{}, err
		}
		return UploadResult{}, gr.err
	}
	verdict := "commit"
	if err != nil {
		verdict = "abort"
	}
	final, code, gerr := gr.g.finish(ctx, verdict)
	switch {
	case err != nil:
		if gerr != nil || code != 4 {
			s.removeTemp(ctx, tmp)
		}
		if opts.Size >= 0 {
			s.settleRemoved(ctx, tmp)
		}
		return UploadResult{}, err
	case gerr != nil || code != 0 || final == "":
		s.removeTemp(ctx, tmp)
		return UploadResult{}, fmt.Errorf("naming the uploaded file: exit code %d: %v", code, gerr)
	}
	base := path.Base(final)
	return UploadResult{Path: final, Name: base, Renamed: base != name, Size: n}, nil
}

type guardResult struct {
	g   *guard
	err error
}

// guard is a running guardScript.
type guard struct {
	s      *Sandbox
	execID string
	hj     types.HijackedResponse
}

// startGuard starts guardScript with args (the temporary file, then the candidates).
func (s *Sandbox) startGuard(ctx context.Context, args []string) (*guard, error) {
	ctx, cancel := context.WithTimeout(ctx, uploadStepTimeout)
	defer cancel()
	id, hj, err := s.startExec(ctx, container.ExecOptions{
		User: "root", WorkingDir: "/", AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: append([]string{"bash", "-c", guardScript, "upload"}, args...),
	})
	if err != nil {
		return nil, fmt.Errorf("starting the upload's guard: %w", err)
	}
	return &guard{s: s, execID: id, hj: hj}, nil
}

// finish sends the verdict and returns what the guard printed and its exit code.
func (g *guard) finish(ctx context.Context, verdict string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadStepTimeout)
	defer cancel()
	defer g.hj.Close()
	stop := context.AfterFunc(ctx, g.hj.Close)
	defer stop()
	if _, err := io.WriteString(g.hj.Conn, verdict+"\n"); err != nil {
		return "", -1, fmt.Errorf("telling the guard: %w", err)
	}
	_ = g.hj.CloseWrite()
	var stdout, stderr bytes.Buffer
	keep := func(b *bytes.Buffer) func([]byte) {
		return func(p []byte) {
			if b.Len() < 64<<10 {
				b.Write(p)
			}
		}
	}
	if err := demux(g.hj.Reader, keep(&stdout), keep(&stderr)); err != nil {
		return "", -1, fmt.Errorf("reading the guard: %w", err)
	}
	code, ok := g.s.exitCode(ctx, g.execID, false)
	if !ok {
		return "", -1, errors.New("the guard reported no exit code")
	}
	if code != 0 && code != 4 {
		return "", code, fmt.Errorf("guard: %s", strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), code, nil
}

// MakeDir makes sure the absolute path dir is a directory, creating it and its parents
// when missing ([ErrNotDir] when a file is in the way). A stat through the archive API
// answers the common case without starting a process.
func (s *Sandbox) MakeDir(ctx context.Context, dir string) error {
	if !path.IsAbs(dir) {
		return fmt.Errorf("%q: %w", dir, ErrRelativePath)
	}
	if err := s.Ensure(ctx); err != nil {
		return err
	}
	st, err := s.cli.ContainerStatPath(ctx, s.cfg.Container, dir)
	if err == nil && st.Mode.IsDir() {
		return nil
	}
	if err == nil && st.Mode&fs.ModeSymlink == 0 {
		return fmt.Errorf("%s: %w", dir, ErrNotDir)
	}
	// Missing, a symbolic link, or the container went away: the exec repairs the
	// container if needed and mkdir -p follows links.
	res, err := s.run(ctx, script(prepareScript, dir), uploadStepTimeout, 4096, nil)
	if err != nil {
		return fmt.Errorf("creating %s in the sandbox: %w", dir, err)
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(res.Stderr)
		if strings.Contains(msg, "Not a directory") || strings.Contains(msg, "File exists") {
			return fmt.Errorf("%s: %w (%s)", dir, ErrNotDir, msg)
		}
		return fmt.Errorf("creating %s in the sandbox: exit code %d: %s", dir, res.ExitCode, msg)
	}
	return nil
}

// copyIn streams r (exactly size bytes) into dir/name through Docker's archive API: a
// one-file tar made on the fly, so nothing is buffered.
func (s *Sandbox) copyIn(ctx context.Context, dir, name string, r io.Reader, size int64) (int64, error) {
	ts, err := newTarStream(name, r, size)
	if err != nil {
		return 0, err
	}
	err = s.cli.CopyToContainer(ctx, s.cfg.Container, dir, ts, container.CopyToContainerOptions{})
	ts.close()
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			s.invalidate()
		}
		n, rerr := ts.result()
		if rerr != nil && rerr != io.EOF {
			err = rerr // the upload's own failure says more than Docker's
		}
		return n, fmt.Errorf("copying into the sandbox: %w", err)
	}
	n, rerr := ts.result()
	if rerr != io.EOF {
		return n, fmt.Errorf("copying into the sandbox: the archive was not read to its end: %w", io.ErrUnexpectedEOF)
	}
	return n, nil
}

// tarStream is a one-file tar archive around a stream of known length, made as it is
// read: header, the stream's bytes, padding and trailer. Docker's client reads it
// directly, with no pipe. A goroutine reads the stream ahead in chunks of up to 1 MiB, so
// that receiving the next bytes overlaps with Docker taking the last ones (Docker's
// client reads its request body in small pieces, one after the other). A stream
// shorter or longer than announced fails the archive.
type tarStream struct {
	head, tail []byte
	cur        []byte // what is left of the chunk being handed out
	curBuf     []byte // the whole buffer of that chunk, to recycle
	full       chan tarChunk
	free       chan []byte
	stop       chan struct{}
	started    bool
	n          int64 // bytes of the stream handed out
	err        error // sticky; io.EOF once the whole archive was read

	// A copy of n and err for the goroutine that called CopyToContainer.
	mu     sync.Mutex
	pubN   int64
	pubErr error

	body io.Reader
	size int64
}

// tarChunk is a piece of the stream read ahead, or how the stream ended.
type tarChunk struct {
	buf []byte
	n   int
	err error // io.EOF after exactly size bytes
}

const (
	tarChunkSize = 1 << 20
	tarChunks    = 4
)

func newTarStream(name string, body io.Reader, size int64) (*tarStream, error) {
	var hb bytes.Buffer
	tw := tar.NewWriter(&hb)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644,
		ModTime: time.Now().Truncate(time.Second), Format: tar.FormatPAX,
	}); err != nil {
		return nil, fmt.Errorf("making the archive header: %w", err)
	}
	pad := (512 - size%512) % 512
	return &tarStream{
		head: hb.Bytes(), tail: make([]byte, pad+1024), body: body, size: size,
		full: make(chan tarChunk, tarChunks), free: make(chan []byte, tarChunks), stop: make(chan struct{}),
	}, nil
}

// readAhead reads the stream into free buffers until it ends or fails.
func (t *tarStream) readAhead() {
	for range tarChunks {
		t.free <- make([]byte, tarChunkSize)
	}
	var got int64
	for {
		var buf []byte
		select {
		case buf = <-t.free:
		case <-t.stop:
			return
		}
		var c tarChunk
		if got < t.size {
			k, err := t.body.Read(buf[:min(int64(len(buf)), t.size-got)])
			got += int64(k)
			switch {
			case err == io.EOF && got < t.size:
				err = fmt.Errorf("upload ended after %d of %d bytes: %w", got, t.size, io.ErrUnexpectedEOF)
			case err == io.EOF:
				err = nil
			}
			c = tarChunk{buf: buf, n: k, err: err}
		} else {
			// The stream must end here: a longer one is not the file announced.
			var one [1]byte
			_, err := io.ReadFull(t.body, one[:])
			switch err {
			case nil:
				err = fmt.Errorf("the upload is longer than the %d bytes announced", t.size)
			case io.EOF:
			}
			c = tarChunk{buf: buf, err: err}
		}
		select {
		case t.full <- c:
		case <-t.stop:
			return
		}
		if c.err != nil {
			return
		}
	}
}

// close stops the read-ahead; the stream is not read any further.
func (t *tarStream) close() { close(t.stop) }

// result returns the bytes of the stream handed out and the archive's error (io.EOF
// when the whole archive was read).
func (t *tarStream) result() (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pubN, t.pubErr
}

func (t *tarStream) Read(p []byte) (int, error) {
	k, err := t.read(p)
	t.mu.Lock()
	t.pubN, t.pubErr = t.n, t.err
	t.mu.Unlock()
	return k, err
}

// read is Read, touching only fields its one caller owns.
func (t *tarStream) read(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	if len(t.head) > 0 {
		k := copy(p, t.head)
		t.head = t.head[k:]
		return k, nil
	}
	if !t.started {
		t.started = true
		go t.readAhead()
	}
	for t.body != nil && len(t.cur) == 0 {
		if t.curBuf != nil {
			t.free <- t.curBuf
			t.curBuf = nil
		}
		c := <-t.full
		switch {
		case c.err == io.EOF:
			t.body = nil // done: on to the padding
		case c.err != nil:
			t.err = c.err
			return 0, c.err
		default:
			t.cur, t.curBuf = c.buf[:c.n], c.buf
		}
	}
	if len(t.cur) > 0 {
		k := copy(p, t.cur)
		t.cur = t.cur[k:]
		t.n += int64(k)
		return k, nil
	}
	if len(t.tail) == 0 {
		t.err = io.EOF
		return 0, io.EOF
	}
	k := copy(p, t.tail)
	t.tail = t.tail[k:]
	return k, nil
}

// catIn streams r into the file tmp through the standard input of `cat`, for streams
// whose length is not known in advance.
func (s *Sandbox) catIn(ctx context.Context, tmp string, r io.Reader) (int64, error) {
	execID, hj, err := s.startExec(ctx, container.ExecOptions{
		User: "root", WorkingDir: "/", AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: []string{"bash", "-c", `exec cat > "$1"`, "upload", tmp},
	})
	if err != nil {
		return 0, err
	}
	defer hj.Close()
	stop := context.AfterFunc(ctx, hj.Close)
	defer stop()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- demux(hj.Reader, func([]byte) {}, func(p []byte) {
			if stderr.Len() < 4096 {
				stderr.Write(p)
			}
		})
	}()
	n, err := io.Copy(hj.Conn, r)
	if err != nil {
		// Closing the stream ends cat, which leaves a partial file for the caller to
		// remove.
		hj.Close()
		<-done
		return n, fmt.Errorf("reading upload: %w", err)
	}
	if err := hj.CloseWrite(); err != nil {
		return n, fmt.Errorf("ending upload stream: %w", err)
	}
	if err := <-done; err != nil {
		return n, fmt.Errorf("writing into the sandbox: %w", err)
	}
	code, ok := s.exitCode(ctx, execID, false)
	if !ok || code != 0 {
		return n, fmt.Errorf("writing %s in the sandbox failed (exit code %d): %s", tmp, code, strings.TrimSpace(stderr.String()))
	}
	return n, nil
}

// checkSize makes sure the temporary file holds every byte sent.
func (s *Sandbox) checkSize(ctx context.Context, tmp string, n int64) error {
	st, err := s.cli.ContainerStatPath(ctx, s.cfg.Container, tmp)
	if err != nil {
		return fmt.Errorf("checking %s in the sandbox: %w", tmp, err)
	}
	if st.Size != n {
		return fmt.Errorf("%s holds %d bytes, %d were sent: %w", tmp, st.Size, n, io.ErrUnexpectedEOF)
	}
	return nil
}

// settleRemoved makes sure an aborted archive copy left nothing. Docker's client gives
// up on a failed copy at once, while the engine may still be unpacking what it had
// received: the file can appear after the guard removed it. Nothing can write it once
// the engine is done, so it waits until the file stays absent for a few checks.
func (s *Sandbox) settleRemoved(ctx context.Context, tmp string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadStepTimeout)
	defer cancel()
	absent := 0
	for absent < 3 && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		_, err := s.cli.ContainerStatPath(ctx, s.cfg.Container, tmp)
		switch {
		case cerrdefs.IsNotFound(err):
			absent++
		case err != nil:
			return // the container itself is unreachable; nothing more to do here
		default:
			absent = 0
			s.removeTemp(ctx, tmp)
		}
	}
}

// removeTemp deletes a temporary file, even when the request that made it is gone.
func (s *Sandbox) removeTemp(ctx context.Context, tmp string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadStepTimeout)
	defer cancel()
	code, err := s.quickExec(ctx, []string{"rm", "-f", "--", tmp})
	if err != nil || code != 0 {
		s.log.Warn("removing an unfinished upload", zap.String("path", tmp), zap.Int("exit_code", code), zap.Error(err))
	}
}

// script is a command line that runs a bash script with arguments ($1, $2, ...).
func script(body string, args ...string) string {
	var b strings.Builder
	b.WriteString("bash -c " + shellQuote(body) + " upload")
	for _, a := range args {
		b.WriteString(" " + shellQuote(a))
	}
	return b.String()
}

// limitedReader fails once more than max bytes (max > 0) have been read. over may be
// read from another goroutine: a read-ahead can outlive the copy that started it.
type limitedReader struct {
	r    io.Reader
	max  int64
	n    int64
	over atomic.Bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.max > 0 && l.n > l.max {
		l.over.Store(true)
		return 0, fmt.Errorf("more than %d bytes: %w", l.max, ErrTooLarge)
	}
	return n, err
}

// DirEntry is a file listed by [Sandbox.ListFiles].
type DirEntry struct {
	Name    string
	Size    int64
	ModTime time.Time
}

// listScript prints, for the regular files of $1 (unfinished uploads left out, at most $2),
// one "size mtime" line each, then a NUL, then their names, each ended by a NUL.
const listScript = `cd -- "$1" 2>/dev/null || exit 0
shopt -s nullglob
files=()
for f in * .[!.]* ..?*; do
	[[ $f == ` + tempPrefix + `* ]] && continue
	[ -f "$f" ] && [ ! -L "$f" ] && files+=("$f")
	[ ${#files[@]} -ge "$2" ] && break
done
[ ${#files[@]} -gt 0 ] || exit 0
stat -c '%s %Y' -- "${files[@]}" || exit 1
printf '\0'
printf '%s\0' "${files[@]}"`

// ListFiles lists up to max regular files of dir (not symbolic links, not unfinished
// uploads),
// for showing what a directory holds. A missing directory lists as empty.
func (s *Sandbox) ListFiles(ctx context.Context, dir string, max int) ([]DirEntry, error) {
	if !path.IsAbs(dir) {
		return nil, fmt.Errorf("%q: %w", dir, ErrRelativePath)
	}
	res, err := s.run(ctx, script(listScript, path.Clean(dir), strconv.Itoa(max)), uploadStepTimeout, 4<<20, nil)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	if res.ExitCode != 0 || res.StdoutTruncated {
		return nil, fmt.Errorf("listing %s: exit code %d: %s", dir, res.ExitCode, strings.TrimSpace(res.Stderr))
	}
	if res.Stdout == "" {
		return nil, nil
	}
	stats, names, ok := strings.Cut(res.Stdout, "\x00")
	lines := strings.Split(strings.TrimSuffix(stats, "\n"), "\n")
	nameList := strings.Split(strings.TrimSuffix(names, "\x00"), "\x00")
	if !ok || len(lines) != len(nameList) {
		return nil, fmt.Errorf("listing %s: unexpected output", dir)
	}
	out := make([]DirEntry, 0, len(lines))
	for i, l := range lines {
		a, b, _ := strings.Cut(l, " ")
		size, _ := strconv.ParseInt(a, 10, 64)
		mt, _ := strconv.ParseInt(b, 10, 64)
		out = append(out, DirEntry{Name: nameList[i], Size: size, ModTime: time.Unix(mt, 0)})
	}
	slices.SortFunc(out, func(a, b DirEntry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
