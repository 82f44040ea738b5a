package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

func TestExecBasics(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))

	t.Run("exit codes", func(t *testing.T) {
		for cmd, want := range map[string]int{"true": 0, "false": 1, "exit 42": 42, "no-such-program-xyz": 127} {
			if res := mustExec(t, sb, cmd, boxapi.ExecOptions{}); res.ExitCode != want {
				t.Errorf("%q: exit code %d, want %d", cmd, res.ExitCode, want)
			}
		}
	})
	t.Run("stdout and stderr apart", func(t *testing.T) {
		res := mustExec(t, sb, "echo out; echo err >&2; echo out2", boxapi.ExecOptions{})
		if res.Stdout != "out\nout2\n" || res.Stderr != "err\n" {
			t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
		}
		if res.StdoutBytes != 9 || res.StderrBytes != 4 || res.StdoutTruncated || res.StderrTruncated {
			t.Errorf("counts: %+v", res)
		}
	})
	t.Run("root in workdir with empty stdin", func(t *testing.T) {
		res := mustExec(t, sb, `id -u; pwd; cat; echo "[$0]"`, boxapi.ExecOptions{})
		if res.Stdout != "0\n/sandbox\n[bash]\n" {
			t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
		}
	})
	t.Run("fresh shell each call", func(t *testing.T) {
		mustExec(t, sb, "cd /tmp; export X=1", boxapi.ExecOptions{})
		res := mustExec(t, sb, `pwd; echo "X=$X"`, boxapi.ExecOptions{})
		if res.Stdout != "/sandbox\nX=\n" {
			t.Errorf("state carried over: %q", res.Stdout)
		}
	})
	t.Run("files and programs persist", func(t *testing.T) {
		mustExec(t, sb, `echo data > /sandbox/keep.txt && printf '#!/bin/bash\necho installed\n' > /usr/local/bin/mytool && chmod +x /usr/local/bin/mytool`, boxapi.ExecOptions{})
		res := mustExec(t, sb, "cat keep.txt; mytool", boxapi.ExecOptions{})
		if res.Stdout != "data\ninstalled\n" {
			t.Errorf("got %q, stderr %q", res.Stdout, res.Stderr)
		}
	})
	t.Run("live output", func(t *testing.T) {
		var mu sync.Mutex
		var got []string
		var firstAt time.Time
		start := time.Now()
		res := mustExec(t, sb, "echo first; sleep 2; echo second >&2", boxapi.ExecOptions{OnOutput: func(st boxapi.Stream, p []byte) {
			mu.Lock()
			defer mu.Unlock()
			if firstAt.IsZero() {
				firstAt = time.Now()
			}
			got = append(got, st.String()+":"+string(p))
		}})
		mu.Lock()
		defer mu.Unlock()
		// Live output is sampled while the command runs; the result has it all.
		if len(got) == 0 || got[0] != "stdout:first\n" || res.Stdout != "first\n" || res.Stderr != "second\n" {
			t.Errorf("chunks %q, result %+v", got, res)
		}
		if d := firstAt.Sub(start); d > res.Duration-time.Second {
			t.Errorf("first chunk arrived after %v of %v: not live", d, res.Duration)
		}
	})
}

func TestExecBoundedOutputUTF8(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	cfg.MaxOutput = 1024
	sb := newTestSandbox(t, cli, cfg)
	// 3-byte characters: 512 is not a multiple of 3, so both cuts fall inside one.
	// Invalid bytes (\xff) appear at both ends.
	res := mustExec(t, sb, `printf '\xff'; for i in $(seq 2000); do printf '€'; done; printf '\xfe'`, boxapi.ExecOptions{})
	if !utf8.ValidString(res.Stdout) {
		t.Fatalf("stdout is not valid UTF-8")
	}
	if !res.StdoutTruncated || res.StdoutBytes != 6002 {
		t.Fatalf("truncated %v bytes %d", res.StdoutTruncated, res.StdoutBytes)
	}
	head, tail, ok := strings.Cut(res.Stdout, "\n[... ")
	if !ok {
		t.Fatalf("no marker in %q", res.Stdout)
	}
	if !strings.HasPrefix(head, "\uFFFD€€") || strings.Trim(head[3:], "€") != "" {
		t.Errorf("head %q", head)
	}
	marker, tail, _ := strings.Cut(tail, " ...]\n")
	if !strings.HasSuffix(tail, "€€\uFFFD") || strings.Trim(strings.TrimSuffix(tail, "\uFFFD"), "€") != "" {
		t.Errorf("tail %q", tail)
	}
	// head keeps 511 of 512 bytes (\xff + 170*3), tail 511 of 512 (170*3 + \xfe).
	if marker != "part of line 1 left out (4980 bytes); read them with execute: tail -c +512 "+res.StdoutFile+" | head -c 4980" {
		t.Errorf("marker %q", marker)
	}
	// The byte range the marker names is the part left out: 1660 characters, the
	// ones after the head's 170.
	cmd, _ := strings.CutPrefix(marker, "part of line 1 left out (4980 bytes); read them with execute: ")
	check := `[ "$(` + cmd + ` | sha256sum)" = "$(for i in $(seq 1660); do printf '€'; done | sha256sum)" ] && echo same`
	if got := mustExec(t, sb, check, boxapi.ExecOptions{}); got.Stdout != "same\n" {
		t.Errorf("%s is not the part left out: %+v", cmd, got)
	}
}

