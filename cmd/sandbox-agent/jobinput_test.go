package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// holdDelayEnv, in the environment of the test binary run as "jobs" (the agent starts
// its job runner as /proc/self/exe jobs), makes that runner slow to open a job's input
// FIFO.
const holdDelayEnv = "SANDBOX_AGENT_TEST_HOLD_DELAY"

func TestMain(m *testing.M) {
	// No blanks made in the tests' temporary directories while they are removed;
	// TestBlanks makes its own.
	agentBlanks.keep, runnerBlanks.keep = 0, 0
	if mode := os.Getenv(slackTestEnv); mode != "" {
		os.Exit(slackTestMain(mode))
	}
	if len(os.Args) > 1 && os.Args[1] == "jobs" {
		if d, err := time.ParseDuration(os.Getenv(holdDelayEnv)); err == nil {
			beforeInputHold = func() { time.Sleep(d) }
		}
		os.Exit(jobsMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// TestJobInputBeforeTheRunnerHoldsIt: input written to an interactive job right after
// the agent answers, while the job's runner has not opened the input FIFO yet (it is
// made 300 ms late here), waits in the FIFO and reaches the command whole and in order.
// Without a holder between the answer and the runner's open, the write fails (EPIPE)
// and the input is lost.
func TestJobInputBeforeTheRunnerHoldsIt(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	t.Setenv(holdDelayEnv, "300ms")
	if jobRunner.name != "" {
		t.Skip("a job runner without the delay runs already")
	}
	s := agent(t)
	dir := t.TempDir()
	jobs := filepath.Join(dir, "jobs")
	for i := range 3 {
		id := fmt.Sprintf("j%012x", i+1)
		r := run(t, s, agentwire.JobRequest{JobsDir: jobs, ID: id, TimeoutMS: 10000, WaitMS: 0, Interactive: true,
			Cwd: dir, Head: 1000, Tail: 1000, Command: `read x; read y; echo "got $x $y"`}, "")
		if !strings.HasPrefix(r.stdout, "MCPJOB1 running ") || r.code != 0 {
			t.Fatalf("job %d: start: %+v", i, r)
		}
		d := filepath.Join(jobs, id)
		for _, in := range []string{"one\n", "two\n"} {
			if err := writeInput(d+".in", in); err != nil {
				t.Fatalf("job %d: input %q before the runner holds the FIFO: %v", i, in, err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if b, err := os.ReadFile(d + ".exit"); err == nil && len(b) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %d did not end: its input was lost", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if out, _ := os.ReadFile(d + ".out"); string(out) != "got one two\n" {
			t.Fatalf("job %d: output %q", i, out)
		}
	}
}

// writeInput writes to a job's input FIFO as jobs.sh's poll does: opened for reading
// and writing (never blocks), reopened for writing alone, the first closed, so the
// write fails once nobody holds the FIFO for reading.
func writeInput(path, s string) error {
	rw, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	w, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", rw.Fd()), os.O_WRONLY, 0)
	rw.Close()
	if err != nil {
		return err
	}
	defer w.Close()
	_, err = w.WriteString(s)
	return err
}
