package sandbox

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
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
	Path    string // absolute path of the file in the container, symbolic links in the directory resolved
	Name    string // its final name
	Renamed bool   // true when Name differs from the name asked for, because that one existed
	Size    int64  // bytes written
}

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
// A stream of known length into a directory on the volume goes through Docker's archive
// API and a transfer container (the fastest path, and one that leaves the sandbox's
// execs free however slowly the bytes come); anything else through the standard input
// of `cat` in an exec. The container is created or repaired first, as for Exec.
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
	if err := s.Ensure(ctx); err != nil {
		return UploadResult{}, err
	}
	// The transfer container is fetched while the guard starts.
	type pick struct {
		id      string
		release func(ok bool)
	}
	var picked chan pick
	if opts.Size >= 0 && onVolume(dir) {
		picked = make(chan pick, 1)
		go func() {
			id, release := s.transferTarget(ctx)
			picked <- pick{id, release}
		}()
	}
	tmpName := tempPrefix + newExecID() + ".part"
	names := candidates(name)
	g, realDir, err := s.startGuard(ctx, dir, tmpName, names)
	var via pick
	if picked != nil {
		via = <-picked
	}
	if err == nil && via.id != "" && !onVolume(realDir) {
		// A symbolic link leads off the volume: the transfer container cannot see there.
		via.release(true)
		via = pick{}
	}
	if err != nil {
		if via.release != nil {
			via.release(true)
		}
		return UploadResult{}, err
	}
	tmp := path.Join(realDir, tmpName)
	src := &limitedReader{r: r, max: opts.Max}
	var n int64
	if via.id != "" {
		n, err = s.copyIn(ctx, via.id, realDir, tmpName, src, opts.Size)
		via.release(!cerrdefs.IsNotFound(err))
	} else {
		n, err = s.catIn(ctx, tmp, src)
		if err == nil {
			err = s.checkSize(ctx, tmp, n)
		}
	}
	if src.over.Load() {
		err = fmt.Errorf("more than %d bytes: %w", opts.Max, ErrTooLarge)
	}
	verdict := "commit"
	if err != nil {
		verdict = "abort"
	}
	final, ferr := g.finish(ctx, verdict)
	var exit *guardExitError
	switch {
	case err != nil:
		if !errors.As(ferr, &exit) || exit.code != 4 {
			s.removeTemp(ctx, tmp)
		}
		if via.id != "" {
			s.settleRemoved(ctx, tmp)
		}
		return UploadResult{}, err
	case ferr != nil || final == "":
		s.removeTemp(ctx, tmp)
		return UploadResult{}, fmt.Errorf("naming the uploaded file: %w", ferr)
	case !slices.Contains(names, final):
		// The guard answers from inside the container: only a name it was given may
		// come back as where the file is.
		s.removeTemp(ctx, tmp)
		return UploadResult{}, fmt.Errorf("naming the uploaded file: the sandbox answered a name it was not offered: %.100q", final)
	}
	// The directory as it really is: a signed directory that is a symbolic link sends
	// the file elsewhere, and the answer must name where it went.
	return UploadResult{Path: path.Join(realDir, final), Name: final, Renamed: final != name, Size: n}, nil
}

// maxRealDir bounds the directory path the guard reports, as PATH_MAX does on Linux.
const maxRealDir = 4096

// realDirPath reads the guard's report of where the directory really is ("pwd -P" and
// its newline). It comes from the container, and it ends up in answers, the log and
// the audit log: it must be one line of valid UTF-8 without control characters, an
// absolute clean path of at most maxRealDir bytes. A directory whose real path is not
// (a symbolic link to "/tmp/a\nb", say) fails with [ErrBadName]: the upload could not
// say truthfully where the file went.
func realDirPath(out string) (string, error) {
	p, ok := strings.CutSuffix(out, "\n")
	if !ok || len(p) > maxRealDir || !path.IsAbs(p) || path.Clean(p) != p || !utf8.ValidString(p) ||
		strings.ContainsFunc(p, unicode.IsControl) {
		return "", fmt.Errorf("the directory's real path %.100q: %w: it must be one absolute line of text", out, ErrBadName)
	}
	return p, nil
}

