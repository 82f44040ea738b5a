package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// execCounter counts the Docker execs a sandbox creates.
type execCounter struct {
	dockerEngine
	n atomic.Int64
}

func (c *execCounter) ContainerExecCreate(ctx context.Context, name string, opts container.ExecOptions) (container.ExecCreateResponse, error) {
	c.n.Add(1)
	return c.dockerEngine.ContainerExecCreate(ctx, name, opts)
}

func agentTestSandbox(t *testing.T, cfg Config) (*Sandbox, *execCounter) {
	t.Helper()
	if cfg.NoAgent {
		t.Skip("the agent is off (MCP_SANDBOX_TEST_NO_AGENT)")
	}
	cli := &execCounter{dockerEngine: dockerClient(t)}
	return newTestSandbox(t, cli, cfg), cli
}

// Once the agent runs, commands create no Docker exec at all.
func TestAgentCarriesCommands(t *testing.T) {
	sb, cli := agentTestSandbox(t, testConfig(t))
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	if ok, why := sb.AgentStatus(); !ok {
		t.Fatalf("agent not running: %s", why)
	}
	before := cli.n.Load()
	for i := 0; i < 20; i++ {
		res := mustExec(t, sb, "echo $((6*7)); echo err >&2; exit 3", boxapi.ExecOptions{})
		if res.Stdout != "42\n" || res.Stderr != "err\n" || res.ExitCode != 3 {
			t.Fatalf("%+v", res)
		}
	}
	if n := cli.n.Load() - before; n != 0 {
		t.Fatalf("20 commands created %d Docker execs", n)
	}
}

// agentPID returns the pid of the running agent in the container.
func agentPID(t *testing.T, sb *Sandbox) int {
	sb.link.agentMu.Lock()
	defer sb.link.agentMu.Unlock()
	if sb.link.agent.sess == nil {
		t.Fatal("no agent")
	}
	return sb.link.agent.sess.Peer().PID
}

