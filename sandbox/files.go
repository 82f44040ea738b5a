package sandbox

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"go.uber.org/zap"
)

// maxSymlinks bounds how many symbolic links one lookup follows (as Linux does).
const maxSymlinks = 40

// Stat describes the regular file at the absolute path p, following symbolic links. It
// fails with [boxapi.ErrRelativePath], [boxapi.ErrNotFound], [boxapi.ErrIsDir] or [boxapi.ErrNotRegular] (wrapped);
// for the last two the returned FileInfo is filled in.
func (s *Sandbox) Stat(ctx context.Context, p string) (boxapi.FileInfo, error) {
	fi, _, err := s.files.statRegular(ctx, p)
	return fi, err
}

// Open streams the regular file at the absolute path p, starting offset bytes into it
// (0 for the whole file). It is [Sandbox.OpenRange] to the end of the file.
func (s *Sandbox) Open(ctx context.Context, p string, offset int64) (*boxapi.File, error) {
	return s.OpenRange(ctx, p, offset, -1)
}

// rangeBlock is the block size of ranged reads: dd seeks to a multiple of it and the
// few bytes before the offset are skipped here.
const rangeBlock = 64 << 10

// OpenRange streams length bytes (-1: to the end) of the regular file at the absolute
// path p, starting offset bytes into it. Memory use does not depend on the file's size,
// and a read at an offset starts there. ctx governs the whole read, not only the call.
// Errors are those of [Sandbox.Stat], plus an error for an offset beyond the end of the
// file. Reading fewer than length bytes means the file shrank meanwhile.
//
// Reads go through the agent, or run dd in the container without it, except whole
// files of at least archiveMin bytes on the volume, which come through Docker's archive
// API (faster than either) from a transfer container. Never from the sandbox's own container: the archive API cannot seek and
// holds the lock of the container it reads while its stream is open, so one slow
// download would stall every exec behind it.
func (s *Sandbox) OpenRange(ctx context.Context, p string, offset, length int64) (*boxapi.File, error) {
	if offset < 0 {
		return nil, fmt.Errorf("opening %s: negative offset %d", p, offset)
	}
	if sess, err := s.link.fileAgent(ctx, p); err != nil {
		return nil, err
	} else if sess != nil {
		p = path.Clean(p)
		if offset == 0 && !s.link.isDirect(sess) {
			// A large whole file on the volume still comes through a transfer
			// container: Docker's archive API outruns the agent's exec stream (not
			// its direct channel).
			fi, err := agentStat(ctx, sess, p)
			if err == nil && fi.Mode.IsRegular() && fi.Size >= archiveMin && (length < 0 || length >= fi.Size) {
				if f, ok := s.files.openArchive(ctx, fi, p); ok {
					return f, nil
				}
			}
		}
		f, err := agentOpen(ctx, sess, p, offset, length)
		if !agentGone(ctx, err) {
			return f, err
		}
	}
	fi, target, err := s.files.statRegular(ctx, p)
	if err != nil {
		return nil, err
	}
	if offset > fi.Size {
		return nil, fmt.Errorf("opening %s: offset %d is beyond the end of the file (%d bytes)", fi.Path, offset, fi.Size)
	}
	if offset == 0 && (length < 0 || length >= fi.Size) && fi.Size >= archiveMin {
		if f, ok := s.files.openArchive(ctx, fi, target); ok {
			return f, nil
		}
	}
	return s.files.openAt(ctx, fi, target, offset, length)
}

// archiveMin is the size from which a whole file is read through the archive API: its
// throughput pays for the tens of milliseconds it takes to start.
const archiveMin = 4 << 20

// openArchive reads the whole file target through a transfer container. It reports
// false when that is not possible (off the volume, no transfer container, a symbolic
// link among the directories, a file that changed), and the caller reads with dd.
func (s *fileStore) openArchive(ctx context.Context, fi boxapi.FileInfo, target string) (*boxapi.File, bool) {
	if !s.caps().HelperContainers || !s.plainOnVolume(ctx, target) {
		return nil, false
	}
	id, release := s.transferTarget(ctx)
	if id == "" {
		return nil, false
	}
	rc, _, err := s.cli.CopyOut(ctx, id, target)
	if err != nil {
		release(!cerrdefs.IsNotFound(err))
		s.log.Debug("reading through a transfer container", zap.String("path", fi.Path), zap.Error(err))
		return nil, false
	}
	body, err := archiveBody(rc, fi.Size)
	if err != nil {
		rc.Close()
		release(true)
		s.log.Debug("reading through a transfer container", zap.String("path", fi.Path), zap.Error(err))
		return nil, false
	}
	var once sync.Once
	closer := closerFunc(func() error {
		err := rc.Close()
		once.Do(func() { release(true) })
		return err
	})
	return &boxapi.File{ReadCloser: tarFile{Reader: body, Closer: closer}, FileInfo: fi}, true
}

