package boxapi

import (
	"bytes"
	"math/bits"
)

// Programs and Python modules that Sandbox.Detect looks for: the ones a model most
// often reaches for first. Keep the lists short (at most 32 each: the parser keeps a
// bit per name); the answer goes into every conversation.
var (
	DetectPrograms = []string{
		"python3", "pip3", "node", "npm", "git", "gcc", "make", "go", "cargo", "java",
		"sqlite3", "jq", "curl", "ffmpeg", "pandoc", "psql",
	}
	DetectPythonModules = []string{"numpy", "pandas", "matplotlib", "scipy", "sklearn", "requests", "pytest", "PIL"}
)

// MaxDetectOutput bounds what is read of the detection's output. Every name on the
// lists, each on its own line, takes under 200 bytes. Anything longer was not printed
// by the script alone.
const MaxDetectOutput = 1024

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

// ParseDetect reads the output of the detection script: lines each naming a program of
// DetectPrograms, in list order, then at most one line "py:" followed by names of
// DetectPythonModules separated by spaces. It keeps exact names from the lists, each
// once, and counts the lines that held anything else (output over the size limit
// counts as one, and its cut line is never read).
//
// It reads at most MaxDetectOutput bytes, and what it returns shares no memory with
// out: its strings are the lists' own, so no text the container printed goes
// further than this function. It allocates the two result slices and nothing else.
func ParseDetect(out []byte) (f Facts, ignored int) {
	if len(out) > MaxDetectOutput {
		// A line cut short might read as another name ("gopher" as "go").
		out, ignored = out[:bytes.LastIndexByte(out[:MaxDetectOutput], '\n')+1], 1
	}
	var progs, mods uint32
	next := 0 // the index in DetectPrograms the next program line may have at least
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
				if i := indexOf(DetectPythonModules, name); i >= 0 {
					mods |= 1 << i
				} else {
					bad = true
				}
			}
			if bad {
				ignored++
			}
		default:
			i := indexOf(DetectPrograms, line)
			if i < next {
				ignored++ // unknown, repeated or out of order
				continue
			}
			progs |= 1 << i
			next = i + 1
		}
	}
	return Facts{Programs: pick(DetectPrograms, progs), PythonModules: pickOrNil(DetectPythonModules, mods)}, ignored
}

// Known returns f with only the names Detect looks for, each once, in the order of
// its lists; anything else is dropped. Use it on facts that come from anywhere but
// Sandbox.Detect itself, such as storage, where an earlier version kept whatever the
// container printed.
func (f Facts) Known() Facts {
	var progs, mods uint32
	for _, p := range f.Programs {
		if i := indexOf(DetectPrograms, []byte(p)); i >= 0 {
			progs |= 1 << i
		}
	}
	for _, m := range f.PythonModules {
		if i := indexOf(DetectPythonModules, []byte(m)); i >= 0 {
			mods |= 1 << i
		}
	}
	return Facts{ImageID: f.ImageID, Programs: pick(DetectPrograms, progs), PythonModules: pickOrNil(DetectPythonModules, mods)}
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