// guard is a running guardScript.
type guard struct {
	s       *Sandbox
	execID  string
	hj      types.HijackedResponse
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
	return fmt.Sprintf("exit code %d: %s", e.code, e.stderr)
}

// startGuard starts guardScript for the directory dir and waits until it is ready; it
// returns the directory's real path (see realDirPath). A directory that cannot be made fails with
// [ErrNotDir] when a file is in the way.
func (s *Sandbox) startGuard(ctx context.Context, dir, tmpName string, names []string) (*guard, string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadStepTimeout)
	defer cancel()
	id, hj, err := s.startExec(ctx, container.ExecOptions{
		User: "root", WorkingDir: "/", AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: append([]string{"bash", "-c", guardScript, "upload", dir, tmpName}, names...),
	})
	if err != nil {
		return nil, "", fmt.Errorf("starting the upload's guard: %w", err)
	}
	g := &guard{s: s, execID: id, hj: hj, records: make(chan string, 4), ended: make(chan error, 1)}
	go g.read()
	real, err := g.next(ctx)
	if err != nil {
		hj.Close()
		var exit *guardExitError
		if errors.As(err, &exit) && (strings.Contains(exit.stderr, "Not a directory") || strings.Contains(exit.stderr, "File exists")) {
			return nil, "", fmt.Errorf("%s: %w (%s)", dir, ErrNotDir, exit.stderr)
		}
		return nil, "", fmt.Errorf("creating %s in the sandbox: %w", dir, err)
	}
	if real, err = realDirPath(real); err != nil {
		hj.Close() // the guard then removes the temporary file, not yet written
		return nil, "", fmt.Errorf("%s: %w", dir, err)
	}
	return g, real, nil
}

