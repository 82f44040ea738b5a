// Upload streams a file into the sandbox under a hidden temporary name and gives it
// its final name only once it is complete.

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// tempPrefix starts the hidden name a file is written under until it is complete.
const tempPrefix = boxapi.UploadTempPrefix

// uploadStepTimeout bounds each short step of an upload (mkdir, rename, removal).
const uploadStepTimeout = 30 * time.Second

// Upload streams r into the container as the file name in the directory dir (created
// when missing), in bounded memory and without touching the host's disk. The bytes go
// to a hidden temporary file in dir which is renamed only once complete; an existing
// file is never replaced: the first free name among "name", "name (1).ext", ... is
// taken and reported. When r fails, ends early, or passes opts.Max bytes
// ([boxapi.ErrTooLarge]), nothing is left behind.
//
// A stream of known length into a directory on the volume goes through Docker's archive
// API and a transfer container (the fastest path, and one that leaves the sandbox's
// execs free however slowly the bytes come); anything else through the agent when it
// runs (a stream of its own), else through the standard input of `cat` in an exec. The container is created or repaired first, as for Exec.
func (s *Sandbox) Upload(ctx context.Context, dir, name string, r io.Reader, opts boxapi.UploadOptions) (boxapi.UploadResult, error) {
	if !path.IsAbs(dir) {
		return boxapi.UploadResult{}, fmt.Errorf("%q: %w", dir, boxapi.ErrRelativePath)
	}
	if strings.ContainsRune(dir, 0) {
		return boxapi.UploadResult{}, fmt.Errorf("directory %q contains a NUL byte: %w", dir, boxapi.ErrBadName)
	}
	dir = path.Clean(dir)
	if !validName(name) {
		return boxapi.UploadResult{}, fmt.Errorf("%q: %w", name, boxapi.ErrBadName)
	}
	if opts.Max > 0 && opts.Size > opts.Max {
		return boxapi.UploadResult{}, fmt.Errorf("%d bytes: %w of %d bytes", opts.Size, boxapi.ErrTooLarge, opts.Max)
	}
	if err := s.Ensure(ctx); err != nil {
		return boxapi.UploadResult{}, err
	}
	sess := s.link.agentSession(ctx)
	// The transfer container is fetched while the guard starts.
	type pick struct {
		id      string
		release func(ok bool)
	}
	var picked chan pick
	if opts.Size >= 0 && onVolume(dir) && !s.link.isDirect(sess) {
		picked = make(chan pick, 1)
		go func() {
			id, release := s.files.transferTarget(ctx)
			picked <- pick{id, release}
		}()
	}
	tmpName := tempPrefix + newExecID() + ".part"
	names := candidates(name)
	g, realDir, err := s.files.startGuard(ctx, dir, tmpName, names)
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
		return boxapi.UploadResult{}, err
	}
	tmp := path.Join(realDir, tmpName)
	src := &limitedReader{r: r, max: opts.Max}
	var n int64
	switch {
	case via.id != "":
		n, err = s.files.copyIn(ctx, via.id, realDir, tmpName, src, opts.Size)
		via.release(!cerrdefs.IsNotFound(err))
	case sess != nil:
		n, err = s.link.agentUpload(ctx, sess, tmp, src, opts.Size)
	default:
		n, err = s.files.catIn(ctx, tmp, src)
		if err == nil {
			err = s.files.checkSize(ctx, tmp, n)
		}
	}
	if src.over.Load() {
		err = fmt.Errorf("more than %d bytes: %w", opts.Max, boxapi.ErrTooLarge)
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
			s.files.removeTemp(ctx, tmp)
		}
		if via.id != "" {
			s.files.settleRemoved(ctx, tmp)
		}
		return boxapi.UploadResult{}, err
	case ferr != nil || final == "":
		s.files.removeTemp(ctx, tmp)
		return boxapi.UploadResult{}, fmt.Errorf("naming the uploaded file: %w", ferr)
	case !slices.Contains(names, final):
		// The guard answers from inside the container: only a name it was given may
		// come back as where the file is.
		s.files.removeTemp(ctx, tmp)
		return boxapi.UploadResult{}, fmt.Errorf("naming the uploaded file: the sandbox answered a name it was not offered: %.100q", final)
	}
	// The directory as it really is: a signed directory that is a symbolic link sends
	// the file elsewhere, and the answer must name where it went.
	return boxapi.UploadResult{Path: path.Join(realDir, final), Name: final, Renamed: final != name, Size: n}, nil
}
