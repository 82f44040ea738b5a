package mcptools

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestNoteTimes: a result's note gives the job's own running time and, when it differs,
// how long this call waited; a finished job's note says how long the job ran, not how
// long the last call took.
func TestNoteTimes(t *testing.T) {
	s := &Tools{opts: Options{Yield: 45 * time.Second}}
	for _, c := range []struct {
		res  sandbox.ExecResult
		want string
	}{
		{sandbox.ExecResult{JobID: "j1", Running: true, ExitCode: -1, Duration: 48 * time.Second, JobDuration: 95 * time.Second},
			"[still running as job j1 for 1m35s (this call waited 48s); call job_output"},
		{sandbox.ExecResult{JobID: "j1", Running: true, ExitCode: -1, Duration: 5 * time.Second, JobDuration: 5200 * time.Millisecond},
			"[still running as job j1 for 5s; call job_output"},
		{sandbox.ExecResult{JobID: "j1", ExitCode: 0, Duration: 3 * time.Second, JobDuration: 120 * time.Second}, "[exit code 0, ran 2m0s]"},
		{sandbox.ExecResult{JobID: "j1", ExitCode: 2, Duration: 3 * time.Second, JobDuration: 14020 * time.Millisecond}, "[exit code 2, ran 14.02s]"},
		{sandbox.ExecResult{JobID: "j1", ExitCode: 0, Duration: 50 * time.Millisecond}, "[exit code 0, ran 0.05s]"},
		{sandbox.ExecResult{JobID: "j1", ExitCode: 137, Cancelled: true}, "[cancelled by the client: the command and its child processes were killed (exit code 137: killed by signal 9, SIGKILL)]"},
		{sandbox.ExecResult{JobID: "j1", ExitCode: -1, Cancelled: true}, "[cancelled by the client: the command and its child processes were killed]"},
		{sandbox.ExecResult{JobID: "j1", ExitCode: -1, Lost: true}, "[the job was lost: it was killed with its runner (say, by kill -9 -1) or the sandbox restarted while it ran, so it has no exit code; no output was captured]"},
		{sandbox.ExecResult{JobID: "j1", ExitCode: -1, Lost: true, Stdout: "half\n"}, "[the job was lost: it was killed with its runner (say, by kill -9 -1) or the sandbox restarted while it ran, so it has no exit code; its output so far is above]"},
	} {
		res := c.res
		out := toOutput(&res)
		if got := s.note(out, &res, 0, false); !strings.HasPrefix(got, c.want) {
			t.Errorf("note = %q, want it to begin %q", got, c.want)
		}
	}
}

// TestNoteBackground: a command that left processes running with its output open
// names the job they became and how to follow and stop it; the structured result
// carries the job too. Processes that could not become a job are named as killed at
// the timeout.
func TestNoteBackground(t *testing.T) {
	s := &Tools{opts: Options{Yield: 45 * time.Second}}
	res := sandbox.ExecResult{JobID: "j1", ExitCode: 0, Background: "j2", BackgroundPid: "1628", BackgroundCommand: "python3 app.py"}
	out := toOutput(&res)
	want := "[exit code 0, ran 0.00s]\n[note: pid 1628 (python3 app.py) runs on in the background as job j2; its output: job_output with job_id \"j2\"; stop it: job_kill]"
	if got := s.note(out, &res, 0, false); got != want || out.BackgroundJobID != "j2" {
		t.Errorf("note = %q, background_job_id %q; want %q and j2", got, out.BackgroundJobID, want)
	}
	res = sandbox.ExecResult{JobID: "j1", ExitCode: 0, Background: "j2", BackgroundPid: "7"}
	if got := s.note(toOutput(&res), &res, 0, false); !strings.HasSuffix(got, "[note: pid 7 runs on in the background as job j2; its output: job_output with job_id \"j2\"; stop it: job_kill]") {
		t.Errorf("without a command: %q", got)
	}
	res = sandbox.ExecResult{JobID: "j1", ExitCode: 0, HeldBy: "7"}
	if got := s.note(toOutput(&res), &res, 0, false); !strings.Contains(got, "pid 7) still holds the command's output open; it is killed at the timeout, or now by job_kill with job_id \"j1\"") {
		t.Errorf("held: %q", got)
	}
}

// TestReadFileFooter: the footer says where to go on, and at the end of the file how
// many lines it has.
func TestReadFileFooter(t *testing.T) {
	for _, c := range []struct {
		l    sandbox.Lines
		want string
	}{
		{sandbox.Lines{First: 266, Lines: []string{"a", "b"}, More: true}, "lines 266-267; more follows: continue with offset=268]"},
		{sandbox.Lines{First: 9, Lines: []string{"a", "b"}}, "lines 9-10 of 10, the end of the file]"},
		{sandbox.Lines{First: 1, Lines: []string{"a"}, Capped: true}, "lines 1-1; stopped at 100 KB of text, more follows: continue with offset=2]"},
	} {
		if got := formatLines("/sandbox/f", &c.l); !strings.HasSuffix(got, c.want) {
			t.Errorf("footer %q, want it to end %q", got, c.want)
		}
	}
}

// TestWaitLongerThanYieldIsCut: a wait longer than yield_after is not refused: the
// call waits yield_after and its note says so and how to wait longer.
func TestWaitLongerThanYieldIsCut(t *testing.T) {
	h := newToolsHarness(t)
	for _, c := range []struct {
		tool string
		args map[string]any
		note string
	}{
		{"execute", map[string]any{"command": "make", "wait": 120}, "[wait 120 was cut to 5: no call waits longer than the server's yield_after; for longer work call job_output]"},
		{"job_output", map[string]any{"job_id": fakeJob, "wait": "99"}, "[wait 99 was cut to 5: no call waits longer than the server's yield_after; call job_output again to wait longer]"},
		{"job_input", map[string]any{"job_id": fakeJob, "input": "y", "wait": 600}, "[wait 600 was cut to 5:"},
	} {
		before := len(h.box.called())
		isErr, text, st := h.call(c.tool, c.args)
		note, _ := st.(map[string]any)["note"].(string)
		if isErr || !strings.Contains(text, c.note) || !strings.Contains(note, c.note) {
			t.Errorf("%s(%v): error %v, %q", c.tool, c.args, isErr, text)
		}
		if got := h.box.called()[before:]; !slices.Contains(got, "wait 5s") {
			t.Errorf("%s(%v) asked the sandbox %q, want a wait of 5s", c.tool, c.args, got)
		}
	}
	// Within yield_after, nothing is said.
	if _, text, _ := h.call("execute", map[string]any{"command": "make", "wait": 3}); strings.Contains(text, "was cut") {
		t.Errorf("a wait within yield_after: %q", text)
	}
}
