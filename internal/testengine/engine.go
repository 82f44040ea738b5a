package testengine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// Engine is a second Docker engine on this machine, for tests that need one besides
// the local engine (connections over TCP, sandboxes on two engines, an engine stopped
// under a running Caddy). [SecondEngine] starts it; one test binary has one, shared
// by its tests.
//
// It listens on tcp://127.0.0.1:<port> (the port stays the same across Stop and
// Start) and on a unix socket of its own. Everything of it lives in one directory of
// its own: data root, exec root (with the containerd it starts and manages), pidfile,
// socket, daemon.json and dockerd.log. It has no bridge and adds no iptables rules,
// so containers on it must use network "none". Stopping it signals its dockerd only:
// the local engine and its containerd are never touched. When the test binary ends,
// however it ends, a small reaper process stops the engine and removes its directory;
// a directory left by a run whose reaper was killed is removed by the next run.
//
// It answers about 1.5 s after Start (dockerd 20.10 waits 1 s before it serves plain
// TCP) and stops in about 1 s. What stops every dockerd by name (pkill -x dockerd, as
// TestEngineRestart does) stops it too.
type Engine struct {
	dir  string
	port int
	cli  *client.Client // for Ping and image loading; works across restarts

	mu      sync.Mutex
	cmd     *exec.Cmd     // the running dockerd, nil when stopped
	exited  chan struct{} // closed when cmd has exited
	startup time.Duration // how long the last Start took until the engine answered
}

var (
	engineMu sync.Mutex
	engine   *Engine
)

// enginesDir holds one directory per test binary that started an engine, named after
// its process id.
var enginesDir = filepath.Join(os.TempDir(), "mcp-sandbox-engines")

// SecondEngine returns the test binary's second engine, started (again, if a test
// stopped it) and holding [Image] and images, loaded from the local engine with
// docker save (no registry). It skips the test under -short, when not run as root or
// when dockerd is missing, and fails it when the engine does not come up, with the
// end of its log.
//
// A test that stops the engine should start it again before it ends; the next
// SecondEngine call does anyway.
func SecondEngine(tb testing.TB, images ...string) *Engine {
	tb.Helper()
	if testing.Short() {
		tb.Skip("starts a second Docker engine (-short)")
	}
	if os.Geteuid() != 0 {
		tb.Skip("a second Docker engine needs root")
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		tb.Skip("a second Docker engine needs dockerd: run scripts/docker-up.sh")
	}
	local := DockerClient(tb) // the images come from the local engine

	engineMu.Lock()
	defer engineMu.Unlock()
	if engine == nil {
		e, err := newEngine()
		if err != nil {
			tb.Fatalf("second Docker engine: %v", err)
		}
		engine = e
	}
	if err := engine.Start(); err != nil {
		tb.Fatalf("second Docker engine: %v", err)
	}
	if err := engine.load(local, append([]string{Image()}, images...)); err != nil {
		tb.Fatalf("second Docker engine: %v", err)
	}
	return engine
}

// newEngine prepares the directory and port of an engine, after removing what earlier
// runs left, and starts the reaper that cleans up after this process.
func newEngine() (*Engine, error) {
	sweepEngines()
	dir := filepath.Join(enginesDir, strconv.Itoa(os.Getpid()))
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Not /etc/docker/daemon.json: its settings must not mix with the flags here.
	config := "{}\n"
	if keyJSONEra() {
		// dockerd before 23 takes its engine ID from /etc/docker/key.json, which
		// would make both engines one ID; it has no flag for the path, only this key.
		config = fmt.Sprintf("{%q: %q}\n", "deprecated-key-path", filepath.Join(dir, "key.json"))
	}
	if err := os.WriteFile(filepath.Join(dir, "daemon.json"), []byte(config), 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	reaper := exec.Command("sh", "-c", reaperScript, "reaper", strconv.Itoa(os.Getpid()), dir)
	// Its own process group, so that an interrupt of the tests does not stop it
	// before it cleans up; no inherited output, so that go test does not wait for it.
	reaper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := reaper.Start(); err != nil {
		return nil, fmt.Errorf("starting the reaper: %w", err)
	}
	go reaper.Wait() //nolint:errcheck // it outlives this process

	e := &Engine{dir: dir, port: port}
	e.cli, err = client.NewClientWithOpts(client.WithHost(e.Host()), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	return e, nil
}

// reaperScript waits until the process $1 has ended, then stops the engine in $2 (its
// dockerd stops its containers and its containerd), kills what of it is left, unmounts
// what it left mounted and removes $2.
const reaperScript = `owner=$1 dir=$2
while kill -0 "$owner" 2>/dev/null; do sleep 0.5; done
ours() { grep -qsF -- "$dir/" "/proc/$1/cmdline"; }
pid=$(cat "$dir/docker.pid" 2>/dev/null)
if [ -n "$pid" ] && ours "$pid"; then
	kill -TERM "$pid"
	i=0
	while ours "$pid" && [ $i -lt 60 ]; do sleep 0.5; i=$((i+1)); done
fi
# "[/]": the pattern does not match the grep that looks for it.
left() { grep -ls -- "$dir[/]" /proc/[0-9]*/cmdline | sed -n 's|^/proc/\([0-9]*\)/cmdline$|\1|p'; }
i=0
while [ -n "$(left)" ] && [ $i -lt 20 ]; do
	kill -KILL $(left) 2>/dev/null
	sleep 0.5
	i=$((i+1))
done
awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r |
	while read -r m; do umount -l "$m"; done
i=0
until rm -rf "$dir" || [ $i -ge 10 ]; do sleep 0.5; i=$((i+1)); done
`

// sweepEngines removes the engines of test binaries that have ended, in case their
// reaper could not: it runs their reaper script, which finds its owner gone.
func sweepEngines() {
	entries, _ := os.ReadDir(enginesDir)
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", ent.Name())); err == nil {
			continue // its test binary runs (or the pid was reused): leave it
		}
		_ = exec.Command("sh", "-c", reaperScript, "reaper", ent.Name(), filepath.Join(enginesDir, ent.Name())).Run()
	}
}

