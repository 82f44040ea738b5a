package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// directConfig is testConfig with a directory for the agent's direct channel.
func directConfig(t *testing.T) Config {
	cfg := testConfig(t)
	if cfg.NoAgent {
		t.Skip("the agent is off (MCP_SANDBOX_TEST_NO_AGENT)")
	}
	cfg.AgentSocketDir = t.TempDir()
	return cfg
}

// With a directory shared with the container, the agent's operations leave Docker:
// commands, files and uploads create no Docker exec, the container sees its directory
// read-only, and no socket stays there to dial.
func TestDirectChannel(t *testing.T) {
	cfg := directConfig(t)
	sb, cli := agentTestSandbox(t, cfg)
	ctx := context.Background()
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	if ok, why := sb.AgentDirect(); !ok {
		t.Fatalf("no direct channel: %s", why)
	}
	before := cli.n.Load()
	res := mustExec(t, sb, "ls -A "+directMount+"; touch "+directMount+"/x 2>&1; echo $((6*7))", boxapi.ExecOptions{})
	if !strings.Contains(res.Stdout, "Read-only file system") || !strings.HasSuffix(res.Stdout, "42\n") || strings.Contains(res.Stdout, directSocket) {
		t.Fatalf("the container's view of its directory: %q", res.Stdout)
	}
	data := strings.Repeat("direct channel\n", 300000) // 4.5 MB: past archiveMin
	if _, err := sb.Upload(ctx, "/sandbox/d", "big.txt", strings.NewReader(data), boxapi.UploadOptions{Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	f, err := sb.OpenRange(ctx, "/sandbox/d/big.txt", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(f)
	f.Close()
	if err != nil || string(got) != data {
		t.Fatalf("read back %d bytes of %d: %v", len(got), len(data), err)
	}
	// The guard of an upload is a command on the agent too: no exec, and no transfer
	// container either.
	if n := cli.n.Load() - before; n != 0 {
		t.Fatalf("%d Docker execs through the direct channel", n)
	}
	if n := sb.link.bulkWrites.Load(); n != 1 {
		t.Fatalf("%d uploads over a socket of their own, want 1", n)
	}
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", labelTransferOf+"="+cfg.Container))})
	if err != nil || len(list) != 0 {
		t.Fatalf("transfer containers made: %d %v", len(list), err)
	}
	// The containers' directories and the agent's binary, of which each container's
	// directory holds a link.
	entries, err := os.ReadDir(filepath.Dir(sb.link.directDir()))
	if err != nil || len(entries) != 2 {
		t.Fatalf("the host's directory: %v %v", entries, err)
	}
	left, _ := os.ReadDir(sb.link.directDir())
	if len(left) != 1 || "/"+directMount+"/"+left[0].Name() != "/"+sb.link.agentBinary() {
		t.Fatalf("left in the container's directory: %v (agent %s)", left, sb.link.agentBinary())
	}
}

// With its read-only directory, the container runs the agent from there: root in the
// container cannot replace the binary, neither before its start nor between Caddy
// placing it and running it, and every agent started is the real one.
func TestAgentBinaryCannotBeSwapped(t *testing.T) {
	sb, _ := agentTestSandbox(t, directConfig(t))
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	bin := sb.link.agentBinary()
	if !strings.HasPrefix(bin, directMount+"/sandbox-agent-") {
		t.Fatalf("the agent runs from %q, not from %s", bin, directMount)
	}
	try := mustExec(t, sb, `cp /bin/busybox /tmp/impostor
for how in "cp /tmp/impostor `+bin+`" "mv -f /tmp/impostor `+bin+`" "rm -f `+bin+`" "mv `+directMount+` /x" "umount `+directMount+`"; do
	$how 2>/dev/null && echo "$how: done"
done
cmp -s /bin/busybox `+bin+` && echo "the binary is busybox"
true`, boxapi.ExecOptions{})
	if try.Stdout != "" {
		t.Fatalf("the container changed the agent's binary: %q", try.Stdout)
	}
	// A terminal job runs under the same binary.
	if res := mustExec(t, sb, "tty", boxapi.ExecOptions{TTY: true}); !strings.HasPrefix(res.Stdout, "/dev/pts/") {
		t.Fatalf("tty job: %+v", res)
	}
	// A loop renaming an impostor over every agent binary it can find, while Caddy
	// starts agents.
	mustExec(t, sb, `nohup sh -c 'while :; do for f in `+agentDir+`/sandbox-agent-* `+directMount+`/sandbox-agent-*; do cp /bin/busybox /tmp/i 2>/dev/null; mv -f /tmp/i "$f" 2>/dev/null; done; done' >/dev/null 2>&1 &`, boxapi.ExecOptions{})
	for i := 0; i < 5; i++ {
		sb.CloseAgent()
		if res := mustExec(t, sb, "echo real", boxapi.ExecOptions{}); res.Stdout != "real\n" {
			t.Fatalf("start %d: %+v", i, res)
		}
		sb.link.agentMu.Lock()
		peer := sb.link.agent.sess.Peer()
		sb.link.agentMu.Unlock()
		if ok, why := sb.AgentStatus(); !ok || peer.Build != path.Base(bin) || sb.link.agentBinary() != bin {
			t.Fatalf("start %d: agent %v (%s), build %q from %s", i, ok, why, peer.Build, sb.link.agentBinary())
		}
	}
}

// directStarted runs a command on sb and returns its agent's direct channel and exec
// session.
func directStarted(t *testing.T, sb *Sandbox) (direct, sess *agentwire.Session) {
	t.Helper()
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	sb.link.agentMu.Lock()
	direct, sess = sb.link.agent.direct, sb.link.agent.sess
	sb.link.agentMu.Unlock()
	if direct == nil {
		t.Fatal("no direct channel")
	}
	return direct, sess
}

// directNow waits for the agent's direct channel to be one other than old, and
// returns it.
func directNow(t *testing.T, sb *Sandbox, old *agentwire.Session) *agentwire.Session {
	t.Helper()
	for i := 0; ; i++ {
		sb.link.agentMu.Lock()
		d := sb.link.agent.direct
		sb.link.agentMu.Unlock()
		if d != nil && d != old && d.Err() == nil {
			return d
		}
		if i == 300 {
			ok, why := sb.AgentDirect()
			t.Fatalf("no new direct channel: %v %q", ok, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// When the direct channel ends while the agent runs, the agent's exec carries the
// calls while it is made again, up to directRedials times; after that the calls stay
// on the exec, and a new agent makes a new direct channel.
func TestDirectChannelEnds(t *testing.T) {
	sb, _ := agentTestSandbox(t, directConfig(t))
	direct, sess := directStarted(t, sb)
	for i := range directRedials {
		direct.Close()
		if res := mustExec(t, sb, "echo still", boxapi.ExecOptions{}); res.Stdout != "still\n" {
			t.Fatalf("%+v", res)
		}
		direct = directNow(t, sb, direct)
		if got := sb.link.agentSession(context.Background()); got != direct {
			t.Fatalf("after end %d the calls do not go through the new direct channel", i+1)
		}
	}
	direct.Close()
	for i := 0; ; i++ {
		if ok, why := sb.AgentDirect(); !ok && strings.Contains(why, "the direct channel ended") {
			break
		} else if i == 300 {
			t.Fatalf("direct channel: %v %q, want why it ended", ok, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := sb.link.agentSession(context.Background()); got != sess {
		t.Fatal("the call after the direct channel ended did not go through the agent's exec")
	}
	sb.CloseAgent()
	if res := mustExec(t, sb, "echo again", boxapi.ExecOptions{}); res.Stdout != "again\n" {
		t.Fatalf("%+v", res)
	}
	if ok, why := sb.AgentDirect(); !ok {
		t.Fatalf("the new agent has no direct channel: %s", why)
	}
}

// The job runner serves the direct channel (the agent hands it over): killed, the
// channel ends with it; the agent carries on, starts a new runner for a new direct
// channel, and the commands run there. Nothing of it needs a new agent.
func TestDirectChannelRunnerKilled(t *testing.T) {
	cfg := directConfig(t)
	sb, cli := agentTestSandbox(t, cfg)
	direct, sess := directStarted(t, sb)
	agentPID := sess.Peer().PID
	runner := direct.Peer().PID
	if runner == agentPID || runner == 0 {
		t.Fatalf("the direct channel is served by pid %d, the agent is %d: want the job runner", runner, agentPID)
	}
	// A command run there runs under the runner.
	if res := mustExec(t, sb, `echo $PPID`, boxapi.ExecOptions{}); strings.TrimSpace(res.Stdout) != strconv.Itoa(runner) {
		t.Fatalf("the command's parent is %q, want the runner %d", res.Stdout, runner)
	}
	// Killed from outside the agent's reach.
	if out, code := containerExec(t, cli, cfg.Container, "sh", "-c", "kill -9 "+strconv.Itoa(runner)); code != 0 {
		t.Fatalf("kill: %d %s", code, out)
	}
	if res := mustExec(t, sb, "echo after", boxapi.ExecOptions{}); res.Stdout != "after\n" {
		t.Fatalf("%+v", res)
	}
	d := directNow(t, sb, direct)
	if p := d.Peer().PID; p == runner || p == agentPID {
		t.Fatalf("the new direct channel is served by pid %d (runner was %d, agent %d)", p, runner, agentPID)
	}
	res := mustExec(t, sb, `echo $PPID`, boxapi.ExecOptions{})
	if strings.TrimSpace(res.Stdout) != strconv.Itoa(d.Peer().PID) {
		t.Fatalf("the command's parent is %q, want the new runner %d", res.Stdout, d.Peer().PID)
	}
	sb.link.agentMu.Lock()
	same := sb.link.agent.sess == sess
	sb.link.agentMu.Unlock()
	if !same {
		t.Fatal("the runner's death took a new agent")
	}
}

// withoutDirect makes a sandbox of cfg whose commands run although it has no direct
// channel, for a reason that says why.
func withoutDirect(t *testing.T, cfg Config, why string) *Sandbox {
	t.Helper()
	sb, _ := agentTestSandbox(t, cfg)
	if res := mustExec(t, sb, "echo ok", boxapi.ExecOptions{}); res.Stdout != "ok\n" {
		t.Fatalf("%+v", res)
	}
	if ok, reason := sb.AgentDirect(); ok || !strings.Contains(reason, why) {
		t.Fatalf("direct channel: %v %q, want a reason with %q", ok, reason, why)
	}
	return sb
}

// An engine that sees another file system than Caddy (Caddy in a container of its own,
// a socket forwarded from elsewhere) mounts a directory of its own at the same path:
// the agent finds no socket there, and the sandbox goes on through the agent's exec and
// gives no later container the directory.
func TestDirectChannelEngineElsewhere(t *testing.T) {
	elsewhere := t.TempDir()
	hostConfigForTest.Set(func(hc *container.HostConfig) {
		if len(hc.Binds) > 0 {
			hc.Binds[0] = elsewhere + ":" + directMount + ":ro"
		}
	})
	t.Cleanup(hostConfigForTest.Clear)
	sb := withoutDirect(t, directConfig(t), "does not see")
	if !sb.link.noBind.Load() {
		t.Fatal("later containers would still get the directory")
	}
}

// Whoever dials without the token given to the agent is refused, and the sandbox
// goes on through the agent's exec; so does a container made before its directory
// was shared (none mounted).
func TestDirectChannelRefused(t *testing.T) {
	t.Run("wrong token", func(t *testing.T) {
		directTokenForTest.Set(func(string) string { return "someone else" })
		t.Cleanup(directTokenForTest.Clear)
		sb := withoutDirect(t, directConfig(t), "token")
		if running, why := sb.AgentStatus(); !running {
			t.Fatalf("agent not running: %s", why)
		}
	})
	t.Run("no directory in the container", func(t *testing.T) {
		cfg := directConfig(t)
		dir := cfg.AgentSocketDir
		cfg.AgentSocketDir = ""
		first, _ := agentTestSandbox(t, cfg)
		mustExec(t, first, "true", boxapi.ExecOptions{})
		first.CloseAgent()
		cfg.AgentSocketDir = dir
		withoutDirect(t, cfg, "recreating the sandbox adds it")
	})
}

// A bulk socket serves only whoever knows its token: a few strangers first are
// turned away without harm, too many end the write, and nobody dialing ends it when
// the call's context does.
func TestBulkSocketStrangers(t *testing.T) {
	body := strings.Repeat("bulk bytes ", 100000)
	dial := func(b *bulkSocket, say string) net.Conn {
		c, err := net.Dial("unix", b.ln.Addr().String())
		if err != nil {
			t.Error(err)
			return nil
		}
		io.WriteString(c, say)
		return c
	}
	t.Run("strangers, then the agent", func(t *testing.T) {
		b, err := newBulkSocket(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		got := make(chan string, 1)
		go func() {
			for _, say := range []string{"", "not the token", strings.Repeat("x", len(b.token))} {
				if c := dial(b, say); c != nil {
					c.Close()
				}
			}
			c := dial(b, b.token)
			all, _ := io.ReadAll(c)
			got <- string(all)
		}()
		n, werr, rerr := b.send(context.Background(), make(chan struct{}), strings.NewReader(body))
		if werr != nil || rerr != nil || n != int64(len(body)) {
			t.Fatalf("send: %d bytes, %v, %v", n, werr, rerr)
		}
		if s := <-got; s != body {
			t.Fatalf("the agent got %d bytes of %d", len(s), len(body))
		}
	})
	t.Run("too many strangers", func(t *testing.T) {
		b, err := newBulkSocket(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		go func() {
			for range bulkAccepts + 1 {
				if c := dial(b, "stranger"); c != nil {
					defer c.Close()
				}
			}
		}()
		_, werr, _ := b.send(context.Background(), make(chan struct{}), strings.NewReader(body))
		if werr == nil || !strings.Contains(werr.Error(), "token") {
			t.Fatalf("send: %v", werr)
		}
	})
	t.Run("nobody dials", func(t *testing.T) {
		b, err := newBulkSocket(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, werr, _ := b.send(ctx, make(chan struct{}), strings.NewReader(body))
		if werr == nil || time.Since(start) > 2*time.Second {
			t.Fatalf("send: %v after %v", werr, time.Since(start))
		}
	})
	t.Run("the write's stream ends", func(t *testing.T) {
		b, err := newBulkSocket(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		done := make(chan struct{})
		returned := make(chan struct{})
		ended := make(chan time.Time, 1)
		go func() {
			c := dial(b, b.token) // and never reads
			time.Sleep(100 * time.Millisecond)
			ended <- time.Now()
			close(done)
			<-returned // the peer stays until send gave up
			c.Close()
		}()
		_, werr, _ := b.send(context.Background(), done, &endless{chunk: []byte("x")})
		close(returned)
		if werr == nil {
			t.Fatal("an endless body went to a peer that never read")
		}
		if d := time.Since(<-ended); d > 2*time.Second {
			t.Fatalf("send gave up %v after the stream ended", d)
		}
	})
}

// An engine that cannot mount the directory (it sees another file system than Caddy)
// gets the container without it: the sandbox works through the agent's exec.
func TestDirectChannelBindRefused(t *testing.T) {
	hostConfigForTest.Set(func(hc *container.HostConfig) {
		if len(hc.Binds) > 0 {
			hc.Binds[0] = "/dev/null" + hc.Binds[0] // mkdir /dev/null/...: not a directory
		}
	})
	t.Cleanup(hostConfigForTest.Clear)
	sb := withoutDirect(t, directConfig(t), "does not see")
	if res := mustExec(t, sb, "ls "+directMount+" 2>&1", boxapi.ExecOptions{}); !strings.Contains(res.Stdout, "No such file") {
		t.Fatalf("the container has the directory: %+v", res)
	}
	if !sb.link.noBind.Load() {
		t.Fatal("the refusal was not noted")
	}
}

// Something in the container that kills each agent from the read-only directory before
// its greeting does not get Caddy to start a copy in the container's own filesystem,
// which it could replace: the sandbox goes on through Docker execs. Before, any failure
// to start from the directory fell back to the copy.
func TestAgentKilledNotCopied(t *testing.T) {
	for _, first := range []bool{true, false} {
		name := "after the directory's agent ran"
		if !first {
			name = "on the container's first agent"
		}
		t.Run(name, func(t *testing.T) {
			sb, _ := agentTestSandbox(t, directConfig(t))
			if first {
				mustExec(t, sb, "true", boxapi.ExecOptions{})
				if bin := sb.link.agentBinary(); !strings.HasPrefix(bin, directMount+"/") {
					t.Fatalf("the agent runs from %q, not from %s", bin, directMount)
				}
				sb.CloseAgent()
			}
			// Killed as it starts, as a root in the container could do: the copy's path
			// gets the real agent.
			agentArgvForTest.Set(func(path string) []string {
				if strings.HasPrefix(path, directMount+"/") {
					return []string{"/bin/sh", "-c", "kill -9 $$"}
				}
				return []string{path, "serve"}
			})
			t.Cleanup(agentArgvForTest.Clear)
			if res := mustExec(t, sb, "echo on", boxapi.ExecOptions{}); res.Stdout != "on\n" {
				t.Fatalf("%+v", res)
			}
			if running, why := sb.AgentStatus(); running || sb.link.agentBinary() != "" {
				t.Fatalf("an agent runs (%v %q) from %q", running, why, sb.link.agentBinary())
			}
			agentArgvForTest.Clear()
			if res := mustExec(t, sb, "ls -A "+agentDir+" 2>/dev/null; true", boxapi.ExecOptions{}); res.Stdout != "" {
				t.Fatalf("the agent was copied into the container: %q", res.Stdout)
			}
		})
	}
}

// The agent cannot be traced or read by the container's root, who could otherwise make
// it exit as though its binary could not be executed, or answer in its place.
func TestAgentNotTraceable(t *testing.T) {
	sb, _ := agentTestSandbox(t, directConfig(t))
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	sb.link.agentMu.Lock()
	pid := sb.link.agent.sess.Peer().PID
	sb.link.agentMu.Unlock()
	res := mustExec(t, sb, fmt.Sprintf("cat /proc/%d/environ >/dev/null && echo readable; cat /proc/self/environ >/dev/null && echo own", pid), boxapi.ExecOptions{})
	if res.Stdout != "own\n" {
		t.Fatalf("the agent's memory (pid %d): %+v", pid, res)
	}
}
