package agentbin

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

func TestBinarySpellings(t *testing.T) {
	for arch, want := range map[string]string{
		"amd64": "amd64", "x86_64": "amd64", "linux/amd64": "amd64",
		"arm64": "arm64", "aarch64": "arm64", "arm64/v8": "arm64", "ARM64": "arm64",
		"arm": "", "arm/v7": "", "riscv64": "", "386": "", "": "",
	} {
		bin, sum, ok := Binary(arch)
		if ok != (want != "") {
			t.Errorf("Binary(%q): ok=%v, want %v", arch, ok, want != "")
			continue
		}
		if !ok {
			if bin != nil || sum != "" {
				t.Errorf("Binary(%q) returned bytes or a sum with ok=false", arch)
			}
			continue
		}
		if sum != readManifest().SHA256[want] || len(bin) != readManifest().Size[want] {
			t.Errorf("Binary(%q): sum %s, %d bytes; want the manifest's %s one", arch, sum, len(bin), want)
		}
	}
	if got := strings.Join(Arches(), " "); got != "amd64 arm64" {
		t.Errorf("Arches() = %q, want amd64 arm64", got)
	}
}

// TestBinaryDecompressesOnce: a second call returns the same bytes, not a new copy.
func TestBinaryDecompressesOnce(t *testing.T) {
	a, _, _ := Binary("amd64")
	b, _, _ := Binary("x86_64")
	if &a[0] != &b[0] {
		t.Fatal("Binary decompressed the amd64 agent twice")
	}
}

// TestBinariesAreStaticELF: each binary is a Linux ELF for its machine with no
// interpreter and no shared libraries, so it runs on any image (glibc, musl, none).
// The arm64 one also runs under qemu-aarch64-static when that is installed.
func TestBinariesAreStaticELF(t *testing.T) {
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, arch := range Arches() {
		bin, _, _ := Binary(arch)
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		if f.Machine != machines[arch] || f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
			t.Errorf("%s: machine %v, class %v, type %v; want %v, ELFCLASS64, ET_EXEC", arch, f.Machine, f.Class, f.Type, machines[arch])
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s: has a %v program header: not static", arch, p.Type)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s: needs %v", arch, libs)
		}
	}

	bin, _, _ := Binary("amd64")
	if out := runAgent(t, "", bin); out != strconv.Itoa(agentwire.Version) {
		t.Errorf("amd64 agent version printed %q, want %d", out, agentwire.Version)
	}
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		t.Skip("qemu-aarch64-static is not installed (scripts/test-deps.sh installs it): the arm64 agent was checked as an ELF file only")
	}
	bin, _, _ = Binary("arm64")
	if out := runAgent(t, qemu, bin); out != strconv.Itoa(agentwire.Version) {
		t.Errorf("arm64 agent version under qemu printed %q, want %d", out, agentwire.Version)
	}
}

// runAgent writes bin to a file and runs "version" with it, under emulator if not "".
func runAgent(t *testing.T, emulator string, bin []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sandbox-agent")
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p, "version")
	if emulator != "" {
		cmd = exec.Command(emulator, p, "version")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v: %s", cmd.Path, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestBinariesMatchSource rebuilds the binaries from the agent's current source with
// the local toolchain and compares them with the committed ones. A cold build cache
// makes it take half a minute (the standard library for linux/arm64), so -short skips it.
func TestBinariesMatchSource(t *testing.T) {
	if testing.Short() {
		t.Skip("rebuilds the agent for every architecture; runs without -short")
	}
	const regen = "run go generate ./internal/agentbin and commit the result"
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatalf("go env GOVERSION: %v", err)
	}
	if v := strings.TrimSpace(string(goVersion)); v != readManifest().Go {
		t.Skipf("the binaries were built with %s and this toolchain is %s, which may build other bytes: check them with %s, or %s",
			readManifest().Go, v, readManifest().Go, regen)
	}
	dir := t.TempDir()
	start := time.Now()
	if out, err := exec.Command("go", "run", "./gen", "-o", dir).CombinedOutput(); err != nil {
		t.Fatalf("go run ./gen: %v: %s", err, out)
	}
	t.Logf("rebuilt the agent for %v in %v", Arches(), time.Since(start).Round(time.Millisecond))
	built, _ := filepath.Glob(filepath.Join(dir, "*"))
	embedded, _ := files.ReadDir(".")
	if len(built) != len(embedded) {
		t.Errorf("gen wrote %d files, %d are embedded: %s", len(built), len(embedded), regen)
	}
	for _, p := range built {
		want, _ := os.ReadFile(p)
		got, err := files.ReadFile(filepath.Base(p))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the source builds: %s", filepath.Base(p), regen)
		}
	}
}
