package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// WriteFile creates or replaces the file at the absolute path p with data, byte for
// byte, in place through the agent, else through Docker's archive API (no shell, no
// quoting). Missing parent directories
// are created. A file that exists keeps its permission bits (a new one gets 0644), and
// a symbolic link is written through, as a shell redirection would. It fails with
// [boxapi.ErrIsDir] when p is a directory and [boxapi.ErrNotRegular] when it is something else.
// created says whether the file is new.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte) (fi boxapi.FileInfo, created bool, err error) {
	if !path.IsAbs(p) {
		return boxapi.FileInfo{}, false, fmt.Errorf("%q: %w", p, boxapi.ErrRelativePath)
	}
	p = path.Clean(p)
	if sess, err := s.link.fileAgent(ctx, p); err != nil {
		return boxapi.FileInfo{}, false, err
	} else if sess != nil {
		rep, _, err := agentWrite(ctx, sess, agentwire.WriteRequest{Path: p, Mkdir: true}, bytes.NewReader(data), nil)
		if !agentGone(ctx, err) {
			if err != nil {
				return boxapi.FileInfo{}, false, fmt.Errorf("writing %s: %w", p, err)
			}
			fi := replyInfo(p, rep)
			fi.Mode &= fs.ModePerm
			return fi, rep.Created, nil
		}
	}
	fi, target, err := s.files.statRegular(ctx, p)
	mode := fs.FileMode(0o644)
	switch {
	case err == nil:
		mode = fi.Mode
	case errors.Is(err, boxapi.ErrNotFound):
		created = true
		target, err = s.files.resolveNew(ctx, p)
		if err != nil {
			return boxapi.FileInfo{}, false, err
		}
	default:
		return boxapi.FileInfo{}, false, err
	}
	if err := s.files.putFile(ctx, target, data, mode); err != nil {
		return boxapi.FileInfo{}, false, fmt.Errorf("writing %s: %w", p, err)
	}
	return boxapi.FileInfo{Path: p, Name: path.Base(p), Size: int64(len(data)), ModTime: time.Now(), Mode: mode & fs.ModePerm}, created, nil
}

// resolveNew returns where a new file at p goes: p itself, or the target of a dangling
// symbolic link at p. It creates the parent directories that are missing.
func (s *fileStore) resolveNew(ctx context.Context, p string) (string, error) {
	st, err := s.cli.StatPath(ctx, s.cfg.Container, p)
	if err == nil && st.Mode&fs.ModeSymlink != 0 {
		// A dangling link: write where it points, as a shell redirection would.
		if t := st.LinkTarget; path.IsAbs(t) {
			p = path.Clean(t)
		} else {
			p = path.Join(path.Dir(p), t)
		}
	}
	dir := path.Dir(p)
	dst, _, err := s.statFollow(ctx, dir)
	switch {
	case err == nil && dst.Mode.IsDir():
		return p, nil
	case err == nil:
		return "", fmt.Errorf("%s: %s is not a directory: %w", p, dir, boxapi.ErrNotRegular)
	case !cerrdefs.IsNotFound(err):
		return "", fmt.Errorf("%s: %w (a parent does not lead to a directory)", p, boxapi.ErrNotRegular)
	}
	code, _, stderr, err := s.sb.runner.runCapture(ctx, []string{"mkdir", "-p", "--", dir}, nil, 1024)
	if err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	if code != 0 {
		return "", fmt.Errorf("creating %s: %s", dir, human.Clip(stderr, 300))
	}
	return p, nil
}

// writeBack replaces the bytes of the existing file target: in place through the agent,
// else with putFile.
func (s *fileStore) writeBack(ctx context.Context, target string, data []byte, mode fs.FileMode) error {
	if sess := s.sb.link.agentSession(ctx); sess != nil {
		_, _, err := agentWrite(ctx, sess, agentwire.WriteRequest{Path: target}, bytes.NewReader(data), nil)
		if !agentGone(ctx, err) {
			return err
		}
	}
	return s.putFile(ctx, target, data, mode)
}

// putFile copies one file into the container with a one-entry archive.
func (s *fileStore) putFile(ctx context.Context, target string, data []byte, mode fs.FileMode) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     path.Base(target),
		Size:     int64(len(data)),
		Mode:     int64(mode & (fs.ModePerm)),
		ModTime:  time.Now(),
		Format:   tar.FormatPAX,
	}
	if mode&fs.ModeSetuid != 0 {
		hdr.Mode |= 0o4000
	}
	if mode&fs.ModeSetgid != 0 {
		hdr.Mode |= 0o2000
	}
	if mode&fs.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	err := s.cli.CopyIn(ctx, s.cfg.Container, path.Dir(target), &buf)
	if err != nil && strings.Contains(err.Error(), "directory") {
		return fmt.Errorf("%w: %s", boxapi.ErrIsDir, target)
	}
	return err
}

// maxEditSize bounds the files EditFile reads whole into memory.
const maxEditSize = 16 << 20

// EditFile replaces the one occurrence of old in the regular file at p with new. When
// old occurs zero times or more than once it changes nothing and returns a
// [*MatchError]. The file keeps its permission bits. A file changed by someone else
// between the read and the write is not overwritten.
func (s *Sandbox) EditFile(ctx context.Context, p, old, new string) (boxapi.EditResult, error) {
	if old == "" {
		return boxapi.EditResult{}, errors.New("the text to replace is empty")
	}
	fi, err := s.Stat(ctx, p)
	if err != nil {
		return boxapi.EditResult{}, err
	}
	if fi.Size > maxEditSize {
		return boxapi.EditResult{}, fmt.Errorf("%s has %d bytes, more than %d: %w", fi.Path, fi.Size, maxEditSize, boxapi.ErrTooLarge)
	}
	f, err := s.Open(ctx, p, 0)
	if err != nil {
		return boxapi.EditResult{}, err
	}
	var content bytes.Buffer
	_, err = content.ReadFrom(f)
	f.Close()
	if err != nil {
		return boxapi.EditResult{}, fmt.Errorf("reading %s: %w", fi.Path, err)
	}
	text := content.String()
	var at []int
	count := 0
	for i := 0; ; {
		j := strings.Index(text[i:], old)
		if j < 0 {
			break
		}
		count++
		if len(at) < 20 {
			at = append(at, i+j)
		}
		i += j + 1
	}
	lines := make([]int, len(at))
	for k, off := range at {
		lines[k] = strings.Count(text[:off], "\n") + 1
	}
	if count != 1 {
		e := &boxapi.MatchError{Count: count, Lines: lines}
		if count == 0 {
			e.Near = boxapi.Closest(text, old)
		}
		return boxapi.EditResult{}, e
	}
	edited := text[:at[0]] + new + text[at[0]+len(old):]

	now, target, err := s.files.statRegular(ctx, fi.Path)
	if err != nil {
		return boxapi.EditResult{}, err
	}
	if now.Size != fi.Size || !now.ModTime.Equal(fi.ModTime) {
		return boxapi.EditResult{}, fmt.Errorf("%s changed while it was being edited; read it again and retry", fi.Path)
	}
	if err := s.files.writeBack(ctx, target, []byte(edited), now.Mode); err != nil {
		return boxapi.EditResult{}, fmt.Errorf("writing %s: %w", fi.Path, err)
	}
	fi.Size, fi.ModTime, fi.Mode = int64(len(edited)), time.Now(), now.Mode
	return boxapi.EditResult{FileInfo: fi, Line: lines[0]}, nil
}
