package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// buildImpostor builds testdata/impostor for the container (a static Linux binary of
// this machine's architecture) and returns its path.
func buildImpostor(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "impostor")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/impostor")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the impostor: %v\n%s", err, b)
	}
	return out
}

// A program that root in the container runs in the agent's place (here through the
// test hook; in an attack by replacing the binary or speaking on the agent's pipes)
// opens as many connection streams as it may once Caddy listens through it, and fills
// each window with 1-byte frames. Caddy's heap stays within the session's budget, far
// under 600 MB, the streams it accepts stay within MaxAgentStreams, and once the
// impostor is gone the sandbox answers through a real agent.
func TestImpostorAgentBounded(t *testing.T) {
	sb, _ := agentTestSandbox(t, testConfig(t))
	bin := buildImpostor(t)
	ctx := context.Background()
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	_, err = sb.Upload(ctx, "/tmp", "impostor", f, boxapi.UploadOptions{Size: fi.Size()})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, sb, "chmod 755 /tmp/impostor", boxapi.ExecOptions{})

	heap0 := testenv.HeapAfterGC()
	agentArgvForTest.Set(func(string) []string { return []string{"/tmp/impostor"} })
	t.Cleanup(func() { agentArgvForTest.Clear() })
	sb.CloseAgent()
	var mu sync.Mutex
	var conns []net.Conn
	// A proxy stuck on its upstream: it takes the connections and reads nothing.
	stop, _, err := sb.ListenPort(ctx, 3128, func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	sb.link.agentMu.Lock()
	sess := sb.link.agent.sess
	sb.link.agentMu.Unlock()
	if sess == nil || sess.Peer().Build != "impostor" {
		t.Fatalf("the impostor does not run: %v", sess)
	}

	// The impostor floods until Caddy stops reading at the budget.
	var peak uint64
	deadline := time.Now().Add(60 * time.Second)
	for sess.Held() < agentwire.MaxHeld-agentwire.MaxFromAgent {
		if time.Now().After(deadline) {
			t.Fatalf("the impostor did not fill the budget: %d bytes held", sess.Held())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < 10; i++ {
		peak = max(peak, testenv.HeapAfterGC())
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	accepted := len(conns)
	mu.Unlock()
	grew := int64(peak) - int64(heap0)
	t.Logf("impostor: %d streams accepted, %.1f MiB held by count, heap %.1f MiB before, peak %.1f MiB (grew %.1f MiB)",
		accepted, float64(sess.Held())/(1<<20), float64(heap0)/(1<<20), float64(peak)/(1<<20), float64(grew)/(1<<20))
	if peak > 600<<20 || grew > 3*agentwire.MaxHeld {
		t.Errorf("the heap grew by %d MiB to %d MiB under the impostor", grew>>20, peak>>20)
	}
	if accepted > agentwire.MaxAgentStreams {
		t.Errorf("%d streams of the impostor accepted, more than %d", accepted, agentwire.MaxAgentStreams)
	}
	if sess.Err() != nil {
		t.Fatalf("the session ended: %v", sess.Err())
	}

	// The stuck connections time out (here: are closed), the impostor is replaced by a
	// real agent, and the sandbox answers.
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	stop()
	agentArgvForTest.Clear()
	sb.CloseAgent()
	if res := mustExec(t, sb, "echo answers", boxapi.ExecOptions{Timeout: 30 * time.Second}); res.Stdout != "answers\n" {
		t.Fatalf("%+v", res)
	}
	if ok, why := sb.AgentStatus(); !ok {
		t.Fatalf("no real agent afterwards: %s", why)
	}
}

// A program in the container that connects and never reads cannot hold Caddy's
// writer: a write on the connection ends at its deadline.
func TestStreamConnWriteDeadline(t *testing.T) {
	sb, _ := agentTestSandbox(t, testConfig(t))
	ctx := context.Background()
	errs := make(chan error, 1)
	stop, _, err := sb.ListenPort(ctx, 3129, func(c net.Conn) {
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		_, err := c.Write(make([]byte, 64<<20))
		errs <- err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	job := mustExec(t, sb, `exec 3<>/dev/tcp/127.0.0.1/3129; sleep 60`, boxapi.ExecOptions{Wait: boxapi.NoWait})
	defer sb.KillJob(ctx, job.JobID, 0)
	select {
	case err := <-errs:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the write to a program that never reads returned %v, want os.ErrDeadlineExceeded", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write to a program that never reads outlived its deadline")
	}
}

// Connections past MaxAgentStreams held at once are refused: the program in the
// container sees them closed, the ones taken stay open, and a connection made once
// some are let go is taken again.
func TestListenPortStreamCap(t *testing.T) {
	sb, _ := agentTestSandbox(t, testConfig(t))
	ctx := context.Background()
	var mu sync.Mutex
	var conns []net.Conn
	stop, _, err := sb.ListenPort(ctx, 3130, func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	n := agentwire.MaxAgentStreams + 20
	res := mustExec(t, sb, fmt.Sprintf(`fds=
for i in $(seq %d); do exec {fd}<>/dev/tcp/127.0.0.1/3130 && fds="$fds $fd"; sleep 0.01; done
sleep 1
closed=0 open=0
for fd in $fds; do
	read -t 0.01 -u $fd x; rc=$?
	if [ $rc -gt 128 ]; then open=$((open+1)); else closed=$((closed+1)); fi
done
echo "open=$open closed=$closed"`, n), boxapi.ExecOptions{Timeout: time.Minute})
	want := fmt.Sprintf("open=%d closed=%d\n", agentwire.MaxAgentStreams, n-agentwire.MaxAgentStreams)
	mu.Lock()
	took := len(conns)
	mu.Unlock()
	if res.Stdout != want || took != agentwire.MaxAgentStreams {
		t.Fatalf("the container saw %q (want %q); Caddy took %d connections", res.Stdout, want, took)
	}
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	mu.Unlock()
	time.Sleep(200 * time.Millisecond)
	mustExec(t, sb, `exec 3<>/dev/tcp/127.0.0.1/3130; sleep 1`, boxapi.ExecOptions{})
	mu.Lock()
	took = len(conns)
	mu.Unlock()
	if took != 1 {
		t.Fatalf("after the connections were let go, Caddy took %d new ones, want 1", took)
	}
}