// read splits the guard's output into records until it ends.
func (g *guard) read() {
	var pending []byte
	err := demux(g.hj.Reader, func(p []byte) {
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
	code, ok := g.s.exitCode(ctx, g.execID, false)
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
	defer g.hj.Close()
	stop := context.AfterFunc(ctx, g.hj.Close)
	defer stop()
	if _, err := io.WriteString(g.hj.Conn, verdict+"\n"); err != nil {
		return "", fmt.Errorf("telling the guard: %w", err)
	}
	_ = g.hj.CloseWrite()
	return g.next(ctx)
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

// copyIn streams r (exactly size bytes) into dir/name through Docker's archive API
// and the container id (a transfer container): a one-file tar made on the fly, so
// nothing is buffered.
func (s *Sandbox) copyIn(ctx context.Context, id, dir, name string, r io.Reader, size int64) (int64, error) {
	ts, err := newTarStream(name, r, size)
	if err != nil {
		return 0, err
	}
	if strings.HasPrefix(s.cli.DaemonHost(), "unix://") {
		err = s.putArchive(ctx, id, dir, ts)
	} else {
		err = s.cli.CopyToContainer(ctx, id, dir, ts, container.CopyToContainerOptions{})
	}
	ts.close()
	if err != nil {
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

// putArchiveSendBuffer is the socket send buffer of putArchive's connection: room for
// a few chunks, so the engine finds a chunk waiting whenever it reads.
const putArchiveSendBuffer = 4 << 20

// putArchive is CopyToContainer (without overwriting a directory with a file or the
// reverse) over a connection of its own to a local engine, sending the archive with its
// length in chunks of up to a MiB. The Docker client sends request bodies chunked, 32 KiB
// at a time, through tracing wrappers; on this path that costs about a third of the
// throughput.
func (s *Sandbox) putArchive(ctx context.Context, id, dir string, ts *tarStream) error {
	conn, err := s.cli.Dialer()(ctx)
	if err != nil {
		return fmt.Errorf("connecting to Docker: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if uc, ok := conn.(*net.UnixConn); ok {
		_ = uc.SetWriteBuffer(putArchiveSendBuffer)
	}
	api := "/containers/" + url.PathEscape(id) + "/archive"
	if v := s.cli.ClientVersion(); v != "" {
		api = "/v" + strings.TrimPrefix(v, "v") + api
	}
	query := url.Values{"path": {dir}, "noOverwriteDirNonDir": {"true"}}
	head := fmt.Sprintf("PUT %s?%s HTTP/1.1\r\nHost: docker\r\nUser-Agent: mcp-sandbox\r\n"+
		"Content-Type: application/x-tar\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", api, query.Encode(), ts.length())
	_, werr := io.WriteString(conn, head)
	if werr == nil {
		_, werr = ts.WriteTo(conn)
	}
	if werr != nil && ts.failed() {
		// The upload itself failed. The archive ends short, so the engine gives up; its
		// answer marks the moment it has, after which nothing writes the partial file
		// and removing it is for good.
		if cw, ok := conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			_ = conn.SetReadDeadline(time.Now().Add(uploadStepTimeout))
			if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
				resp.Body.Close()
			}
		}
		return werr
	}
	// After a write error the engine may have answered early (a missing container or
	// directory); its answer says more than the broken pipe.
	if werr != nil {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		if werr != nil {
			return fmt.Errorf("sending the archive: %w", werr)
		}
		return fmt.Errorf("reading Docker's answer: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 && werr == nil {
		return nil
	}
	var msg struct {
		Message string `json:"message"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(body, &msg) != nil || msg.Message == "" {
		msg.Message = strings.TrimSpace(string(body))
	}
	err = fmt.Errorf("Docker answered %s: %s", resp.Status, msg.Message)
	if resp.StatusCode == http.StatusNotFound {
		err = fmt.Errorf("%w: %w", cerrdefs.ErrNotFound, err)
	}
	return err
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
			k, err := io.ReadFull(t.body, buf[:min(int64(len(buf)), t.size-got)])
			if err == io.ErrUnexpectedEOF {
				err = io.EOF // a short stream; told apart below
			}
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

// length is the size of the whole archive.
func (t *tarStream) length() int64 { return int64(len(t.head)) + t.size + int64(len(t.tail)) }

// failed reports whether reading the stream failed (as opposed to writing the archive).
func (t *tarStream) failed() bool {
	_, err := t.result()
	return err != nil && err != io.EOF
}

// WriteTo writes the whole archive to w, each chunk read ahead in one write. It is an
// alternative to Read, not to be mixed with it.
func (t *tarStream) WriteTo(w io.Writer) (total int64, err error) {
	defer func() {
		t.mu.Lock()
		t.pubN, t.pubErr = t.n, t.err
		t.mu.Unlock()
	}()
	write := func(b []byte) error {
		k, err := w.Write(b)
		total += int64(k)
		return err
	}
	if err := write(t.head); err != nil {
		return total, err
	}
	t.head = nil
	t.started = true
	go t.readAhead()
	for {
		c := <-t.full
		if c.err == io.EOF {
			break
		}
		if c.err != nil {
			t.err = c.err
			return total, c.err
		}
		if err := write(c.buf[:c.n]); err != nil {
			return total, err
		}
		t.n += int64(c.n)
		t.free <- c.buf
	}
	if err := write(t.tail); err != nil {
		return total, err
	}
	t.tail = nil
	t.err = io.EOF
	return total, nil
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
// whose length is not known in advance and directories off the volume.
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
		// remove once cat is gone: one that had not started yet when the upload failed
		// would create the file after the removal.
		hj.Close()
		<-done
		s.waitExecEnd(ctx, execID)
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

// waitExecEnd waits (a while at most) until the exec has started and ended.
func (s *Sandbox) waitExecEnd(ctx context.Context, execID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadStepTimeout)
	defer cancel()
	for ctx.Err() == nil {
		ins, err := s.cli.ContainerExecInspect(ctx, execID)
		if err != nil || (!ins.Running && ins.Pid != 0) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	code, err := s.collectExec(upkeep(ctx), []string{"rm", "-f", "--", tmp}, &bytes.Buffer{}, 0)
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
	out, err := parseListing(res.Stdout, max)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	slices.SortFunc(out, func(a, b DirEntry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