// recoverAfter runs `echo ok` until it works and returns how long that took.
func recoverAfter(t *testing.T, sb *Sandbox) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < 30*time.Second {
		res, err := sb.Exec(context.Background(), "echo ok", boxapi.ExecOptions{})
		if err == nil && res.Stdout == "ok\n" {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the sandbox did not recover")
	return 0
}

// A job keeps running when the model kills the agent, the killing command's output is
// not lost, and the next call works at once through a new agent.
func TestAgentKilledJobGoesOn(t *testing.T) {
	sb, _ := agentTestSandbox(t, testConfig(t))
	job := mustExec(t, sb, "for i in $(seq 1 15); do echo line $i; sleep 0.2; done", boxapi.ExecOptions{Wait: boxapi.NoWait})
	pid := agentPID(t, sb)
	res, err := sb.Exec(context.Background(), "kill -9 "+strconv.Itoa(pid)+"; echo killed", boxapi.ExecOptions{})
	t.Logf("the killing call: %+v, %v", res, err)
	// Its own output, sent to the dead agent, comes through the new one.
	if err != nil || res.ExitCode != 0 || res.Stdout != "killed\n" {
		t.Errorf("the killing call: %+v, %v", res, err)
	}
	took := recoverAfter(t, sb)
	t.Logf("recovered in %v", took)
	if took > 2*time.Second {
		t.Errorf("recovery took %v", took)
	}
	if newPID := agentPID(t, sb); newPID == pid {
		t.Fatal("the same agent still answers")
	}
	out, err := sb.JobOutput(context.Background(), job.JobID, 30*time.Second, nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := job.Stdout + out.Stdout
	if out.Running || out.ExitCode != 0 || !strings.HasSuffix(all, "line 15\n") || strings.Count(all, "\n") != 15 {
		t.Fatalf("job after the agent's death: %+v (first part %q)", out, job.Stdout)
	}
}

// kill -9 -1 kills everything in the container, the agent included: the next call
// works within a second or two, and the jobs it killed are reported as ended with their
// output so far.
func TestKillAllRecovers(t *testing.T) {
	sb, _ := agentTestSandbox(t, testConfig(t))
	job := mustExec(t, sb, "echo started; sleep 600", boxapi.ExecOptions{Wait: time.Second})
	res, err := sb.Exec(context.Background(), "kill -9 -1", boxapi.ExecOptions{})
	t.Logf("kill -9 -1: %+v, %v", res, err)
	took := recoverAfter(t, sb)
	t.Logf("recovered in %v", took)
	if took > 3*time.Second {
		t.Errorf("recovery took %v", took)
	}
	out, err := sb.JobOutput(context.Background(), job.JobID, 10*time.Second, nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.Running || !strings.Contains(job.Stdout+out.Stdout, "started") {
		t.Fatalf("killed job: %+v (first part %q)", out, job.Stdout)
	}
}

// Where the agent cannot run (a read-only root and noexec writable places), commands
// fall back to a Docker exec each, and the sandbox says why.
func TestAgentFallbackReadOnlyNoexec(t *testing.T) {
	hostConfigForTest.Set(func(hc *container.HostConfig) {
		hc.ReadonlyRootfs = true
		hc.Tmpfs = map[string]string{"/tmp": "rw,noexec,nosuid,size=64m", "/var/lib/mcp-sandbox": "rw,noexec,nosuid,size=64m"}
	})
	t.Cleanup(func() { hostConfigForTest.Clear() })
	sb, cli := agentTestSandbox(t, testConfig(t))
	res := mustExec(t, sb, "echo fallback; exit 5", boxapi.ExecOptions{})
	if res.Stdout != "fallback\n" || res.ExitCode != 5 {
		t.Fatalf("%+v", res)
	}
	ok, why := sb.AgentStatus()
	t.Logf("agent: %v, %s", ok, why)
	if ok || !strings.Contains(why, "read-only") {
		t.Fatalf("status %v %q", ok, why)
	}
	before := cli.n.Load()
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	if cli.n.Load() == before {
		t.Fatal("a command on the fallback created no Docker exec")
	}
	// Copied by hand into the noexec place, the agent cannot start either.
	sb.link.agentMu.Lock()
	sb.link.agent.retry = time.Time{}
	sb.link.agentMu.Unlock()
	agentArgvForTest.Set(func(string) []string { return []string{"/tmp/sandbox-agent", "serve"} })
	t.Cleanup(func() { agentArgvForTest.Clear() })
	mustExec(t, sb, "cp /bin/busybox /tmp/sandbox-agent", boxapi.ExecOptions{})
	if res := mustExec(t, sb, "echo still", boxapi.ExecOptions{}); res.Stdout != "still\n" {
		t.Fatalf("%+v", res)
	}
}

// A program answering in the agent's place with garbage, or with a frame that declares
// 1 GB, leaves Caddy bounded; commands still run, and after a few such agents the
// sandbox falls back.
func TestHostileAgent(t *testing.T) {
	cases := map[string]string{
		"garbage":  `head -c 100000 /dev/urandom; sleep 5`,
		"1 GB":     `printf '\000\000\000\015\001\000\000\000\000{"version":2}\100\000\000\000\003\000\000\000\001'; cat >/dev/null`,
		"silence":  `sleep 600`,
		"wrong v":  `printf '\000\000\000\015\001\000\000\000\000{"version":9}'; sleep 5`,
		"no hello": `exit 0`,
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			agentArgvForTest.Set(func(string) []string { return []string{"sh", "-c", script} })
			t.Cleanup(func() { agentArgvForTest.Clear() })
			sb, _ := agentTestSandbox(t, testConfig(t))
			heap0 := testenv.HeapAfterGC()
			for i := 0; i < 4; i++ {
				res := mustExec(t, sb, "echo ok", boxapi.ExecOptions{})
				if res.Stdout != "ok\n" {
					t.Fatalf("call %d: %+v", i, res)
				}
			}
			if grew := int64(testenv.HeapAfterGC()) - int64(heap0); grew > 32<<20 {
				t.Errorf("heap grew by %d MB", grew>>20)
			}
			ok, why := sb.AgentStatus()
			t.Logf("agent %v: %s", ok, why)
			if ok {
				t.Fatal("a hostile agent counts as running")
			}
			if runtime.NumGoroutine() > 500 {
				t.Errorf("%d goroutines", runtime.NumGoroutine())
			}
		})
	}
}

// A new Caddy (a new Sandbox on the same container, with another agent binary) takes
// over from the old agent without losing the running job.
func TestAgentReplacedKeepsJobs(t *testing.T) {
	cfg := testConfig(t)
	old, _ := agentTestSandbox(t, cfg)
	job := mustExec(t, old, "for i in $(seq 1 10); do echo $i; sleep 0.2; done", boxapi.ExecOptions{Wait: boxapi.NoWait})
	oldPID := agentPID(t, old)
	old.CloseAgent() // the old Caddy exits: its channel closes, its agent ends
	agentArgvForTest.Set(func(path string) []string {
		return []string{"sh", "-c", `cp "$1" "$1-next" && exec "$1-next" serve`, "sh", path}
	})
	t.Cleanup(func() { agentArgvForTest.Clear() })
	next, err := New(dockerClient(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := next.JobOutput(context.Background(), job.JobID, 30*time.Second, nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if all := job.Stdout + out.Stdout; out.Running || !strings.HasSuffix(all, "10\n") || strings.Count(all, "\n") != 10 {
		t.Fatalf("job after the agent was replaced: %+v", out)
	}
	ps := mustExec(t, next, "ps -o pid,args | grep '[s]andbox-agent'", boxapi.ExecOptions{})
	oldRuns := false
	for _, line := range strings.Split(ps.Stdout, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == strconv.Itoa(oldPID) {
			oldRuns = true
		}
	}
	if oldRuns || strings.Count(ps.Stdout, "serve") != 1 {
		t.Fatalf("agents running: %q (old pid %d)", ps.Stdout, oldPID)
	}
	next.CloseAgent()
}

// A program in the container connects to a port the agent listens on, and the plugin
// receives the connection.
func TestListenPort(t *testing.T) {
	sb, _ := agentTestSandbox(t, testConfig(t))
	ctx := context.Background()
	got := make(chan string, 1)
	stop, done, err := sb.ListenPort(ctx, 3128, func(c net.Conn) {
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		got <- line
		c.Write([]byte("world\n"))
	})
	if err != nil {
		t.Fatal(err)
	}
	res := mustExec(t, sb, `exec 3<>/dev/tcp/127.0.0.1/3128; echo hello >&3; read -r x <&3; echo "answer: $x"`, boxapi.ExecOptions{Timeout: 20 * time.Second, MaxOutput: 2 << 20})
	if res.Stdout != "answer: world\n" {
		t.Fatalf("%+v", res)
	}
	if line := <-got; line != "hello\n" {
		t.Fatalf("the plugin received %q", line)
	}
	stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the listener did not end")
	}
	if res := mustExec(t, sb, `exec 3<>/dev/tcp/127.0.0.1/3128 && echo connected`, boxapi.ExecOptions{}); res.Stdout != "" {
		t.Fatalf("the port still accepts after stop: %+v", res)
	}
}

// Two Caddy instances on one sandbox (two Sandboxes on its container, each with its
// own agent) both listen on the egress port: neither finds it taken, and the
// connections programs make to it reach the plugin, through one or the other.
func TestListenPortTwoInstances(t *testing.T) {
	cfg := testConfig(t)
	a, _ := agentTestSandbox(t, cfg)
	b, err := New(dockerClient(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.CloseAgent()
	ctx := context.Background()
	var mu sync.Mutex
	served := map[string]int{}
	serve := func(name string) func(net.Conn) {
		return func(c net.Conn) {
			defer c.Close()
			mu.Lock()
			served[name]++
			mu.Unlock()
			c.Write([]byte(name + "\n"))
		}
	}
	for name, sb := range map[string]*Sandbox{"a": a, "b": b} {
		stop, _, err := sb.ListenPort(ctx, 3131, serve(name))
		if err != nil {
			t.Fatalf("instance %s listening: %v", name, err)
		}
		defer stop()
		if !sb.Listening(3131) {
			t.Fatalf("instance %s does not count itself listening", name)
		}
	}
	res := mustExec(t, a, `for i in $(seq 1 40); do exec 3<>/dev/tcp/127.0.0.1/3131 && read -r x <&3 && echo "$x"; exec 3<&-; done`,
		boxapi.ExecOptions{Timeout: 60 * time.Second})
	if n := strings.Count(res.Stdout, "\n"); n != 40 || strings.Trim(res.Stdout, "ab\n") != "" {
		t.Fatalf("40 connections answered: %q %q", res.Stdout, res.Stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("connections served: %v", served)
	if served["a"]+served["b"] != 40 {
		t.Errorf("served %v, want 40 in all", served)
	}
}

// An agent that goes after taking a command's request but before running it: the
// command is started again through the next agent, and runs once.
func TestAgentGoneBeforeCommandStarts(t *testing.T) {
	sb, _ := agentTestSandbox(t, testConfig(t))
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	sb.CloseAgent()
	// The next agent greets, reads Caddy's hello and the first byte of the command's
	// request, and exits; the one after it is the real agent.
	hello, _ := json.Marshal(agentwire.HelloMsg{Version: agentwire.Version})
	agentArgvForTest.Set(func(path string) []string {
		return []string{"sh", "-c", `if mkdir /tmp/agent-gone-once 2>/dev/null; then
	printf '\000\000\000\015\001\000\000\000\000{"version":2}'
	dd bs=1 count=$2 >/dev/null 2>&1
	exit 0
fi
exec "$1" serve`, "sh", path, strconv.Itoa(9 + len(hello) + 1)}
	})
	t.Cleanup(func() { agentArgvForTest.Clear() })
	res, err := sb.Exec(context.Background(), "echo run >> /sandbox/runs; cat /sandbox/runs", boxapi.ExecOptions{})
	if err != nil || res.ExitCode != 0 || res.Stdout != "run\n" {
		t.Fatalf("the command through an agent that went: %+v, %v", res, err)
	}
}

// File streams nobody reads (a share link's downloads paused by their client), more
// than the agent channel's budget would hold at their full window, leave a command's
// output on the same sandbox flowing. Before, four such streams starved the command of
// credit and eight stopped the channel altogether.
func TestStalledReadsDoNotStopCommands(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "agent's exec", true: "direct channel"}[direct], func(t *testing.T) {
			cfg := testConfig(t)
			if direct {
				cfg = directConfig(t)
			}
			cfg.MaxOutput = 2 << 20
			sb, _ := agentTestSandbox(t, cfg)
			ctx := context.Background()
			mustExec(t, sb, "head -c 12m /dev/zero > /sandbox/big", boxapi.ExecOptions{})
			const stalled = 10
			for i := 0; i < stalled; i++ {
				// From an offset, as a Range request reads: through the agent even
				// without the direct channel.
				f, err := sb.OpenRange(ctx, "/sandbox/big", 1, -1)
				if err != nil {
					t.Fatalf("stream %d: %v", i, err)
				}
				defer f.Close()
				if _, err := io.ReadFull(f, make([]byte, 1)); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(300 * time.Millisecond) // the windows fill
			for i := 0; i < 3; i++ {
				res, err := sb.Exec(ctx, "head -c 1048576 /dev/zero | tr '\\0' x", boxapi.ExecOptions{Timeout: 20 * time.Second, MaxOutput: 2 << 20})
				if err != nil {
					t.Fatalf("command %d beside %d stalled reads: %v", i, stalled, err)
				}
				if res.TimedOut || len(res.Stdout) != 1<<20 {
					t.Fatalf("command %d beside %d stalled reads: %d bytes, timed out %v, %v", i, stalled, len(res.Stdout), res.TimedOut, err)
				}
			}
		})
	}
}
