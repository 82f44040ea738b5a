package sandbox

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// nativeRunner reports whether job id's runner (named in its .meta) is the agent's
// native runner, "sandbox-agent jobs" (with --announce when the container's main
// process started it), rather than jobs.sh.
func nativeRunner(t *testing.T, sb *Sandbox, id string) bool {
	t.Helper()
	out, _ := containerExec(t, sb.cli, sb.cfg.Container, "bash", "-c",
		`read -r _ _ _ r _ <`+JobsDir+"/"+id+`.meta && tr '\0' ' ' </proc/${r%%:*}/cmdline`)
	return strings.Contains(out, "sandbox-agent") && (strings.HasSuffix(out, " jobs ") || strings.HasSuffix(out, " jobs --announce "))
}

// A job the agent's native runner started is fed, followed and finished by the
// fallback (jobs.sh, one Docker exec per call) on the same container, and a job the
// fallback started is followed and killed through the agent.
func TestNativeAndFallbackShareJobs(t *testing.T) {
	cfg := testConfig(t)
	native, _ := agentTestSandbox(t, cfg)
	fcfg := cfg
	fcfg.NoAgent = true
	fallback, err := New(dockerClient(t), fcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	job := mustExec(t, native, "echo ready; read x; echo got $x; echo oops >&2; sleep 0.5; exit 3", boxapi.ExecOptions{Interactive: true, Wait: boxapi.NoWait})
	if !nativeRunner(t, native, job.JobID) {
		t.Fatal("the job did not start on the native runner")
	}
	in := "hi\n"
	got, err := fallback.JobOutput(ctx, job.JobID, 10*time.Second, &in, 0, nil)
	if err != nil && got == nil {
		t.Fatal(err)
	}
	if got.Running {
		got, err = fallback.JobOutput(ctx, job.JobID, 10*time.Second, nil, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	if all := job.Stdout + got.Stdout; all != "ready\ngot hi\n" || got.Stderr != "oops\n" || got.ExitCode != 3 || got.Running || got.Lost {
		t.Fatalf("native job followed by the fallback: %+v (first part %q)", got, job.Stdout)
	}

	job = mustExec(t, fallback, "echo started; sleep 600", boxapi.ExecOptions{Wait: time.Second})
	if nativeRunner(t, native, job.JobID) || !job.Running || job.Stdout != "started\n" {
		t.Fatalf("fallback job: %+v", job)
	}
	if got, err = native.JobOutput(ctx, job.JobID, 0, nil, 0, nil); err != nil || !got.Running || got.Stdout != "" {
		t.Fatalf("fallback job followed through the agent: %+v, %v", got, err)
	}
	k, err := native.KillJob(ctx, job.JobID, 0)
	if err != nil || !k.Killed || k.Running || k.ExitCode != 137 {
		t.Fatalf("fallback job killed through the agent: %+v, %v", k, err)
	}
}

// A native job's exit status and output are recorded when the agent is killed while
// the job runs: its runner is a process of its own.
func TestNativeJobEndsAfterAgentKilled(t *testing.T) {
	cfg := testConfig(t)
	sb, _ := agentTestSandbox(t, cfg)
	job := mustExec(t, sb, "echo one; sleep 1; echo two; exit 7", boxapi.ExecOptions{Wait: boxapi.NoWait})
	if !nativeRunner(t, sb, job.JobID) {
		t.Fatal("the job did not start on the native runner")
	}
	pid := agentPID(t, sb)
	if out, code := containerExec(t, sb.cli, cfg.Container, "kill", "-9", strconv.Itoa(pid)); code != 0 {
		t.Fatalf("killing the agent: %d %s", code, out)
	}
	// Read straight from the files, with no runner involved.
	var exit string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if exit, _ = containerExec(t, sb.cli, cfg.Container, "cat", JobsDir+"/"+job.JobID+".exit"); strings.HasPrefix(exit, "7 ") {
			break
		}
	}
	if !strings.HasPrefix(exit, "7 ") {
		t.Fatalf(".exit after the agent was killed: %q", exit)
	}
	out, err := sb.JobOutput(context.Background(), job.JobID, 10*time.Second, nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if all := job.Stdout + out.Stdout; all != "one\ntwo\n" || out.ExitCode != 7 || out.Running || out.Lost {
		t.Fatalf("job after the agent was killed: %+v (first part %q)", out, job.Stdout)
	}
}

// A native job's commands get the signals jobs.sh gives them: SIGPIPE ends a writer
// whose reader went (`yes | head` ends), SIGHUP is ignored.
func TestNativeJobSignals(t *testing.T) {
	sb, _ := agentTestSandbox(t, testConfig(t))
	res := mustExec(t, sb, "yes | head -c 4; echo; kill -HUP $$; echo alive", boxapi.ExecOptions{Timeout: 20 * time.Second})
	if res.Stdout != "y\ny\n\nalive\n" || res.ExitCode != 0 || res.TimedOut || res.Duration > 10*time.Second {
		t.Fatalf("%+v", res)
	}
}

// Once a sandbox has been quiet for a second, the agent and its job runner hold blank
// files in the jobs directory (made ahead, off the path of a call), and the files of
// the next execute are those blanks renamed into place (the same inodes), holding
// the job's output and status as ever.
func TestJobFilesFromBlanks(t *testing.T) {
	sb, _ := agentTestSandbox(t, testConfig(t))
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	blanks := map[string]bool{}
	for deadline := time.Now().Add(30 * time.Second); len(blanks) < 100; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d blanks made after a quiet spell, want at least 100", len(blanks))
		}
		out, _ := containerExec(t, sb.cli, sb.cfg.Container, "sh", "-c", "ls -i "+JobsDir+"/.blank | awk '{print $1}'")
		clear(blanks)
		for _, ino := range strings.Fields(out) {
			blanks[ino] = true
		}
	}
	res := mustExec(t, sb, "echo hi; echo oops >&2; exit 3", boxapi.ExecOptions{})
	if res.Stdout != "hi\n" || res.Stderr != "oops\n" || res.ExitCode != 3 || res.Running {
		t.Fatalf("result %+v", res)
	}
	d := JobsDir + "/" + res.JobID
	out, code := containerExec(t, sb.cli, sb.cfg.Container, "sh", "-c", "ls -i "+d+".meta "+d+".out "+d+".err "+d+".pid "+d+".exit")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 5 {
		t.Fatalf("the job's files: %q (exit %d)", out, code)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) != 2 || !blanks[f[0]] {
			t.Errorf("%s is not one of the blanks", l)
		}
	}
	if out, _ := containerExec(t, sb.cli, sb.cfg.Container, "cat", d+".exit"); !strings.HasPrefix(out, "3 ") {
		t.Errorf(".exit holds %q", out)
	}
}
