package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestJobInputBeforeTheRunnerHoldsIt: input sent to an interactive job right after
// jobs.sh answers, while the job's runner (made 300 ms slow to start here) has not
// started the command, waits in the job's input pipe and reaches the command whole and
// in order. The FIFO must have a holder from before the answer on: one that nobody
// holds open drops what is written to it, and its writer gets EPIPE. The agent's
// runner has the same test in cmd/sandbox-agent; the corpus case input_early runs both
// without the delay.
func TestJobInputBeforeTheRunnerHoldsIt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the job runner needs Linux")
	}
	if out, err := exec.Command("bash", "-c", `((BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1))) && echo ok`).Output(); err != nil || string(out) != "ok\n" {
		t.Skip("the job runner needs bash 5.1 or newer on this machine")
	}
	slow := strings.Replace(jobScript, "\t\ttrap '' HUP\n", "\t\ttrap '' HUP\n\t\tread -t 0.3 -u 9\n", 1)
	if slow == jobScript {
		t.Fatal("the runner's subshell is not in jobs.sh any more: the delay goes elsewhere")
	}
	call := func(args, env []string) string {
		t.Helper()
		c := exec.Command("bash", append([]string{"-c", runnerBoot, "mcpjob"}, args...)...)
		c.Env, c.Dir = append(append(corpusEnv(), env...), runnerEnv+"="+slow), "/"
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		if err := c.Run(); err != nil {
			t.Fatalf("jobs.sh %v: %v (%s)", args[0], err, errb.Bytes())
		}
		return out.String()
	}
	dir := t.TempDir()
	jobs := filepath.Join(dir, "jobs")
	t.Cleanup(func() { endJobs(t, jobs) })
	for i := range 3 {
		id := fmt.Sprintf("j%012x", i+1)
		j := jobStart{dir: jobs, id: id, timeout: 10 * time.Second, interactive: true, cwd: dir,
			head: 1000, tail: 1000, command: `read x; read y; echo "got $x $y"`}
		args, env, _ := j.script()
		if out := call(args, env); !strings.HasPrefix(out, "MCPJOB1 running ") {
			t.Fatalf("job %d: start: %q", i, out)
		}
		for _, in := range []string{"one\n", "two\n"} {
			out := call([]string{"poll", jobs, id, "0", "1000", "1000", "env"}, []string{"MCP_SANDBOX_INPUT=" + in})
			if h, _, _ := strings.Cut(out, "\n"); !strings.Contains(h, "inputsent,") {
				t.Fatalf("job %d: input %q before the command started is not sent: %q", i, in, out)
			}
		}
		waitFor(t, "the end of "+id, func() bool {
			fi, err := os.Stat(filepath.Join(jobs, id+".exit"))
			return err == nil && fi.Size() > 0
		})
		if out, _ := os.ReadFile(filepath.Join(jobs, id+".out")); string(out) != "got one two\n" {
			t.Fatalf("job %d: output %q", i, out)
		}
	}
}
