package sandbox

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
)

// TestStopAndStartAgain stops the container and starts it again with Ensure: the files
// in /sandbox are there, processes are not, and a job that prints counts as output
// while a silent one does not.
func TestStopAndStartAgain(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx := context.Background()
	mustExec(t, sb, "echo kept > /sandbox/f", boxapi.ExecOptions{})

	silent := mustExec(t, sb, "cp /bin/sleep /tmp/silent; exec /tmp/silent 300", boxapi.ExecOptions{Wait: boxapi.NoWait})
	since := time.Now()
	time.Sleep(1100 * time.Millisecond) // the check has whole seconds
	if busy, err := sb.JobOutputSince(ctx, time.Now().Add(-time.Second)); err != nil || busy {
		t.Fatalf("a silent job (%s) counts as output: %v %v", silent.JobID, busy, err)
	}
	loud := mustExec(t, sb, "while :; do echo tick; sleep 0.3; done", boxapi.ExecOptions{Wait: boxapi.NoWait})
	time.Sleep(1100 * time.Millisecond)
	if busy, err := sb.JobOutputSince(ctx, since); err != nil || !busy {
		t.Fatalf("a printing job (%s) does not count as output: %v %v", loud.JobID, busy, err)
	}

	if err := sb.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if run, err := sb.Running(ctx); err != nil || run {
		t.Fatalf("after Stop: running %v, %v", run, err)
	}
	if busy, err := sb.JobOutputSince(ctx, since); err != nil || busy {
		t.Fatalf("a stopped sandbox has output: %v %v", busy, err)
	}
	raw := testengine.BareStart(t, cli)
	begin := time.Now()
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res := mustExec(t, sb, "cat /sandbox/f; for p in /proc/[0-9]*; do readlink $p/exe; done | grep -c /tmp/silent", boxapi.ExecOptions{})
	took := time.Since(begin)
	t.Logf("the first command after the stop took %v (a bare container starts in %v)", took.Round(time.Millisecond), raw.Round(time.Millisecond))
	if res.Stdout != "kept\n0\n" {
		t.Fatalf("after the start: %q %q", res.Stdout, res.Stderr)
	}
	if bound := testengine.StartBound(3*time.Second, raw, 3*time.Second); took > bound {
		t.Errorf("starting the stopped sandbox took %v, more than %v (a bare container starts in %v)", took, bound, raw)
	}
}

// TestCleanupCatchesUpAfterStart: a cleanup pass that finds the container stopped runs
// again as soon as the container starts, before the next interval.
func TestCleanupCatchesUpAfterStart(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	cfg.FileTTL = time.Hour
	cfg.CleanupInterval = 8 * time.Second
	sb := newTestSandbox(t, cli, cfg)
	mustExec(t, sb, `echo x > old.txt; touch -d "@$(( $(date +%s) - 7200 ))" old.txt`, boxapi.ExecOptions{})
	ctx := context.Background()
	if err := sb.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deleted := make(chan time.Time, 4)
	loop := time.Now()
	go sb.RunCleanup(lctx, func([]string) { deleted <- time.Now() })
	time.Sleep(cfg.CleanupInterval + 500*time.Millisecond) // one pass skipped
	select {
	case <-deleted:
		t.Fatal("a pass deleted files in a stopped container")
	default:
	}
	if err := sb.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	next := loop.Add(2 * cfg.CleanupInterval) // the next tick's pass
	if started.After(next) {
		t.Skipf("starting the container took until after the next interval (%v): nothing to tell apart", started.Sub(loop))
	}
	select {
	case at := <-deleted:
		t.Logf("the missed pass ran %v after the start", at.Sub(started).Round(time.Millisecond))
		if at.After(next) {
			t.Errorf("the missed pass ran only with the next interval (%v after the start)", at.Sub(started))
		}
	case <-time.After(time.Until(next) + 5*time.Second):
		t.Fatal("no pass ran after the start")
	}
}