func TestExecTimeoutKillsGroup(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))

	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		res := mustExec(t, sb, "echo started; sleep 1000 & sleep 1001; echo never", boxapi.ExecOptions{Timeout: 2 * time.Second})
		if d := time.Since(start); d > 10*time.Second || d < 2*time.Second {
			t.Errorf("returned after %v", d)
		}
		if !res.TimedOut || res.Cancelled || res.Stdout != "started\n" {
			t.Errorf("result %+v", res)
		}
		assertNoProcess(t, sb, "sleep 100[01]")
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		res, err := sb.Exec(ctx, "sleep 1002", boxapi.ExecOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("returned after %v", d)
		}
		if !res.Cancelled || res.TimedOut {
			t.Errorf("result %+v", res)
		}
		assertNoProcess(t, sb, "sleep 1002")
	})
	t.Run("detached survives", func(t *testing.T) {
		// Debian's busybox-static has no nohup applet; give the test image one.
		mustExec(t, sb, `command -v nohup >/dev/null || printf '#!/bin/bash\ntrap "" HUP\nexec "$@"\n' >/usr/local/bin/nohup; chmod +x /usr/local/bin/nohup`, boxapi.ExecOptions{})
		mustExec(t, sb, "setsid nohup sleep 1234 >/dev/null 2>&1 &", boxapi.ExecOptions{})
		res := mustExec(t, sb, "setsid nohup sleep 1235 >/dev/null 2>&1 & sleep 1003", boxapi.ExecOptions{Timeout: time.Second})
		if !res.TimedOut {
			t.Errorf("result %+v", res)
		}
		ps := mustExec(t, sb, "ps -o args", boxapi.ExecOptions{}).Stdout
		for _, want := range []string{"sleep 1234", "sleep 1235"} {
			if !strings.Contains(ps, want) {
				t.Errorf("detached %q was killed; ps:\n%s", want, ps)
			}
		}
		assertNoProcess(t, sb, "sleep 1003")
	})
}

// assertNoProcess fails when a process matching the extended regexp runs in the sandbox.
func assertNoProcess(t *testing.T, sb *Sandbox, pattern string) {
	t.Helper()
	res := mustExec(t, sb, "ps -o args | grep -E '^"+pattern+"$' || true", boxapi.ExecOptions{})
	if res.Stdout != "" {
		t.Errorf("still running: %q", res.Stdout)
	}
}

func TestExecConcurrent(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	mustExec(t, sb, "true", boxapi.ExecOptions{}) // create the container first
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := mustExec(t, sb, "sleep 1; echo done", boxapi.ExecOptions{})
			if res.Stdout != "done\n" {
				t.Errorf("got %q", res.Stdout)
			}
		}()
	}
	wg.Wait()
	// One after another they take 8 s; run at once, well under that even on a busy
	// machine.
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("8 concurrent 1 s commands took %v", d)
	}
}

