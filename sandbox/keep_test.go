package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/checkpoint"
	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// keepCounter counts in /tmp/count every 0.2 s, forever, each number written aside and
// renamed into place so a reader never meets the file truncated; keepHolder holds 60 MB in a
// bash variable and sleeps.
const (
	keepCounter = "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done"
	keepHolder  = "x=$(head -c 60000000 /dev/zero | tr '\\0' a); echo $$ > /tmp/holder; exec 3>/tmp/holder.fd; sleep 100000; echo ${#x}"
)

// keepSandbox is a sandbox under gVisor with keep_processes on, and core the log.
func keepSandbox(t *testing.T) (*Sandbox, dockerEngine, *observer.ObservedLogs) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	cfg.Runtime = testengine.GVisorMemory(t, cli)
	cfg.KeepProcesses = true
	cfg.Memory = 1 << 30
	core, logs := observer.New(zapcore.InfoLevel)
	sb, err := New(cli, cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range logs.All() {
				t.Logf("log: %s %v", e.Message, e.ContextMap())
			}
		}
		sb.CloseTransfers()
		removeSandbox(t, cli, cfg)
	})
	return sb, cli, logs
}

// readInt runs command and parses its output as a number.
func readInt(t *testing.T, sb *Sandbox, command string) int {
	t.Helper()
	res := mustExec(t, sb, command, boxapi.ExecOptions{})
	n, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatalf("%s: %q %q", command, res.Stdout, res.Stderr)
	}
	return n
}

// TestKeepProcesses: with keep_processes under gVisor, a stop saves the running
// processes and leaves the container exited; the next start restores them: a counting
// job goes on from where it was (as the same job, still running), a process holding
// 60 MB has its pid and its memory, and the save is deleted. A second round works too.
func TestKeepProcesses(t *testing.T) {
	sb, cli, logs := keepSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	counter := mustExec(t, sb, keepCounter, boxapi.ExecOptions{Wait: 500 * time.Millisecond})
	holder := mustExec(t, sb, keepHolder, boxapi.ExecOptions{Wait: 500 * time.Millisecond})
	if !counter.Running || !holder.Running {
		t.Fatalf("jobs: %+v %+v", counter, holder)
	}
	// Only what descends from the container's main process is saved: the job's runner
	// is one it started, not the agent (an exec).
	if r := mustExec(t, sb, testenv.ParentArgs("count.new; mv"), boxapi.ExecOptions{}); !strings.HasSuffix(r.Stdout, " jobs --announce ") {
		t.Errorf("the counter's runner is %q, want one the container's main process started (jobs --announce)", r.Stdout)
	}
	// Bash reads the 60 MB in small pieces, each a system call gVisor serves slowly
	// on a busy machine: the wait ends as soon as they are held.
	testenv.WaitFor(t, 90*time.Second, "the holder's 60 MB", func() bool {
		r := mustExec(t, sb, "p=$(cat /tmp/holder) && grep VmRSS /proc/$p/status | tr -dc 0-9", boxapi.ExecOptions{})
		kb, _ := strconv.Atoi(strings.TrimSpace(r.Stdout))
		return kb > 55000
	})
	pid := readInt(t, sb, "cat /tmp/holder")
	for round := 1; round <= 2; round++ {
		before := readInt(t, sb, "cat /tmp/count")
		if err := sb.Stop(ctx, "idle_stop"); err != nil {
			t.Fatal(err)
		}
		info, err := cli.ContainerInspect(ctx, sb.cfg.Container)
		if err != nil || info.State.Running {
			t.Fatalf("round %d: after the stop the container runs: %v %v", round, info.State, err)
		}
		list, err := cli.CheckpointList(ctx, sb.cfg.Container, checkpoint.ListOptions{})
		if err != nil || len(list) != 1 || list[0].Name != keptCheckpoint {
			t.Fatalf("round %d: checkpoints after the stop: %+v %v", round, list, err)
		}
		if saved, n := sb.Kept(); !saved || n < 60<<20 {
			t.Errorf("round %d: the save: %v, %d bytes, want at least the 60 MB held", round, saved, n)
		}
		if logs.FilterMessage("saved the sandbox's running processes and memory, and stopped it").Len() != round {
			t.Errorf("round %d: the save was not logged: %v", round, logs.All())
		}
		time.Sleep(time.Second)
		begin := time.Now()
		if err := sb.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: started from the save in %v", round, time.Since(begin))
		after := readInt(t, sb, "cat /tmp/count")
		time.Sleep(time.Second)
		later := readInt(t, sb, "cat /tmp/count")
		if after < before || later <= after {
			t.Errorf("round %d: the counter was at %d, then %d after the start and %d a second later: it did not go on", round, before, after, later)
		}
		if got := readInt(t, sb, "cat /tmp/holder"); got != pid {
			t.Errorf("round %d: the holder's pid is %d, was %d", round, got, pid)
		}
		if kb := readInt(t, sb, "grep VmRSS /proc/"+strconv.Itoa(pid)+"/status | tr -dc 0-9"); kb < 55000 {
			t.Errorf("round %d: the holder has %d kB resident, want its 60 MB", round, kb)
		}
		jobs, err := sb.ListJobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		running := map[string]bool{}
		for _, j := range jobs {
			running[j.ID] = j.State == "running"
		}
		if !running[counter.JobID] || !running[holder.JobID] {
			t.Errorf("round %d: jobs after the start: %+v, want %s and %s running", round, jobs, counter.JobID, holder.JobID)
		}
		if list, err := cli.CheckpointList(ctx, sb.cfg.Container, checkpoint.ListOptions{}); err != nil || len(list) != 0 {
			t.Errorf("round %d: checkpoints after the start: %+v %v, want none", round, list, err)
		}
		if n := sb.TakeNote(); n != "" {
			t.Errorf("round %d: a note after a restore that worked: %q", round, n)
		}
	}
	out, err := sb.JobOutput(ctx, counter.JobID, 0, nil, 0, nil)
	if err != nil || !out.Running {
		t.Errorf("job_output of the counter: %+v %v", out, err)
	}
}

