// An upload's size limit, and making sure a failed upload leaves no partial file.

package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

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
		return 0, fmt.Errorf("more than %d bytes: %w", l.max, boxapi.ErrTooLarge)
	}
	return n, err
}

// checkSize makes sure the temporary file holds every byte sent.
func (s *fileStore) checkSize(ctx context.Context, tmp string, n int64) error {
	st, err := s.cli.StatPath(ctx, s.cfg.Container, tmp)
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
func (s *fileStore) settleRemoved(ctx context.Context, tmp string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadStepTimeout)
	defer cancel()
	absent := 0
	for absent < 3 && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		_, err := s.cli.StatPath(ctx, s.cfg.Container, tmp)
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
func (s *fileStore) removeTemp(ctx context.Context, tmp string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadStepTimeout)
	defer cancel()
	code, err := s.sb.runner.collectExec(upkeep(ctx), []string{"rm", "-f", "--", tmp}, &bytes.Buffer{}, 0)
	if err != nil || code != 0 {
		s.log.Warn("removing an unfinished upload", zap.String("path", tmp), zap.Int("exit_code", code), zap.Error(err))
	}
}