func TestExecHugeOutputBoundedMemory(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	const total = 500_000_000
	var seen int64
	stop := testenv.HeapPeak(20 * time.Millisecond)
	res := mustExec(t, sb, fmt.Sprintf("echo start; yes | head -c %d; echo; echo end", total), boxapi.ExecOptions{
		OnOutput: func(_ boxapi.Stream, p []byte) { seen += int64(len(p)) },
	})
	peak := stop()
	t.Logf("500 MB in %v, heap peak +%d KiB", res.Duration, peak>>10)
	// OnOutput gets samples of the live output, bounded per second.
	if want := int64(total + len("start\n\nend\n")); res.StdoutBytes != want || seen == 0 || seen > want {
		t.Errorf("StdoutBytes %d, OnOutput saw %d, want %d", res.StdoutBytes, seen, want)
	}
	if !res.StdoutTruncated || !strings.HasPrefix(res.Stdout, "start\ny\ny\n") || !strings.HasSuffix(res.Stdout, "y\ny\n\nend\n") {
		t.Errorf("head/tail wrong: %.40q ... %.40q", res.Stdout, res.Stdout[len(res.Stdout)-40:])
	}
	// The cut falls on line boundaries; past 100 MB the marker counts bytes only.
	head, rest, _ := strings.Cut(res.Stdout, "[... ")
	marker, tail, _ := strings.Cut(rest, " ...]\n")
	// Past a megabyte the marker suggests grep before paging.
	marker = strings.TrimSuffix(marker, "; that is a lot: search it first with execute, e.g. grep -n PATTERN "+res.StdoutFile+" | head -50")
	omitted, _ := strconv.ParseInt(strings.TrimSuffix(marker, " bytes left out; the whole output is in "+res.StdoutFile), 10, 64)
	if omitted == 0 || int64(len(head))+omitted+int64(len(tail)) != res.StdoutBytes || !strings.HasSuffix(head, "\n") {
		t.Errorf("marker missing or wrong: %q", marker)
	}
	if len(head)+len(tail) > 200000 {
		t.Errorf("kept %d bytes", len(head)+len(tail))
	}
	if peak > 64<<20 {
		t.Errorf("heap grew by %d MiB while streaming 500 MB", peak>>20)
	}
}

func TestExecForkBombHitsPidsLimit(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	cfg.PidsLimit = 200
	sb := newTestSandbox(t, cli, cfg)
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	start := time.Now()
	res := mustExec(t, sb, ":(){ :|:& };:", boxapi.ExecOptions{Timeout: time.Second})
	t.Logf("fork bomb returned after %v: timed out %v, exit %d, stderr %d bytes", time.Since(start), res.TimedOut, res.ExitCode, res.StderrBytes)
	// The bomb's first process exits at once and the rest goes on as a job of its own;
	// holding the container at its process limit, it is killed 3 s later. A command may
	// find a free process slot before that (the agent starts one process per command):
	// it runs, and the bomb is counted again until it is gone.
	var out *boxapi.ExecResult
	for i := 0; i < 20; i++ {
		out = mustExec(t, sb, "echo ok; "+countBombs, boxapi.ExecOptions{Timeout: 30 * time.Second})
		if f := strings.Fields(out.Stdout); len(f) == 2 && f[0] == "ok" && f[1] == "0" {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	lines := strings.Fields(out.Stdout)
	if len(lines) != 2 || lines[0] != "ok" {
		t.Fatalf("sandbox unusable after fork bomb: %+v", out)
	}
	if n, _ := strconv.Atoi(lines[1]); n != 0 {
		t.Errorf("%d processes of the fork bomb left", n)
	}
	// The bomb's first process may end before the limit is reached (a fast start): its
	// errors then reach the file after the result.
	errs := mustExec(t, sb, "head -c 300 "+res.StderrFile, boxapi.ExecOptions{})
	if !strings.Contains(res.Stderr+errs.Stdout, "fork") {
		t.Errorf("fork bomb did not hit the limit? stderr %.200q", res.Stderr+errs.Stdout)
	}
}

// countBombs prints how many processes of a `:(){ ... };:` command run in the
// sandbox: they keep the command line of the first, while other processes (the check
// itself, job runners, a background prune of old jobs) come and go. One `ps` misses a
// chain that forks and exits in about 1 sample of 12 (the process it reads in /proc has
// just exited, its child was made behind the scan), so it prints the most of 10 scans.
const countBombs = "for i in 1 2 3 4 5 6 7 8 9 10; do ps -o args | grep -c '^bash -c :()'; done | sort -n | tail -n 1"

// TestExecForkWalkerBecomesJob: a command that leaves a chain of processes each
// forking the next and exiting at once, all with the command's output open, is never
// caught in one scan for holders of the output; it must still count as holding it,
// go on as a job of its own past the command's timeout, and die by KillJob.
func TestExecForkWalkerBecomesJob(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		start := time.Now()
		res := mustExec(t, sb, ":(){ :& };:", boxapi.ExecOptions{Timeout: 2 * time.Second})
		t.Logf("walker %d returned after %v: job %q", i, time.Since(start), res.Background)
		if res.Background == "" || res.Running || res.ExitCode != 0 {
			t.Fatalf("walker %d: got %+v, want it done and its leftovers a job", i, res)
		}
		if i == 0 {
			time.Sleep(3 * time.Second)
			if left := mustExec(t, sb, countBombs, boxapi.ExecOptions{}).Stdout; left == "0\n" {
				t.Fatalf("walker %d ended with the command's timeout", i)
			}
		}
		if k, err := sb.KillJob(ctx, res.Background, 0); err != nil || !k.Killed || k.Running {
			t.Fatalf("walker %d: KillJob: %+v %v", i, k, err)
		}
		left := ""
		for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait); time.Sleep(200 * time.Millisecond) {
			if left = mustExec(t, sb, countBombs, boxapi.ExecOptions{}).Stdout; left == "0\n" {
				break
			}
		}
		if left != "0\n" {
			t.Fatalf("walker %d: %q of its processes 10s after KillJob", i, left)
		}
	}
}

