package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

// Transfer containers.
//
// Docker's archive API locks the container it reads or writes for as long as the
// archive streams: while a person uploads a large file over a slow line straight into
// the sandbox, every exec create waits for the upload to end. Files under WorkDir live
// on the sandbox's volume, so large transfers there go through a transfer container
// instead: one created (never started) from the sandbox's image, with the same volume
// at the same path, no network and no process. Its lock stops nobody, and the bytes land
// on the volume the sandbox sees.
//
// A transfer container serves one transfer at a time. Idle ones are kept for
// transferLinger so that several files in a row do not each pay for a create, then
// removed: while one exists, the volume cannot be removed.
//
// At most transferMax are in use at once; past that, transfers go through execs in the
// sandbox (slower, and never blocking).
const (
	transferLinger  = time.Minute
	transferIdleMax = 2
	transferMax     = 8
	// transferStale is the age past which a transfer container left by a server that
	// stopped without removing it is swept.
	transferStale = time.Hour

	labelTransferOf = "mcp-sandbox.transfer-of"
)

// transfers is the pool of idle transfer containers of one Sandbox.
type transfers struct {
	mu     sync.Mutex
	idle   []idleTransfer // most recently used last
	timer  *time.Timer    // reaps idle ones past transferLinger
	swept  bool           // stale containers of earlier runs were looked for
	closed bool
	inUse  int
}

// errTransfersBusy is takeTransfer's answer when transferMax are in use.
var errTransfersBusy = errors.New("all transfer containers are in use")

type idleTransfer struct {
	id    string
	since time.Time
}

// onVolume reports whether the absolute, clean path p lies on the sandbox's volume.
func onVolume(p string) bool {
	return p == boxapi.WorkDir || strings.HasPrefix(p, boxapi.WorkDir+"/")
}

// takeTransfer returns a transfer container for the caller's sole use: an idle one that
// still exists, or a new one. Give it back with putTransfer.
func (s *fileStore) takeTransfer(ctx context.Context) (string, error) {
	s.xfer.mu.Lock()
	sweep := !s.xfer.swept
	s.xfer.swept = true
	busy := s.xfer.inUse >= transferMax
	if !busy {
		s.xfer.inUse++
	}
	s.xfer.mu.Unlock()
	if busy {
		return "", errTransfersBusy
	}
	if sweep {
		go s.sweepTransfers(context.WithoutCancel(ctx))
	}
	id, err := s.takeIdleOrNew(ctx)
	if err != nil {
		s.xfer.mu.Lock()
		s.xfer.inUse--
		s.xfer.mu.Unlock()
	}
	return id, err
}

func (s *fileStore) takeIdleOrNew(ctx context.Context) (string, error) {
	for {
		s.xfer.mu.Lock()
		n := len(s.xfer.idle)
		if n == 0 {
			s.xfer.mu.Unlock()
			break
		}
		it := s.xfer.idle[n-1]
		s.xfer.idle = s.xfer.idle[:n-1]
		s.xfer.mu.Unlock()
		// Someone may have removed it: a stat also mounts the volume, which is what
		// the transfer needs.
		if _, err := s.cli.StatPath(ctx, it.id, boxapi.WorkDir); err == nil {
			return it.id, nil
		}
		s.removeTransfer(it.id)
	}
	return s.createTransfer(ctx)
}

func (s *fileStore) createTransfer(ctx context.Context) (string, error) {
	resp, err := dockerOf(s.cli).ContainerCreate(ctx,
		&container.Config{
			Image:           s.cfg.Image,
			Entrypoint:      []string{"true"}, // never started
			Cmd:             []string{},
			NetworkDisabled: true,
			WorkingDir:      boxapi.WorkDir,
			Labels:          map[string]string{labelTransferOf: s.cfg.Container},
		},
		&container.HostConfig{
			NetworkMode: "none",
			Mounts:      []mount.Mount{{Type: mount.TypeVolume, Source: s.cfg.Volume, Target: boxapi.WorkDir}},
			CapDrop:     []string{"ALL"},
		},
		nil, nil, s.cfg.Container+"-transfer-"+newExecID()[:12])
	if err != nil {
		return "", fmt.Errorf("creating a transfer container: %w", err)
	}
	return resp.ID, nil
}