// archiveHeaderMax bounds what is read of an archive before its file's bytes: the tar
// header, with PAX records for a long name or extended attributes (the file's, so the
// sandbox's to choose).
const archiveHeaderMax = 256 << 10

// archiveBody reads the first header of the tar stream r, reading at most
// archiveHeaderMax bytes, and returns a reader of that entry's bytes: exactly size of
// them, the size Stat saw. An entry that is not a regular file of that size is an
// error (the file changed meanwhile).
func archiveBody(r io.Reader, size int64) (io.Reader, error) {
	hr := &io.LimitedReader{R: r, N: archiveHeaderMax}
	tr := tar.NewReader(hr)
	h, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("reading the archive's header: %w", err)
	}
	if h.Typeflag != tar.TypeReg || h.Size != size {
		return nil, fmt.Errorf("the archive holds %q of type %q and %d bytes, not a file of %d bytes", human.Clip(h.Name, 100), h.Typeflag, h.Size, size)
	}
	// The bytes follow, as many as the header says: archive/tar reads no further.
	hr.N = math.MaxInt64
	return tr, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// plainOnVolume reports whether the absolute, clean path p is on the volume with no
// symbolic link among its directories, so that a transfer container, which resolves
// links in a root of its own, finds the same file.
func (s *fileStore) plainOnVolume(ctx context.Context, p string) bool {
	if !onVolume(p) || p == boxapi.WorkDir {
		return false
	}
	dirs := strings.Split(strings.TrimPrefix(p, boxapi.WorkDir+"/"), "/")
	cur := boxapi.WorkDir
	for _, d := range dirs[:len(dirs)-1] {
		cur += "/" + d
		st, err := s.cli.StatPath(ctx, s.cfg.Container, cur)
		if err != nil || !st.Mode.IsDir() || st.Mode&fs.ModeSymlink != 0 {
			return false
		}
	}
	return true
}

// openAt reads from offset with dd, which seeks (GNU coreutils and busybox alike; only
// POSIX operands are used): it starts at the block holding offset, and the bytes before
// offset in that block are discarded here. A reader started ahead of need serves the
// request when there is one; a fresh dd otherwise, or when that reader failed.
func (s *fileStore) openAt(ctx context.Context, fi boxapi.FileInfo, target string, offset, length int64) (*boxapi.File, error) {
	skip := offset % rangeBlock
	count := int64(-1)
	if length >= 0 {
		count = (skip + length + rangeBlock - 1) / rangeBlock
	}
	if e := s.sb.runner.takeWarm(); e != nil {
		if err := e.request(target, offset/rangeBlock, count); err == nil {
			e.bind(ctx)
			if f, err := s.readFrom(ctx, e, fi, offset, length); err == nil {
				return f, nil
			}
		}
		e.Close()
	}
	argv := []string{"dd", "if=" + target, fmt.Sprintf("bs=%d", rangeBlock), fmt.Sprintf("skip=%d", offset/rangeBlock)}
	if count >= 0 {
		argv = append(argv, fmt.Sprintf("count=%d", count))
	}
	e, err := s.sb.runner.startStream(ctx, "/", argv, nil)
	if err != nil {
		return nil, fmt.Errorf("reading %s in the sandbox: %w", fi.Path, err)
	}
	return s.readFrom(ctx, e, fi, offset, length)
}

// readFrom skips to offset in the block dd started at and checks that bytes come.
func (s *fileStore) readFrom(ctx context.Context, e *execStream, fi boxapi.FileInfo, offset, length int64) (*boxapi.File, error) {
	br := bufio.NewReaderSize(e, 64<<10)
	_, err := br.Discard(int(offset % rangeBlock))
	want := length != 0 && offset < fi.Size
	if err == nil && want {
		_, err = br.Peek(1)
	}
	if err != nil && want {
		// Nothing came: dd could not read the file. Say why in the sandbox's terms.
		code, stderr, _ := e.wait(ctx)
		e.Close()
		switch {
		case strings.Contains(stderr, "No such file"):
			return nil, fmt.Errorf("opening %s: %w", fi.Path, boxapi.ErrNotFound)
		case strings.Contains(stderr, "Is a directory"):
			return nil, fmt.Errorf("opening %s: %w", fi.Path, boxapi.ErrIsDir)
		}
		return nil, fmt.Errorf("reading %s at offset %d in the sandbox (dd exit %d: %s): %w", fi.Path, offset, code, human.Clip(stderr, 200), err)
	}
	var r io.Reader = br
	if length >= 0 {
		r = io.LimitReader(br, length)
	}
	return &boxapi.File{ReadCloser: tarFile{Reader: r, Closer: e}, FileInfo: fi}, nil
}