func TestExecDockerUnreachable(t *testing.T) {
	sb, err := New(dummyClient(t), testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := sb.Exec(ctx, "true", boxapi.ExecOptions{})
	if err == nil || res != nil {
		t.Fatalf("got %+v, %v; want an infrastructure error", res, err)
	}
	if _, err := sb.Stat(ctx, "/sandbox/x"); err == nil || errors.Is(err, boxapi.ErrNotFound) {
		t.Errorf("Stat: got %v, want an infrastructure error", err)
	}
}

// TestJobLostWithContainerRestart: a job whose container restarted under it is reported
// lost, with the output it printed before, instead of running forever.
func TestJobLostWithContainerRestart(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx := context.Background()
	res := mustExec(t, sb, "echo before; sleep 600", boxapi.ExecOptions{Wait: time.Second})
	if !res.Running || res.Stdout != "before\n" {
		t.Fatalf("start: %+v", res)
	}
	timeout := 1
	if err := cli.ContainerRestart(ctx, sb.cfg.Container, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	jobs, err := sb.ListJobs(ctx)
	if err != nil || len(jobs) == 0 || jobs[len(jobs)-1].State != "lost" {
		t.Fatalf("job_list after restart: %+v %v", jobs, err)
	}
	start := time.Now()
	out, err := sb.JobOutput(ctx, res.JobID, 10*time.Second, nil, 0, nil)
	if err != nil || !out.Lost || out.Running || time.Since(start) > 3*time.Second {
		t.Fatalf("poll of a lost job after %v: %+v %v", time.Since(start), out, err)
	}
}

// TestJobOutputSplitCharacter: a character whose bytes the command prints in two
// writes, a poll apart, comes back whole in the second poll instead of as U+FFFD.
func TestJobOutputSplitCharacter(t *testing.T) {
	sb := newTestSandbox(t, dockerClient(t), testConfig(t))
	res := mustExec(t, sb, `printf 'bar \xe2\x94'; sleep 2; printf '\x81 done\n'`, boxapi.ExecOptions{Wait: 500 * time.Millisecond})
	if !res.Running || res.Stdout != "bar " {
		t.Fatalf("first delivery: %+v", res)
	}
	out, err := sb.JobOutput(context.Background(), res.JobID, 10*time.Second, nil, 0, nil)
	if err != nil || out.Running || out.Stdout != "━ done\n" || out.StdoutBytes != 13 {
		t.Fatalf("second delivery: %+v %v", out, err)
	}
}

// TestExecJobIDDrawnTwice: a command that draws the id of an existing job, finished
// or running, draws another; the existing jobs' output stays whole.
func TestExecJobIDDrawnTwice(t *testing.T) {
	sb := newTestSandbox(t, dockerClient(t), testConfig(t))
	first := mustExec(t, sb, "echo first-output", boxapi.ExecOptions{})
	running := mustExec(t, sb, "sleep 2; echo running-output", boxapi.ExecOptions{Wait: boxapi.NoWait})
	draws := 0
	newJobID = func() string {
		draws++
		switch draws {
		case 1:
			return running.JobID // known to this process as running
		case 2:
			return first.JobID // finished: only the container knows it
		}
		return randomJobID()
	}
	t.Cleanup(func() { newJobID = randomJobID })
	second := mustExec(t, sb, "echo second", boxapi.ExecOptions{})
	if draws != 3 || second.JobID == first.JobID || second.JobID == running.JobID || second.Stdout != "second\n" {
		t.Fatalf("%d draws, new job %s (existing %s, %s) printed %q", draws, second.JobID, first.JobID, running.JobID, second.Stdout)
	}
	out := mustExec(t, sb, "cat "+JobFile(first.JobID, boxapi.Stdout), boxapi.ExecOptions{})
	if out.Stdout != "first-output\n" {
		t.Errorf("the first job's output is now %q", out.Stdout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	late, err := sb.JobOutput(ctx, running.JobID, 30*time.Second, nil, 0, nil)
	if err != nil || late.Running || late.Stdout != "running-output\n" {
		t.Errorf("the running job: %+v, %v", late, err)
	}
}
