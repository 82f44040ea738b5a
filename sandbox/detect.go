package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

// detectScript prints the programs found on PATH, one per line, then a line "py:"
// followed by the Python modules that import. Only builtins, command -v and python3.
const detectScript = `for p in "$@"; do command -v "$p" >/dev/null 2>&1 && echo "$p"; done
if command -v python3 >/dev/null 2>&1; then
	printf 'py:'
	python3 - <<'EOF' 2>/dev/null
import importlib.util as u
print(" ".join(m for m in "` + "%s" + `".split() if u.find_spec(m)))
EOF
fi`

// Detect looks for well-known programs and Python modules in the running container,
// in one short exec. It is background upkeep: it never creates or starts the
// container, and fails while none runs. What the container prints is parsed strictly:
// only exact names from the lists looked for are kept.
func (s *Sandbox) Detect(ctx context.Context) (boxapi.Facts, error) {
	ctx, cancel := context.WithTimeout(upkeep(ctx), 30*time.Second)
	defer cancel()
	info, err := s.life.runningInfo(ctx)
	if err != nil {
		return boxapi.Facts{}, err
	}
	script := fmt.Sprintf(detectScript, strings.Join(boxapi.DetectPythonModules, " "))
	var out bytes.Buffer
	// One byte over the limit tells the parser that the output was longer.
	if _, err := s.runner.collectExec(ctx, append([]string{"bash", "-c", script, "detect"}, boxapi.DetectPrograms...), &out, boxapi.MaxDetectOutput+1); err != nil {
		return boxapi.Facts{}, fmt.Errorf("detecting installed tools: %w", err)
	}
	f, ignored := boxapi.ParseDetect(out.Bytes())
	if ignored > 0 {
		// Something in the container printed more than names (a planted python3 or
		// bash, a prompt injection). It is left out; the operator may want to know.
		s.log.Warn("the sandbox printed unexpected text while its installed tools were detected; only known program and module names are used",
			zap.Int("ignored_lines", ignored))
	}
	f.ImageID = info.ImageID
	return f, nil
}

// ImageID returns the ID of the image the container runs.
func (s *Sandbox) ImageID(ctx context.Context) (string, error) {
	info, err := s.cli.InspectBox(ctx, s.cfg.Container)
	if err != nil {
		return "", fmt.Errorf("inspecting sandbox container: %w", err)
	}
	return info.ImageID, nil
}
