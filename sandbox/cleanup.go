package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"go.uber.org/zap"
)

// maxCleanupReport bounds the list of deleted paths read back from one pass.
const maxCleanupReport = 16 << 20

// cleanupScript deletes every top-level entry of WorkDir in which nothing (the entry
// itself included) was modified during the last $1 seconds, and prints the deleted paths
// NUL-separated. An entry is kept whole when find cannot read all of it. It uses only
// what both busybox and Debian's coreutils/findutils offer.
const cleanupScript = `ttl=$1
ref=/tmp/.mcp-sandbox-cleanup.$$
touch -d "@$(( $(date +%s) - ttl ))" "$ref" || exit 1
trap 'rm -f "$ref"' EXIT
shopt -s dotglob nullglob
for e in ` + boxapi.WorkDir + `/*; do
	recent=$(find "$e" -newer "$ref" -print -quit 2>/dev/null) || continue
	[ -z "$recent" ] || continue
	rm -rf -- "$e" && printf '%s\0' "$e"
done
exit 0`

// Cleanup deletes, in one pass, the top-level entries of WorkDir that have been idle for
// longer than Config.FileTTL: an entry goes only when neither it nor anything inside it
// was modified within the TTL. It returns the deleted paths. With FileTTL 0 it does
// nothing.
func (s *Sandbox) Cleanup(ctx context.Context) ([]string, error) {
	ttl := int64(s.cfg.FileTTL / time.Second)
	if ttl <= 0 {
		return nil, nil
	}
	var out bytes.Buffer
	res, err := s.runner.run(ctx, "bash -c "+shellQuote(cleanupScript)+" cleanup "+strconv.FormatInt(ttl, 10),
		s.cfg.ExecTimeout, minMaxOutput, func(st boxapi.Stream, p []byte) {
			if st == boxapi.Stdout && out.Len()+len(p) <= maxCleanupReport {
				out.Write(p)
			}
		})
	if err != nil {
		return nil, fmt.Errorf("cleaning up idle files: %w", err)
	}
	paths := splitNUL(out.Bytes())
	switch {
	case res.Cancelled:
		return paths, fmt.Errorf("cleaning up idle files: %w", context.Cause(ctx))
	case res.TimedOut:
		return paths, fmt.Errorf("cleaning up idle files: timed out after %v", s.cfg.ExecTimeout)
	case res.ExitCode != 0:
		return paths, fmt.Errorf("cleaning up idle files: script exited with %d: %s", res.ExitCode, human.Clip(strings.TrimSpace(res.Stderr), 300))
	}
	return paths, nil
}

// RunCleanup runs [Sandbox.Cleanup] every Config.CleanupInterval until ctx is done,
// calling onDeleted (if not nil) with the paths of each pass that deleted something. A
// pass that finds the container stopped is skipped and run again as soon as Ensure
// starts the container. It
// returns at once when FileTTL is 0. Errors and panics of a pass are logged, never fatal.
func (s *Sandbox) RunCleanup(ctx context.Context, onDeleted func(paths []string)) {
	if s.cfg.FileTTL <= 0 || s.cfg.CleanupInterval <= 0 {
		return
	}
	tick := time.NewTicker(s.cfg.CleanupInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.life.cleanupKick:
		}
		s.life.cleanupPass(ctx, onDeleted)
	}
}

func (s *lifecycle) cleanupPass(ctx context.Context, onDeleted func([]string)) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in sandbox cleanup", zap.Any("panic", r), zap.Stack("stack"))
		}
	}()
	// Like other upkeep, a pass never creates or starts the container: there is
	// nothing to clean in one that was removed on purpose.
	paths, err := s.sb.Cleanup(upkeep(ctx))
	switch {
	case errors.Is(err, errNotRunning):
		s.noteCleanupSkipped()
		s.log.Debug("sandbox cleanup skipped", zap.Error(err))
	case err != nil && ctx.Err() == nil:
		s.log.Error("sandbox cleanup failed", zap.Error(err))
	}
	if len(paths) == 0 {
		return
	}
	s.log.Info("deleted idle sandbox files", zap.Strings("paths", paths), zap.Duration("ttl", s.cfg.FileTTL))
	if onDeleted != nil {
		onDeleted(paths)
	}
}

func splitNUL(b []byte) []string {
	var out []string
	for _, p := range bytes.Split(b, []byte{0}) {
		if len(p) > 0 {
			out = append(out, string(p))
		}
	}
	return out
}

// shellQuote quotes s for bash as one word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