// TestUpkeepListenWaitsForStart: under Upkeep, listening in a stopped container fails
// with NotRunning and leaves it stopped; Ready wakes when Start has started it, and a
// listener opens then. Delete removes the container, and the volume only when asked.
func TestUpkeepListenWaitsForStart(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	cfg.Person = "carol"
	sb := newTestSandbox(t, cli, cfg)
	ctx := context.Background()
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	if info, err := cli.ContainerInspect(ctx, cfg.Container); err != nil || info.Config.Labels[labelPerson] != "carol" {
		t.Fatalf("the person label: %v", err)
	}
	if err := sb.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	ready := sb.Ready()
	_, _, err := sb.ListenPort(Upkeep(ctx), 3128, func(net.Conn) {})
	if !NotRunning(err) {
		t.Fatalf("listening under Upkeep in a stopped container: %v", err)
	}
	if run, err := sb.Running(ctx); err != nil || run {
		t.Fatalf("listening started the container: %v %v", run, err)
	}
	select {
	case <-ready:
		t.Fatal("Ready closed while the container was stopped")
	default:
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ready:
	case <-time.After(time.Second):
		t.Fatal("Ready did not close after Start")
	}
	stop, _, err := sb.ListenPort(Upkeep(ctx), 3128, func(net.Conn) {})
	if err != nil {
		t.Fatalf("listening after the start: %v", err)
	}
	if !sb.Listening(3128) || sb.Listening(3129) {
		t.Fatal("Listening does not tell the open listener")
	}
	stop()

	if err := sb.Delete(ctx, false); err != nil {
		t.Fatal(err)
	}
	if ok, err := Exists(ctx, cli, cfg.Container); err != nil || ok {
		t.Fatalf("the container after Delete: %v %v", ok, err)
	}
	if _, err := cli.VolumeInspect(ctx, cfg.Volume); err != nil {
		t.Fatalf("the volume after Delete without it: %v", err)
	}
	if err := sb.Delete(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.VolumeInspect(ctx, cfg.Volume); err == nil {
		t.Fatal("the volume is still there")
	}
}

// TestStartDropsStaleAgent: an agent channel whose end was never seen (a stream the
// engine did not close when the container stopped; a fake here, as no engine fails so
// on demand) is not used after the container was found stopped and started again: the
// start closes it, its listener no longer counts, and commands reach a new agent.
func TestStartDropsStaleAgent(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx := context.Background()
	mustExec(t, sb, "true", boxapi.ExecOptions{})

	stale := fakeAgent(t, func(st *agentwire.Stream, req agentwire.Request) {
		if _, ok := req.(*agentwire.ListenRequest); ok {
			st.CloseChannel(agentwire.Connected) // listening, as the old agent was
		}
		<-st.Done()
	})
	sb.CloseAgent()
	sb.link.agentMu.Lock()
	sb.link.agent.sess = stale
	sb.link.agentMu.Unlock()
	const port = 3129
	stop, _, err := sb.ListenPort(ctx, port, func(c net.Conn) { c.Close() })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if !sb.Listening(port) {
		t.Fatal("the listener on the stale channel does not count before the stop")
	}

	t0 := 0
	if err := cli.ContainerStop(ctx, sb.Config().Container, container.StopOptions{Timeout: &t0}); err != nil {
		t.Fatal(err)
	}
	sb.life.invalidate() // as a command that found it stopped does
	if err := sb.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if stale.Err() == nil {
		t.Fatal("the agent channel of before the stop is still open after the start")
	}
	if sb.Listening(port) {
		t.Fatal("the stale channel's listener counts after the start")
	}
	res := mustExec(t, sb, "echo fresh", boxapi.ExecOptions{})
	if res.Stdout != "fresh\n" {
		t.Fatalf("after the start: %q %q", res.Stdout, res.Stderr)
	}
}
