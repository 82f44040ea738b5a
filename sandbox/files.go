package sandbox

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// maxSymlinks bounds how many symbolic links one lookup follows (as Linux does).
const maxSymlinks = 40

// FileInfo describes a file in the sandbox.
type FileInfo struct {
	Path    string      // the absolute path asked for, cleaned
	Name    string      // base name of Path
	Size    int64       // size in bytes of the file Path leads to
	ModTime time.Time   // modification time of that file
	Mode    fs.FileMode // mode of that file (symbolic links are followed)
}

// File is an open file in the sandbox: a stream of its bytes plus what Stat said.
// Close it to release the connection to Docker.
type File struct {
	io.ReadCloser
	FileInfo
}

// Stat describes the regular file at the absolute path p, following symbolic links. It
// fails with [ErrRelativePath], [ErrNotFound], [ErrIsDir] or [ErrNotRegular] (wrapped);
// for the last two the returned FileInfo is filled in.
func (s *Sandbox) Stat(ctx context.Context, p string) (FileInfo, error) {
	fi, _, err := s.statRegular(ctx, p)
	return fi, err
}

// Open streams the regular file at the absolute path p, starting offset bytes into it
// (0 for the whole file). Memory use does not depend on the file's size. ctx governs the
// whole read, not only the call. Errors are those of [Sandbox.Stat], plus an error for an
// offset beyond the end of the file.
func (s *Sandbox) Open(ctx context.Context, p string, offset int64) (*File, error) {
	if offset < 0 {
		return nil, fmt.Errorf("opening %s: negative offset %d", p, offset)
	}
	fi, target, err := s.statRegular(ctx, p)
	if err != nil {
		return nil, err
	}
	if offset > fi.Size {
		return nil, fmt.Errorf("opening %s: offset %d is beyond the end of the file (%d bytes)", fi.Path, offset, fi.Size)
	}
	rc, _, err := s.cli.CopyFromContainer(ctx, s.cfg.Container, target)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("opening %s: %w", fi.Path, ErrNotFound)
		}
		return nil, fmt.Errorf("copying %s out of the sandbox: %w", fi.Path, err)
	}
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("reading archive of %s: %w", fi.Path, err)
	}
	if hdr.Typeflag != tar.TypeReg {
		// The file changed between the stat and the copy.
		rc.Close()
		return nil, fmt.Errorf("opening %s: %w", fi.Path, ErrNotRegular)
	}
	fi.Size, fi.ModTime = hdr.Size, hdr.ModTime
	if offset > fi.Size {
		rc.Close()
		return nil, fmt.Errorf("opening %s: offset %d is beyond the end of the file (%d bytes)", fi.Path, offset, fi.Size)
	}
	// Docker has no ranged copy; skipping through the stream keeps memory flat.
	if _, err := io.CopyN(io.Discard, tr, offset); err != nil {
		rc.Close()
		return nil, fmt.Errorf("skipping to offset %d of %s: %w", offset, fi.Path, err)
	}
	return &File{ReadCloser: tarFile{Reader: tr, Closer: rc}, FileInfo: fi}, nil
}

// tarFile reads one file's bytes from an archive and closes the archive stream.
type tarFile struct {
	io.Reader
	io.Closer
}

// statRegular stats p following symbolic links and checks it is a regular file. It
// returns the path of the file the links lead to.
func (s *Sandbox) statRegular(ctx context.Context, p string) (FileInfo, string, error) {
	if !path.IsAbs(p) {
		return FileInfo{}, "", fmt.Errorf("%q: %w", p, ErrRelativePath)
	}
	p = path.Clean(p)
	if err := s.Ensure(ctx); err != nil {
		return FileInfo{}, "", err
	}
	st, target, err := s.statFollow(ctx, p)
	if cerrdefs.IsNotFound(err) && s.containerMissing(ctx) {
		// The path may exist; it is the container that went away.
		s.invalidate()
		if err := s.Ensure(ctx); err != nil {
			return FileInfo{}, "", err
		}
		st, target, err = s.statFollow(ctx, p)
	}
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return FileInfo{}, "", fmt.Errorf("stat %s: %w", p, ErrNotFound)
		}
		return FileInfo{}, "", fmt.Errorf("stat %s in the sandbox: %w", p, err)
	}
	fi := FileInfo{Path: p, Name: path.Base(p), Size: st.Size, ModTime: st.Mtime, Mode: st.Mode}
	switch {
	case st.Mode.IsDir():
		return fi, "", fmt.Errorf("%s: %w", p, ErrIsDir)
	case !st.Mode.IsRegular():
		return fi, "", fmt.Errorf("%s: %w", p, ErrNotRegular)
	}
	return fi, target, nil
}

// statFollow stats p and, while it is a symbolic link, what it points to.
func (s *Sandbox) statFollow(ctx context.Context, p string) (container.PathStat, string, error) {
	for range maxSymlinks {
		st, err := s.cli.ContainerStatPath(ctx, s.cfg.Container, p)
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
	return container.PathStat{}, p, fmt.Errorf("following links from %s: too many levels of symbolic links", p)
}

// containerMissing reports whether the sandbox container does not exist.
func (s *Sandbox) containerMissing(ctx context.Context) bool {
	_, err := s.cli.ContainerInspect(ctx, s.cfg.Container)
	return cerrdefs.IsNotFound(err)
}
