package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"math/bits"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Programs and Python modules that [Sandbox.Detect] looks for: the ones a model most
// often reaches for first. Keep the lists short (at most 32 each: the parser keeps a
// bit per name); the answer goes into every conversation.
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

// maxDetectOutput bounds what is read of the detection's output. Every name on the
// lists, each on its own line, takes under 200 bytes. Anything longer was not printed
// by the script alone.
const maxDetectOutput = 1024

// Facts are what a model should know of the running sandbox beyond its settings.
//
// They end up in the server instructions, and the container is hostile: whatever it
// runs (python3, bash itself) may print anything. So Facts hold only names from the
// fixed lists Detect looks for, never text from the container; see [Facts.Known].
type Facts struct {
	// ImageID is the image the container ran when the facts were taken; facts of
	// another image are stale.
	ImageID string `json:"image_id"`
	// Programs found on PATH, in the order of the list looked for.
	Programs []string `json:"programs"`
	// PythonModules that python3 can import, in the order of the list looked for.
	PythonModules []string `json:"python_modules,omitempty"`
}

// Detect looks for well-known programs and Python modules in the running container,
// in one short exec. It is background upkeep: it never creates or starts the
// container, and fails while none runs. What the container prints is parsed strictly:
// only exact names from the lists looked for are kept.
func (s *Sandbox) Detect(ctx context.Context) (Facts, error) {
	ctx, cancel := context.WithTimeout(upkeep(ctx), 30*time.Second)
	defer cancel()
	info, err := s.runningInfo(ctx)
	if err != nil {
		return Facts{}, err
	}
	script := fmt.Sprintf(detectScript, strings.Join(detectPythonModules, " "))
	var out bytes.Buffer
	// One byte over the limit tells the parser that the output was longer.
	if _, err := s.collectExec(ctx, append([]string{"bash", "-c", script, "detect"}, detectPrograms...), &out, maxDetectOutput+1); err != nil {
		return Facts{}, fmt.Errorf("detecting installed tools: %w", err)
	}
	f, ignored := parseDetect(out.Bytes())
	if ignored > 0 {
		// Something in the container printed more than names (a planted python3 or
		// bash, a prompt injection). It is left out; the operator may want to know.
		s.log.Warn("the sandbox printed unexpected text while its installed tools were detected; only known program and module names are used",
			zap.Int("ignored_lines", ignored))
	}
	f.ImageID = info.Image
	return f, nil
}

// parseDetect reads the output of detectScript: lines each naming a program of
// detectPrograms, in list order, then at most one line "py:" followed by names of
// detectPythonModules separated by spaces. It keeps exact names from the lists, each
// once, and counts the lines that held anything else (output over the size limit
// counts as one, and its cut line is never read).
//
// It reads at most maxDetectOutput bytes, and what it returns shares no memory with
// out: its strings are the lists' own, so no text the container printed goes
// further than this function. It allocates the two result slices and nothing else.
func parseDetect(out []byte) (f Facts, ignored int) {
	if len(out) > maxDetectOutput {
		// A line cut short might read as another name ("gopher" as "go").
		out, ignored = out[:bytes.LastIndexByte(out[:maxDetectOutput], '\n')+1], 1
	}
	var progs, mods uint32
	next := 0 // the index in detectPrograms the next program line may have at least
	seenPy := false
	for len(out) > 0 {
		line, rest, _ := bytes.Cut(out, []byte{'\n'})
		out = rest
		switch {
		case len(line) == 0:
		case seenPy:
			ignored++ // nothing follows the module line
		case bytes.HasPrefix(line, []byte("py:")):
			seenPy = true
			bad := false
			for names := line[len("py:"):]; len(names) > 0; {
				var name []byte
				name, names, _ = bytes.Cut(names, []byte{' '})
				if len(name) == 0 {
					continue
				}
				if i := indexOf(detectPythonModules, name); i >= 0 {
					mods |= 1 << i
				} else {
					bad = true
				}
			}
			if bad {
				ignored++
			}
		default:
			i := indexOf(detectPrograms, line)
			if i < next {
				ignored++ // unknown, repeated or out of order
				continue
			}
			progs |= 1 << i
			next = i + 1
		}
	}
	return Facts{Programs: pick(detectPrograms, progs), PythonModules: pickOrNil(detectPythonModules, mods)}, ignored
}

// Known returns f with only the names Detect looks for, each once, in the order of
// its lists; anything else is dropped. Use it on facts that come from anywhere but
// [Sandbox.Detect] itself, such as storage, where an earlier version kept whatever the
// container printed.
func (f Facts) Known() Facts {
	var progs, mods uint32
	for _, p := range f.Programs {
		if i := indexOf(detectPrograms, []byte(p)); i >= 0 {
			progs |= 1 << i
		}
	}
	for _, m := range f.PythonModules {
		if i := indexOf(detectPythonModules, []byte(m)); i >= 0 {
			mods |= 1 << i
		}
	}
	return Facts{ImageID: f.ImageID, Programs: pick(detectPrograms, progs), PythonModules: pickOrNil(detectPythonModules, mods)}
}

// indexOf is the index of name in list, or -1.
func indexOf(list []string, name []byte) int {
	for i, s := range list {
		if string(name) == s { // compared in place, no allocation
			return i
		}
	}
	return -1
}

// pick returns the names of list whose bits are set in mask, in list order; never nil.
func pick(list []string, mask uint32) []string {
	out := make([]string, 0, bits.OnesCount32(mask))
	for i, s := range list {
		if mask&(1<<i) != 0 {
			out = append(out, s)
		}
	}
	return out
}

func pickOrNil(list []string, mask uint32) []string {
	if mask == 0 {
		return nil
	}
	return pick(list, mask)
}

// ImageID returns the ID of the image the container runs.
func (s *Sandbox) ImageID(ctx context.Context) (string, error) {
	info, err := s.cli.ContainerInspect(ctx, s.cfg.Container)
	if err != nil {
		return "", fmt.Errorf("inspecting sandbox container: %w", err)
	}
	return info.Image, nil
}
