// MakeDir, and script, the command line that runs a short bash script with arguments.

package sandbox

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// prepareScript creates the directory $1 and removes temporary files of uploads that
// were cut off by a crash more than a day ago.
const prepareScript = `mkdir -p -- "$1" || exit 2
find "$1" -maxdepth 1 -name '` + tempPrefix + `*' -type f -mmin +1440 -exec rm -f -- {} + 2>/dev/null
exit 0`

// MakeDir makes sure the absolute path dir is a directory, creating it and its parents
// when missing ([boxapi.ErrNotDir] when a file is in the way). A stat through the archive API
// answers the common case without starting a process.
func (s *Sandbox) MakeDir(ctx context.Context, dir string) error {
	if !path.IsAbs(dir) {
		return fmt.Errorf("%q: %w", dir, boxapi.ErrRelativePath)
	}
	if err := s.Ensure(ctx); err != nil {
		return err
	}
	st, err := s.cli.StatPath(ctx, s.cfg.Container, dir)
	if err == nil && st.Mode.IsDir() {
		return nil
	}
	if err == nil && st.Mode&fs.ModeSymlink == 0 {
		return fmt.Errorf("%s: %w", dir, boxapi.ErrNotDir)
	}
	// Missing, a symbolic link, or the container went away: the exec repairs the
	// container if needed and mkdir -p follows links.
	res, err := s.runner.run(ctx, script(prepareScript, dir), uploadStepTimeout, 4096, nil)
	if err != nil {
		return fmt.Errorf("creating %s in the sandbox: %w", dir, err)
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(res.Stderr)
		if strings.Contains(msg, "Not a directory") || strings.Contains(msg, "File exists") {
			return fmt.Errorf("%s: %w (%s)", dir, boxapi.ErrNotDir, human.Clip(msg, 300))
		}
		return fmt.Errorf("creating %s in the sandbox: exit code %d: %s", dir, res.ExitCode, human.Clip(msg, 300))
	}
	return nil
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