// putTransfer gives a transfer container back: kept idle for the next transfer when it
// worked (ok), removed otherwise or when enough are idle.
func (s *fileStore) putTransfer(id string, ok bool) {
	s.xfer.mu.Lock()
	s.xfer.inUse--
	if !ok || s.xfer.closed || len(s.xfer.idle) >= transferIdleMax {
		s.xfer.mu.Unlock()
		s.removeTransfer(id)
		return
	}
	s.xfer.idle = append(s.xfer.idle, idleTransfer{id: id, since: time.Now()})
	if s.xfer.timer == nil {
		s.xfer.timer = time.AfterFunc(transferLinger, s.reapTransfers)
	}
	s.xfer.mu.Unlock()
}

// reapTransfers removes the transfer containers idle for transferLinger.
func (s *fileStore) reapTransfers() {
	s.xfer.mu.Lock()
	var old []string
	keep := s.xfer.idle[:0]
	for _, it := range s.xfer.idle {
		if time.Since(it.since) >= transferLinger {
			old = append(old, it.id)
		} else {
			keep = append(keep, it)
		}
	}
	s.xfer.idle = keep
	s.xfer.timer = nil
	if len(keep) > 0 {
		s.xfer.timer = time.AfterFunc(transferLinger-time.Since(keep[0].since), s.reapTransfers)
	}
	s.xfer.mu.Unlock()
	for _, id := range old {
		s.removeTransfer(id)
	}
}

func (s *fileStore) removeTransfer(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), uploadStepTimeout)
	defer cancel()
	if err := s.cli.RemoveBox(ctx, id); err != nil && !cerrdefs.IsNotFound(err) {
		s.log.Warn("removing a transfer container", zap.String("id", id), zap.Error(err))
	}
}

// CloseTransfers removes the idle transfer containers; ones in use are removed when
// their transfer ends. Call it when the Sandbox is no longer used.
func (s *Sandbox) CloseTransfers() {
	s.files.xfer.mu.Lock()
	s.files.xfer.closed = true
	idle := s.files.xfer.idle
	s.files.xfer.idle = nil
	if s.files.xfer.timer != nil {
		s.files.xfer.timer.Stop()
		s.files.xfer.timer = nil
	}
	s.files.xfer.mu.Unlock()
	for _, it := range idle {
		s.files.removeTransfer(it.id)
	}
}

// sweepTransfers removes transfer containers of this sandbox created more than
// transferStale ago: a server that stopped without its cleanup leaves them, and they
// would keep the volume from being removed.
func (s *fileStore) sweepTransfers(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, uploadStepTimeout)
	defer cancel()
	list, err := s.cli.ListBoxes(ctx, labelTransferOf+"="+s.cfg.Container)
	if err != nil {
		s.log.Debug("listing transfer containers", zap.Error(err))
		return
	}
	for _, c := range list {
		if time.Since(c.Created) > transferStale {
			s.removeTransfer(c.ID)
		}
	}
}

// transferTarget takes a transfer container for a copy through Docker's archive API
// (the returned release gives it back, with whether the transfer worked), or returns ""
// when none is to be had: the caller then copies through an exec in the sandbox, which
// holds no lock. Callers make sure the path is on the volume.
func (s *fileStore) transferTarget(ctx context.Context) (id string, release func(ok bool)) {
	if !s.caps().HelperContainers {
		// A pod holds no lock while a file is copied, and another pod could not mount
		// a ReadWriteOnce claim beside the sandbox's: copies go through execs.
		return "", nil
	}
	id, err := s.takeTransfer(ctx)
	if err != nil {
		level := zap.WarnLevel
		if errors.Is(err, errTransfersBusy) {
			level = zap.DebugLevel
		}
		s.log.Log(level, "no transfer container; copying through an exec", zap.Error(err))
		return "", nil
	}
	return id, func(ok bool) { s.putTransfer(id, ok) }
}