// tarFile reads one file's bytes from an archive and closes the archive stream.
type tarFile struct {
	io.Reader
	io.Closer
}

// statRegular stats p following symbolic links and checks it is a regular file. It
// returns the path of the file the links lead to.
func (s *fileStore) statRegular(ctx context.Context, p string) (boxapi.FileInfo, string, error) {
	if !path.IsAbs(p) {
		return boxapi.FileInfo{}, "", fmt.Errorf("%q: %w", p, boxapi.ErrRelativePath)
	}
	p = path.Clean(p)
	if err := s.sb.Ensure(ctx); err != nil {
		return boxapi.FileInfo{}, "", err
	}
	if sess := s.sb.link.agentSession(ctx); sess != nil {
		fi, err := agentStat(ctx, sess, p)
		if !agentGone(ctx, err) {
			switch {
			case err != nil:
			case fi.Mode.IsDir():
				err = fmt.Errorf("%s: %w", p, boxapi.ErrIsDir)
			case !fi.Mode.IsRegular():
				err = fmt.Errorf("%s: %w", p, boxapi.ErrNotRegular)
			}
			return fi, p, err
		}
	}
	st, target, err := s.statFollow(ctx, p)
	if cerrdefs.IsNotFound(err) && s.containerMissing(ctx) {
		// The path may exist; it is the container that went away.
		s.sb.life.invalidate()
		if err := s.sb.Ensure(ctx); err != nil {
			return boxapi.FileInfo{}, "", err
		}
		st, target, err = s.statFollow(ctx, p)
	}
	if err != nil {
		switch {
		case cerrdefs.IsNotFound(err):
			return boxapi.FileInfo{}, "", fmt.Errorf("stat %s: %w", p, boxapi.ErrNotFound)
		case errors.Is(err, errLinkLoop) || pathRefused(err):
			// The engine answered, so the trouble is the path (a symbolic link loop, a
			// component that is not a directory). Its error text names the engine's
			// API URL and socket, which is nobody's business: say what the path is.
			return boxapi.FileInfo{Path: p, Name: path.Base(p)}, "", fmt.Errorf("%s: %w (it does not lead to a file: a symbolic link loop or a broken path)", p, boxapi.ErrNotRegular)
		}
		return boxapi.FileInfo{}, "", fmt.Errorf("stat %s in the sandbox: %w", p, err)
	}
	fi := boxapi.FileInfo{Path: p, Name: path.Base(p), Size: st.Size, ModTime: st.Mtime, Mode: st.Mode}
	switch {
	case st.Mode.IsDir():
		return fi, "", fmt.Errorf("%s: %w", p, boxapi.ErrIsDir)
	case !st.Mode.IsRegular():
		return fi, "", fmt.Errorf("%s: %w", p, boxapi.ErrNotRegular)
	}
	return fi, target, nil
}

// statFollow stats p and, while it is a symbolic link, what it points to.
func (s *fileStore) statFollow(ctx context.Context, p string) (boxapi.PathStat, string, error) {
	for range maxSymlinks {
		st, err := s.cli.StatPath(ctx, s.cfg.Container, p)
		if err != nil {
			return st, p, err
		}
		if st.Mode&fs.ModeSymlink == 0 {
			return st, p, nil
		}
		next := st.LinkTarget
		if !path.IsAbs(next) {
			next = path.Join(path.Dir(p), next)
		}
		p = next
	}
	return boxapi.PathStat{}, p, errLinkLoop
}

// errLinkLoop is a chain of symbolic links longer than maxSymlinks.
var errLinkLoop = errors.New("too many levels of symbolic links")

// pathRefused reports whether the engine answered a stat with an error about the path
// itself (it says 500 for a symbolic link loop inside the path), as opposed to not
// answering at all.
func pathRefused(err error) bool {
	return cerrdefs.IsInternal(err) || cerrdefs.IsInvalidArgument(err) || cerrdefs.IsUnknown(err)
}

// containerMissing reports whether the sandbox container does not exist.
func (s *fileStore) containerMissing(ctx context.Context) bool {
	_, err := s.cli.InspectBox(ctx, s.cfg.Container)
	return cerrdefs.IsNotFound(err)
}
