package sandbox

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestTTY: with the agent, a tty job runs its command under a pseudo-terminal, takes
// input through it, and ends with the command's status.
func TestTTY(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	if cfg.NoAgent {
		t.Skip("the agent is off (MCP_SANDBOX_TEST_NO_AGENT)")
	}
	sb := newTestSandbox(t, cli, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t.Run("no agent", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.NoAgent = true
		off := newTestSandbox(t, cli, cfg)
		if _, err := off.Exec(ctx, "tty", boxapi.ExecOptions{TTY: true}); !errors.Is(err, boxapi.ErrNoTTY) {
			t.Errorf("without the agent: %v, want ErrNoTTY", err)
		}
		// A binary known but missing in the container: the runner refuses.
		mustExec(t, sb, "true", boxapi.ExecOptions{})
		real := sb.link.agentBinary()
		sb.link.setAgentBinary("/nonexistent/sandbox-agent")
		if _, err := sb.Exec(ctx, "tty", boxapi.ExecOptions{TTY: true}); !errors.Is(err, boxapi.ErrNoTTY) {
			t.Errorf("with the agent's binary missing: %v, want ErrNoTTY", err)
		}
		sb.link.setAgentBinary(real)
	})

	t.Run("terminal", func(t *testing.T) {
		res := mustExec(t, sb, `tty; [ -t 0 ] && [ -t 2 ] && echo interactive; echo "$TERM"; stty size; echo to-stderr >&2`, boxapi.ExecOptions{TTY: true})
		if !regexp.MustCompile(`^/dev/pts/[0-9]+\ninteractive\ndumb\n24 80\nto-stderr\n$`).MatchString(res.Stdout) || res.Stderr != "" || res.ExitCode != 0 {
			t.Errorf("exit %d, stdout %q, stderr %q; want the terminal's name, interactive, TERM=dumb, 24x80, stderr in stdout", res.ExitCode, res.Stdout, res.Stderr)
		}
		// Without tty, the same command has no terminal.
		if res := mustExec(t, sb, "tty", boxapi.ExecOptions{}); res.ExitCode == 0 {
			t.Errorf("tty without a terminal: exit 0, %q", res.Stdout)
		}
	})

	t.Run("exit status", func(t *testing.T) {
		if res := mustExec(t, sb, "exit 3", boxapi.ExecOptions{TTY: true}); res.ExitCode != 3 {
			t.Errorf("exit 3: got %d", res.ExitCode)
		}
		if res := mustExec(t, sb, "kill -9 $$", boxapi.ExecOptions{TTY: true}); res.ExitCode != 128+9 {
			t.Errorf("killed by SIGKILL: got %d, want 137", res.ExitCode)
		}
	})

	t.Run("input", func(t *testing.T) {
		res := mustExec(t, sb, "bash --norc", boxapi.ExecOptions{TTY: true, Wait: boxapi.NoWait})
		if !res.Running {
			t.Fatalf("bash ended at once: %+v", res)
		}
		out := ""
		for _, in := range []string{"echo $((6*7))\n", ""} {
			input := &in
			if in == "" {
				input = nil // then only wait for more output
			}
			r, err := sb.JobOutput(ctx, res.JobID, 5*time.Second, input, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			out += r.Stdout
			if strings.Contains(out, "\n42\n") {
				break
			}
		}
		if !strings.Contains(out, "\n42\n") {
			t.Fatalf("no 42 in the output: %q", out)
		}
		// The input that ends the job is answered with ErrJobFinished and its result.
		exit := "exit 5\n"
		r, err := sb.JobOutput(ctx, res.JobID, 10*time.Second, &exit, 0, nil)
		if errors.Is(err, boxapi.ErrJobFinished) {
			err = nil
		} else if err == nil && r.Running {
			r, err = sb.JobOutput(ctx, res.JobID, 10*time.Second, nil, 0, nil)
		}
		if err != nil || r.Running || r.ExitCode != 5 {
			t.Fatalf("after exit 5: %+v, %v; want the job ended with 5", r, err)
		}
	})

	t.Run("kill", func(t *testing.T) {
		// What the command started in the terminal's session goes with it, even a
		// process that ignores SIGHUP.
		res := mustExec(t, sb, "trap '' HUP; sleep 1234 & sleep 1235", boxapi.ExecOptions{TTY: true, Wait: boxapi.NoWait})
		time.Sleep(500 * time.Millisecond)
		k, err := sb.KillJob(ctx, res.JobID, 0)
		if err != nil || k.Running || k.ExitCode != 137 || !k.Killed {
			t.Fatalf("KillJob: %+v, %v; want the job killed, 137", k, err)
		}
		left := mustExec(t, sb, `for p in /proc/[0-9]*; do tr '\0' ' ' <$p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 123[45]'`, boxapi.ExecOptions{})
		if strings.TrimSpace(left.Stdout) != "0" {
			t.Errorf("processes of the killed tty job still run: %q", left.Stdout)
		}
	})
}
