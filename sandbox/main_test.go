package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// testImage is the image test sandboxes run from; see [testengine.Image].
func testImage() string { return testengine.Image() }

// dockerClient returns a client for the local engine; see [testengine.DockerClient] for
// when it skips and when it fails.
func dockerClient(tb testing.TB) dockerEngine {
	tb.Helper()
	return dockerEngine{testengine.DockerClient(tb)}
}

// sha256Hex reads r to its end and returns the SHA-256 of its bytes in hex, as
// sha256sum prints it, and how many bytes it read.
func sha256Hex(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// sha is the SHA-256 of b in hex.
func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// testConfig is a small sandbox with unique names and no network.
func testConfig(tb testing.TB) Config {
	sfx := strings.ToLower(strings.ReplaceAll(tb.Name(), "/", "-"))
	if len(sfx) > 30 {
		sfx = sfx[:30]
	}
	sfx += "-" + testenv.RandomHex(4)
	cfg := DefaultConfig()
	cfg.Image = testImage()
	cfg.Container = "mcp-sandbox-test-" + sfx
	cfg.Volume = "mcp-sandbox-test-" + sfx
	cfg.Memory = 512 << 20
	cfg.CPUs = 1
	cfg.PidsLimit = 512
	cfg.NetworkMode = "none"
	cfg.ExecTimeout = 2 * time.Minute
	// MCP_SANDBOX_TEST_NO_AGENT=1 runs the tests on the fallback: a Docker exec per call.
	cfg.NoAgent = os.Getenv("MCP_SANDBOX_TEST_NO_AGENT") == "1"
	return cfg
}

// withAndWithoutAgent runs f with the agent and on the fallback (only the latter when
// MCP_SANDBOX_TEST_NO_AGENT=1), each with a config of its own.
func withAndWithoutAgent(t *testing.T, f func(t *testing.T, cfg Config)) {
	for _, noAgent := range []bool{false, true} {
		name := map[bool]string{false: "agent", true: "fallback"}[noAgent]
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t)
			if cfg.NoAgent && !noAgent {
				t.Skip("MCP_SANDBOX_TEST_NO_AGENT=1")
			}
			cfg.NoAgent = noAgent
			f(t, cfg)
		})
	}
}

// newTestSandbox makes a sandbox whose container and volume are removed after the test.
func newTestSandbox(tb testing.TB, cli API, cfg Config) *Sandbox {
	tb.Helper()
	var logger *zap.Logger
	if t, ok := tb.(*testing.T); ok {
		logger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	}
	sb, err := New(cli, cfg, logger)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() {
		// Closed, it starts no background pass (old jobs forgotten) that would log
		// after the test.
		sb.Close()
		sb.CloseTransfers()
		removeSandbox(tb, cli, cfg)
	})
	return sb
}

func removeSandbox(tb testing.TB, cli API, cfg Config) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cli.RemoveBox(ctx, cfg.Container); err != nil && !strings.Contains(err.Error(), "No such container") {
		tb.Errorf("removing test container: %v", err)
	}
	if err := cli.RemoveVolume(ctx, cfg.Volume, true); err != nil && !strings.Contains(err.Error(), "no such volume") {
		tb.Errorf("removing test volume: %v", err)
	}
}

// mustExec runs command and fails the test on an infrastructure error.
func mustExec(tb testing.TB, sb *Sandbox, command string, opts boxapi.ExecOptions) *boxapi.ExecResult {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := sb.Exec(ctx, command, opts)
	if err != nil {
		tb.Fatalf("Exec(%q): %v", command, err)
	}
	return res
}

// dummyClient is a Docker client for a socket that does not exist, for tests that must
// not talk to Docker.
func dummyClient(tb testing.TB) dockerEngine {
	cli, err := client.NewClientWithOpts(client.WithHost("unix:///nonexistent/docker.sock"), client.WithAPIVersionNegotiation())
	if err != nil {
		tb.Fatal(err)
	}
	return dockerEngine{cli}
}

// goBinaries caches the programs goProgram built, by package: once per test binary.
var goBinaries sync.Map // package → func() ([]byte, error)

// goProgram builds the Go package pkg (a path relative to this directory) as a static
// binary and returns it.
func goProgram(tb testing.TB, pkg string) []byte {
	tb.Helper()
	build, _ := goBinaries.LoadOrStore(pkg, sync.OnceValues(func() ([]byte, error) {
		dir, err := os.MkdirTemp("", "sandbox-test-bin")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "prog")
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s: %v\n%s", pkg, err, out)
		}
		return os.ReadFile(bin)
	}))
	data, err := build.(func() ([]byte, error))()
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// installProgram builds the Go package pkg and copies it into the container as the
// executable file path, making its directory.
func installProgram(tb testing.TB, sb *Sandbox, pkg, path string) {
	tb.Helper()
	data := goProgram(tb, pkg)
	dir, name := filepath.Split(path)
	mustExec(tb, sb, "mkdir -p "+dir, boxapi.ExecOptions{})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data))})
	_, _ = tw.Write(data)
	_ = tw.Close()
	if err := sb.cli.CopyIn(context.Background(), sb.cfg.Container, dir, &buf); err != nil {
		tb.Fatal(err)
	}
}