// keyJSONEra reports whether dockerd is older than 23 (the last such was 20.10).
func keyJSONEra() bool {
	out, err := exec.Command("dockerd", "--version").Output()
	if err != nil {
		return false
	}
	// "Docker version 20.10.24+dfsg1, build 5d6db84"
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return false
	}
	major, err := strconv.Atoi(strings.SplitN(f[2], ".", 2)[0])
	return err == nil && major < 23
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Host is the engine's address for a Docker client: tcp://127.0.0.1:<port>.
func (e *Engine) Host() string { return "tcp://127.0.0.1:" + strconv.Itoa(e.port) }

// Addr is the engine's TCP address, host:port.
func (e *Engine) Addr() string { return "127.0.0.1:" + strconv.Itoa(e.port) }

// Startup is how long the last Start took until the engine answered a ping.
func (e *Engine) Startup() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.startup
}

// Client returns a client for the engine (API version negotiated, as the project's
// clients do), closed when the test ends.
func (e *Engine) Client(tb testing.TB) *client.Client {
	tb.Helper()
	cli, err := client.NewClientWithOpts(client.WithHost(e.Host()), client.WithAPIVersionNegotiation())
	if err != nil {
		tb.Fatalf("client for the second engine: %v", err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// Start starts the engine's dockerd unless it runs, and waits until it answers. Its
// containers, volumes and images are kept from the last time it ran.
func (e *Engine) Start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cmd != nil {
		return nil
	}
	begin := time.Now()
	// A pidfile a killed dockerd left behind would name a process that may not be it.
	_ = os.Remove(e.path("docker.pid"))
	logf, err := os.OpenFile(e.path("dockerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "--- starting at %s\n", begin.Format(time.RFC3339Nano))
	// A bridge of its own, not --bridge=none: a dockerd without a bridge deletes the
	// interface docker0 on start, the main engine's, which its image builds need.
	if err := ensureBridge(engineBridge); err != nil {
		return err
	}
	cmd := exec.Command("dockerd",
		"--config-file", e.path("daemon.json"),
		"--data-root", e.path("data"),
		"--exec-root", e.path("exec"), // its containerd's sockets and state go below
		"--pidfile", e.path("docker.pid"),
		"-H", "unix://"+e.path("docker.sock"),
		"-H", e.Host(),
		"--tls=false", // loopback only; newer dockerd refuses plain TCP unless told
		"--bridge="+engineBridge, "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false",
		"--userland-proxy=false",
		// Should a system containerd run, dockerd uses it instead of starting its
		// own: namespaces of its own keep the local engine's containers apart.
		"--containerd-namespace", "mcp-engine2",
		"--containerd-plugins-namespace", "mcp-engine2-plugins",
		"--shutdown-timeout", "2",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not stopped by a terminal's interrupt: the reaper stops it
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting dockerd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := e.cli.Ping(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			return fmt.Errorf("dockerd exited (%v) before it answered; log %s:\n%s", cmd.ProcessState, e.path("dockerd.log"), e.logTail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("dockerd did not answer within 60s (%v); log %s:\n%s", err, e.path("dockerd.log"), e.logTail())
		}
	}
	e.cmd, e.exited, e.startup = cmd, exited, time.Since(begin)
	return nil
}

// Stop stops the engine's dockerd, which stops its containers and its containerd,
// and waits until it has exited (killing it after 30s). The local engine is not
// touched.
func (e *Engine) Stop() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cmd == nil {
		return nil
	}
	cmd, exited := e.cmd, e.exited
	e.cmd, e.exited = nil, nil
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping dockerd: %w", err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("dockerd did not stop within 30s and was killed; log %s:\n%s", e.path("dockerd.log"), e.logTail())
	}
}

// load copies each image the engine lacks from the local engine.
func (e *Engine) load(local *client.Client, images []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, img := range images {
		if _, err := e.cli.ImageInspect(ctx, img); err == nil {
			continue
		}
		rc, err := local.ImageSave(ctx, []string{img})
		if err != nil {
			return fmt.Errorf("saving %s from the local engine: %w", img, err)
		}
		resp, err := e.cli.ImageLoad(ctx, rc, client.ImageLoadWithQuiet(true))
		rc.Close()
		if err != nil {
			return fmt.Errorf("loading %s: %w", img, err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("loading %s: %w", img, err)
		}
		if _, err := e.cli.ImageInspect(ctx, img); err != nil {
			return fmt.Errorf("%s is missing after loading it: %w", img, err)
		}
	}
	return nil
}

func (e *Engine) path(name string) string { return filepath.Join(e.dir, name) }

// logTail is the end of the engine's log, without the gRPC chatter.
func (e *Engine) logTail() string {
	f, err := os.Open(e.path("dockerd.log"))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "module=grpc") {
			continue
		}
		lines = append(lines, sc.Text())
		if len(lines) > 40 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// engineBridge is the second engine's bridge interface. It carries no traffic: the
// engine's containers use network "none".
const engineBridge = "mcp-eng2"

// ensureBridge creates the bridge interface name, with an address of its own (dockerd
// takes its subnet from it), unless it exists.
func ensureBridge(name string) error {
	if _, err := net.InterfaceByName(name); err == nil {
		return nil
	}
	for _, args := range [][]string{
		{"link", "add", name, "type", "bridge"},
		{"addr", "add", "10.213.77.1/24", "dev", name},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("creating the second engine's bridge: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}
