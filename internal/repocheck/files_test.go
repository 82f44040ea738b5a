package repocheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTracked is the largest file the repository may track: Go's module zip carries
// every tracked file to everyone who builds Caddy with the plugin.
const maxTracked = 4 << 20

// trackedFiles lists the files git tracks, or skips outside a git checkout (a module
// zip has no history to check).
func trackedFiles(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v)", err)
	}
	var files []string
	for _, f := range bytes.Split(out, []byte{0}) {
		if len(f) > 0 {
			files = append(files, string(f))
		}
	}
	return files
}

// TestNoLargeTrackedFiles: no tracked file is over 4 MiB, the committed agent binaries
// (internal/agentbin, reproducible and checked against their source) aside.
func TestNoLargeTrackedFiles(t *testing.T) {
	files := trackedFiles(t)
	if len(files) < 50 {
		t.Fatalf("git lists only %d files", len(files))
	}
	for _, f := range files {
		if strings.HasPrefix(f, "internal/agentbin/") {
			continue
		}
		st, err := os.Lstat(filepath.Join(root, f))
		if err != nil {
			continue // deleted in the work tree, not yet committed
		}
		if st.Size() > maxTracked {
			t.Errorf("%s is tracked and %d bytes (over %d): build outputs and data do not belong in the module; git rm --cached it and add it to .gitignore", f, st.Size(), maxTracked)
		}
	}
}

// TestBuildOutputsIgnored: test binaries, profiles, coverage files and bin/ are ignored,
// so a stray `git add .` does not ship them in the module.
func TestBuildOutputsIgnored(t *testing.T) {
	trackedFiles(t)
	for _, p := range []string{
		"caddy-mcp-sandbox.test", "sandbox/sandbox.test",
		"cpu.out", "sandbox/mem.out", "cpu.prof",
		"coverage.out", "coverage.html", "c.cover",
		"bin/caddy", "caddy",
	} {
		out, err := exec.Command("git", "-C", root, "check-ignore", "--no-index", "-v", p).CombinedOutput()
		if err != nil {
			t.Errorf("%s is not ignored by .gitignore (git check-ignore: %v %s)", p, err, out)
		}
	}
	// And nothing ignored is tracked anyway.
	out, err := exec.Command("git", "-C", root, "ls-files", "-ci", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files -ci: %v", err)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("tracked files that .gitignore ignores (git rm --cached them):\n%s", s)
	}
}