// TestKeepProcessesLost: a save that cannot be restored (its files damaged, or deleted
// by hand) starts the sandbox without it, files kept, and the next command is told
// what was lost; a restart drops a save; a save that fails stops the sandbox as
// without keep_processes and says so too.
func TestKeepProcessesLost(t *testing.T) {
	sb, cli, _ := keepSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mustExec(t, sb, "echo kept > /sandbox/file", boxapi.ExecOptions{})
	mustExec(t, sb, "sleep 100000", boxapi.ExecOptions{Wait: 200 * time.Millisecond})

	// Damaged: the engine's files of the save are cut to nothing.
	if err := sb.Stop(ctx, "idle_stop"); err != nil {
		t.Fatal(err)
	}
	info, err := cli.ContainerInspect(ctx, sb.cfg.Container)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Running {
		t.Fatalf("the container runs after the save (started %s, restart policy %q)", info.State.StartedAt, info.HostConfig.RestartPolicy.Name)
	}
	dir := filepath.Join("/var/lib/docker/containers", info.ID, "checkpoints", keptCheckpoint)
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) == 0 {
		t.Fatalf("no files in %s: the engine keeps its checkpoints elsewhere", dir)
	}
	for _, f := range files {
		if err := os.Truncate(f, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatalf("a start from a damaged save: %v", err)
	}
	if n := sb.TakeNote(); !strings.Contains(n, "could not be restored") || !strings.Contains(n, "files are kept") {
		t.Errorf("the note after a damaged save: %q", n)
	}
	if r := mustExec(t, sb, "cat /sandbox/file; ps -o args | grep -c '^sleep 100000' || true", boxapi.ExecOptions{}); r.Stdout != "kept\n0\n" {
		t.Errorf("after a damaged save: %q, want the file and no sleep", r.Stdout)
	}
	if list, _ := cli.CheckpointList(ctx, sb.cfg.Container, checkpoint.ListOptions{}); len(list) != 0 {
		t.Errorf("the damaged save is still there: %+v", list)
	}

	// Started by hand without the save: the engine says a start of a running
	// container worked, which must not pass for a restore.
	mustExec(t, sb, "sleep 100000", boxapi.ExecOptions{Wait: 200 * time.Millisecond})
	if err := sb.Stop(ctx, "idle_stop"); err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerStart(ctx, sb.cfg.Container, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := sb.TakeNote(); !strings.Contains(n, "started without them") {
		t.Errorf("the note after a start by hand: %q", n)
	}
	if list, _ := cli.CheckpointList(ctx, sb.cfg.Container, checkpoint.ListOptions{}); len(list) != 0 {
		t.Errorf("the save of a container started by hand is still there: %+v", list)
	}

	// Deleted by hand.
	mustExec(t, sb, "sleep 100000", boxapi.ExecOptions{Wait: 200 * time.Millisecond})
	if err := sb.Stop(ctx, "operator"); err != nil {
		t.Fatal(err)
	}
	if err := cli.CheckpointDelete(ctx, sb.cfg.Container, checkpoint.DeleteOptions{CheckpointID: keptCheckpoint}); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := sb.TakeNote(); !strings.Contains(n, "are gone") {
		t.Errorf("the note after a save deleted by hand: %q", n)
	}

	// Restarted while saved (the console's Restart): the processes end by intent and
	// their save goes; the next stop saves anew.
	mustExec(t, sb, "sleep 100000", boxapi.ExecOptions{Wait: 200 * time.Millisecond})
	if err := sb.Stop(ctx, "idle_stop"); err != nil {
		t.Fatal(err)
	}
	if err := sb.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if list, _ := cli.CheckpointList(ctx, sb.cfg.Container, checkpoint.ListOptions{}); len(list) != 0 {
		t.Errorf("the save after a restart: %+v", list)
	}
	if r := mustExec(t, sb, "ps -o args | grep -c '^sleep 100000' || true", boxapi.ExecOptions{}); r.Stdout != "0\n" {
		t.Errorf("after a restart: %q sleeps, want none", r.Stdout)
	}
	if err := sb.Stop(ctx, "idle_stop"); err != nil {
		t.Fatal(err)
	}
	if saved, _ := sb.Kept(); !saved {
		t.Error("the stop after a restart did not save the processes")
	}
	// A stop of the stopped sandbox changes nothing: the save stays, nothing is lost.
	if err := sb.Stop(ctx, "operator"); err != nil {
		t.Fatal(err)
	}
	if list, _ := cli.CheckpointList(ctx, sb.cfg.Container, checkpoint.ListOptions{}); len(list) != 1 {
		t.Errorf("the save after a second stop: %+v", list)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := sb.TakeNote(); n != "" {
		t.Errorf("a note after a second stop and a start: %q", n)
	}

	// A save that fails: the engine refuses it (a full disk, say).
	sb, err = New(failingSave{cli}, sb.cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, sb, "sleep 100000", boxapi.ExecOptions{Wait: 200 * time.Millisecond})
	if err := sb.Stop(ctx, "idle_stop"); err != nil {
		t.Fatal(err)
	}
	if info, err := cli.ContainerInspect(ctx, sb.cfg.Container); err != nil || info.State.Running {
		t.Fatalf("after a failed save the container runs: %v", err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := sb.TakeNote(); !strings.Contains(n, "could not be saved") || !strings.Contains(n, "no space left") {
		t.Errorf("the note after a failed save: %q", n)
	}
	if r := mustExec(t, sb, "cat /sandbox/file", boxapi.ExecOptions{}); r.Stdout != "kept\n" {
		t.Errorf("after a failed save: %q", r.Stdout)
	}
}

// failingSave is an engine whose checkpoints fail as on a full disk.
type failingSave struct{ dockerEngine }

func (f failingSave) CheckpointCreate(context.Context, string, checkpoint.CreateOptions) error {
	return errors.New("Error response from daemon: write /var/lib/docker/containers/x/checkpoints: no space left on device")
}
