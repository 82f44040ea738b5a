package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestJobInputThatEndsTheJob: input a program reads and then ends on is reported as
// sent, with the output that followed and the exit code, every time; input the job
// never took before it ended is refused, and the runner's own messages (a killed
// writer of the input) never reach the job's output.
func TestJobInputThatEndsTheJob(t *testing.T) {
	withAndWithoutAgent(t, func(t *testing.T, cfg Config) {
		sb := newTestSandbox(t, dockerClient(t), cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for i := range 5 {
			job := mustExec(t, sb, `echo ready; read x; echo "got $x"; exit 4`, boxapi.ExecOptions{Interactive: true, Wait: time.Second})
			if !job.Running || job.Stdout != "ready\n" {
				t.Fatalf("start %d: %+v", i, job)
			}
			in := "quit\n"
			res, err := sb.JobOutput(ctx, job.JobID, 10*time.Second, &in, 0, nil)
			if err != nil || res == nil || res.Running || res.ExitCode != 4 || res.Stdout != "got quit\n" || res.Stderr != "" {
				t.Fatalf("try %d: input that ends the job: %+v, %v", i, res, err)
			}
			// Input to the job that has ended now is refused, its output not repeated.
			res, err = sb.JobOutput(ctx, job.JobID, time.Second, &in, 0, nil)
			if !errors.Is(err, boxapi.ErrJobFinished) || res == nil || res.Stdout != "" || res.ExitCode != 4 {
				t.Fatalf("try %d: input after the end: %+v, %v", i, res, err)
			}
		}

		// A program that reads nothing: the first input fills most of the pipe, the
		// second waits for a reader; the job ends and its runner kills the writer.
		job := mustExec(t, sb, `sleep 3; echo done`, boxapi.ExecOptions{Interactive: true, Wait: boxapi.NoWait})
		big := strings.Repeat("x", boxapi.MaxInputBytes-1) + "\n"
		if res, err := sb.JobOutput(ctx, job.JobID, 0, &big, 0, nil); err != nil || !res.Running {
			t.Fatalf("first input: %+v, %v", res, err)
		}
		// The writer of the second input dies by SIGKILL while the call waits, as
		// when the runner kills it: nothing of that reaches the job's stderr.
		go func() {
			time.Sleep(1500 * time.Millisecond)
			containerExec(t, sb.cli, cfg.Container, "bash", "-c", "kill -9 $(cat "+JobsDir+"/"+job.JobID+".inw)")
		}()
		res, err := sb.JobOutput(ctx, job.JobID, 10*time.Second, &big, 0, nil)
		if err == nil && res.Running && res.InputWaiting {
			res, err = sb.JobOutput(ctx, job.JobID, 10*time.Second, nil, 0, nil)
		} else if !errors.Is(err, boxapi.ErrJobFinished) {
			t.Errorf("input the job never read is reported as sent: %+v, %v", res, err)
		}
		if res == nil || res.Running || res.Stderr != "" || res.Stdout != "done\n" {
			t.Fatalf("input the job never read: %+v, %v", res, err)
		}
	})
}
