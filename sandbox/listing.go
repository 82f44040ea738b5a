// ListFiles and the strict reader of what its listing script prints.

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

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
func (s *Sandbox) ListFiles(ctx context.Context, dir string, max int) ([]boxapi.DirEntry, error) {
	out, err := s.files.listFiles(ctx, dir, max)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	slices.SortFunc(out, func(a, b boxapi.DirEntry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// listFiles lists through the agent, else with listScript in an exec.
func (s *fileStore) listFiles(ctx context.Context, dir string, max int) ([]boxapi.DirEntry, error) {
	if sess, err := s.sb.link.fileAgent(ctx, dir); err != nil {
		return nil, err
	} else if sess != nil {
		out, err := agentList(ctx, sess, path.Clean(dir), max)
		if !agentGone(ctx, err) {
			return out, err
		}
	}
	res, err := s.sb.runner.run(ctx, script(listScript, path.Clean(dir), strconv.Itoa(max)), uploadStepTimeout, 4<<20, nil)
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 || res.StdoutTruncated {
		return nil, fmt.Errorf("exit code %d: %s", res.ExitCode, human.Clip(strings.TrimSpace(res.Stderr), 300))
	}
	if res.Stdout == "" {
		return nil, nil
	}
	return parseListing(res.Stdout, max)
}

// errListing is output of the listing script that is not what it prints.
var errListing = errors.New("unexpected output from the listing")

// parseListing reads what listScript prints: for each file a "size mtime" line, then a
// NUL, then the names, each ended by a NUL. It refuses more than max files, names that
// are empty, hold a slash or are longer than a file name can be, and numbers that are
// not. It holds at most max entries, whose names share out's memory. The programs the
// script runs are the sandbox's to replace, so none of this is taken on trust.
func parseListing(out string, max int) ([]boxapi.DirEntry, error) {
	stats, names, ok := strings.Cut(out, "\x00")
	if !ok || !strings.HasSuffix(stats, "\n") || !strings.HasSuffix(names, "\x00") {
		return nil, errListing
	}
	var list []boxapi.DirEntry
	for stats != "" {
		if len(list) == max {
			return nil, errors.New("more files listed than asked for")
		}
		var line, name string
		line, stats, _ = strings.Cut(stats, "\n")
		name, names, ok = strings.Cut(names, "\x00")
		if !ok || name == "" || len(name) > boxapi.MaxNameBytes || strings.Contains(name, "/") {
			return nil, errListing
		}
		a, b, _ := strings.Cut(line, " ")
		if len(a) > 20 || len(b) > 20 {
			return nil, errListing
		}
		size, err1 := strconv.ParseInt(a, 10, 64)
		mtime, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil || size < 0 {
			return nil, errListing
		}
		list = append(list, boxapi.DirEntry{Name: name, Size: size, ModTime: time.Unix(mtime, 0)})
	}
	if names != "" {
		return nil, errListing
	}
	return list, nil
}
