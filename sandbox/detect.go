package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"
)

// Programs and Python modules that [Sandbox.Detect] looks for: the ones a model most
// often reaches for first. Keep the lists short; the answer goes into every
// conversation.
var (
	detectPrograms = []string{
		"python3", "pip3", "node", "npm", "git", "gcc", "make", "go", "cargo", "java",
		"sqlite3", "jq", "curl", "ffmpeg", "pandoc", "psql",
	}
	detectPythonModules = []string{"numpy", "pandas", "matplotlib", "scipy", "sklearn", "requests", "pytest", "PIL"}
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

// Facts are what a model should know of the running sandbox beyond its settings.
type Facts struct {
	// ImageID is the image the container ran when the facts were taken; facts of
	// another image are stale.
	ImageID string `json:"image_id"`
	// Programs found on PATH, in the order of the list looked for.
	Programs []string `json:"programs"`
	// PythonModules that python3 can import.
	PythonModules []string `json:"python_modules,omitempty"`
}

// Detect looks for well-known programs and Python modules in the running container,
// in one short exec. It is background upkeep: it never creates or starts the
// container, and fails while none runs.
func (s *Sandbox) Detect(ctx context.Context) (Facts, error) {
	ctx, cancel := context.WithTimeout(upkeep(ctx), 30*time.Second)
	defer cancel()
	info, err := s.runningInfo(ctx)
	if err != nil {
		return Facts{}, err
	}
	script := fmt.Sprintf(detectScript, strings.Join(detectPythonModules, " "))
	var out bytes.Buffer
	if _, err := s.collectExec(ctx, append([]string{"bash", "-c", script, "detect"}, detectPrograms...), &out, 64<<10); err != nil {
		return Facts{}, fmt.Errorf("detecting installed tools: %w", err)
	}
	f := Facts{ImageID: info.Image, Programs: []string{}}
	for _, line := range strings.Split(out.String(), "\n") {
		line = strings.TrimSpace(line)
		if mods, ok := strings.CutPrefix(line, "py:"); ok {
			f.PythonModules = strings.Fields(mods)
		} else if line != "" {
			f.Programs = append(f.Programs, line)
		}
	}
	return f, nil
}

// ImageID returns the ID of the image the container runs.
func (s *Sandbox) ImageID(ctx context.Context) (string, error) {
	info, err := s.cli.ContainerInspect(ctx, s.cfg.Container)
	if err != nil {
		return "", fmt.Errorf("inspecting sandbox container: %w", err)
	}
	return info.Image, nil
}
