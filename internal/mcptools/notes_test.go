package mcptools

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestNoteTimes: a result's note gives the job's own running time and, when it differs,
// how long this call waited; a finished job's note says how long the job ran, not how
// long the last call took.
func TestNoteTimes(t *testing.T) {
	s := &Tools{opts: Options{Yield: 45 * time.Second}}
	for _, c := range []struct {
		res  boxapi.ExecResult
		want string
	}{
		{boxapi.ExecResult{JobID: "j1", Running: true, ExitCode: -1, Duration: 48 * time.Second, JobDuration: 95 * time.Second},
			"[still running as job j1 for 1m35s (this call waited 48s); call job_output"},
		{boxapi.ExecResult{JobID: "j1", Running: true, ExitCode: -1, Duration: 5 * time.Second, JobDuration: 5200 * time.Millisecond},
			"[still running as job j1 for 5s; call job_output"},
		{boxapi.ExecResult{JobID: "j1", ExitCode: 0, Duration: 3 * time.Second, JobDuration: 120 * time.Second}, "[exit code 0, ran 2m0s]"},
		{boxapi.ExecResult{JobID: "j1", ExitCode: 2, Duration: 3 * time.Second, JobDuration: 14020 * time.Millisecond}, "[exit code 2, ran 14.02s]"},
		{boxapi.ExecResult{JobID: "j1", ExitCode: 0, Duration: 50 * time.Millisecond}, "[exit code 0, ran 0.05s]"},
		{boxapi.ExecResult{JobID: "j1", ExitCode: 137, Cancelled: true}, "[cancelled by the client: the command and its child processes were killed (exit code 137: killed by signal 9, SIGKILL)]"},
		{boxapi.ExecResult{JobID: "j1", ExitCode: -1, Cancelled: true}, "[cancelled by the client: the command and its child processes were killed]"},
		{boxapi.ExecResult{JobID: "j1", ExitCode: -1, Lost: true}, "[the job was lost: it was killed with its runner (say, by kill -9 -1) or the sandbox restarted while it ran, so it has no exit code; no output was captured]"},
		{boxapi.ExecResult{JobID: "j1", ExitCode: -1, Lost: true, Stdout: "half\n"}, "[the job was lost: it was killed with its runner (say, by kill -9 -1) or the sandbox restarted while it ran, so it has no exit code; its output so far is above]"},
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
	res := boxapi.ExecResult{JobID: "j1", ExitCode: 0, Background: "j2", BackgroundPid: "1628", BackgroundCommand: "python3 app.py"}
	out := toOutput(&res)
	want := "[exit code 0, ran 0.00s]\n[note: pid 1628 (python3 app.py) runs on in the background as job j2; its output: job_output with job_id \"j2\"; stop it: job_kill]"
	if got := s.note(out, &res, 0, false); got != want || out.BackgroundJobID != "j2" {
		t.Errorf("note = %q, background_job_id %q; want %q and j2", got, out.BackgroundJobID, want)
	}
	res = boxapi.ExecResult{JobID: "j1", ExitCode: 0, Background: "j2", BackgroundPid: "7"}
	if got := s.note(toOutput(&res), &res, 0, false); !strings.HasSuffix(got, "[note: pid 7 runs on in the background as job j2; its output: job_output with job_id \"j2\"; stop it: job_kill]") {
		t.Errorf("without a command: %q", got)
	}
	res = boxapi.ExecResult{JobID: "j1", ExitCode: 0, HeldBy: "7"}
	if got := s.note(toOutput(&res), &res, 0, false); !strings.Contains(got, "pid 7) still holds the command's output open; it is killed at the timeout, or now by job_kill with job_id \"j1\"") {
		t.Errorf("held: %q", got)
	}
}

// TestReadFileFooter: the footer says where to go on, and at the end of the file how
// many lines it has.
func TestReadFileFooter(t *testing.T) {
	for _, c := range []struct {
		l    boxapi.Lines
		want string
	}{
		{boxapi.Lines{First: 266, Lines: []string{"a", "b"}, More: true}, "lines 266-267; more follows: continue with offset=268]"},
		{boxapi.Lines{First: 9, Lines: []string{"a", "b"}}, "lines 9-10 of 10, the end of the file]"},
		{boxapi.Lines{First: 1, Lines: []string{"a"}, Capped: true}, "lines 1-1; stopped at 100 KB of text, more follows: continue with offset=2]"},
	} {
		if got := formatLines("/sandbox/f", &c.l); !strings.HasSuffix(got, c.want) {
			t.Errorf("footer %q, want it to end %q", got, c.want)
		}
	}
}

// TestWaitAtMostYield: the schema's maximum of wait is yield_after, as the
// descriptions say (it was a day), and a longer wait is refused by name with the
// bound and how to wait longer; a wait within it reaches the sandbox as asked.
func TestWaitAtMostYield(t *testing.T) {
	h := newToolsHarness(t)
	for _, tool := range []string{"execute", "job_output", "job_input"} {
		var list struct {
			Tools []struct {
				Name        string
				InputSchema struct {
					Properties map[string]struct {
						Maximum     *float64 `json:"maximum"`
						Description string   `json:"description"`
					} `json:"properties"`
				} `json:"inputSchema"`
			} `json:"tools"`
		}
		b, _ := json.Marshal(h.rpc("tools/list", map[string]any{}))
		_ = json.Unmarshal(b, &list)
		for _, tl := range list.Tools {
			if w := tl.InputSchema.Properties["wait"]; tl.Name == tool && (w.Maximum == nil || *w.Maximum != 5 || !strings.Contains(w.Description, "0 to 5. Default 5.")) {
				t.Errorf("%s: wait's schema %v %q, want maximum 5 (yield_after)", tool, w.Maximum, w.Description)
			}
		}
	}
	const must = `"wait" must be a number of seconds from 0 to 5 (the server's yield_after: no call waits longer; for longer, call job_output again)`
	h.wantErrors(t, []errorCase{
		{"execute", map[string]any{"command": "make", "wait": 120}, must + ", got 120"},
		{"job_output", map[string]any{"job_id": fakeJob, "wait": "99"}, must},
		{"job_input", map[string]any{"job_id": fakeJob, "input": "y", "wait": 600}, must},
	})
	before := len(h.box.called())
	if isErr, text, _ := h.call("execute", map[string]any{"command": "make", "wait": 5}); isErr || !slices.Contains(h.box.called()[before:], "wait 5s") {
		t.Errorf("a wait of yield_after: %v %q", isErr, text)
	}
}

// TestUnknownArgumentSuggestion: an argument named as other tools name it is refused
// with the name it has here; names nothing maps to get the plain list.
func TestUnknownArgumentSuggestion(t *testing.T) {
	h := newToolsHarness(t)
	h.wantErrors(t, []errorCase{
		{"read_file", map[string]any{"path": "a.txt", "start_line": 10}, `read_file does not take the argument "start_line" (use "offset"); it accepts: limit, offset, path`},
		{"read_file", map[string]any{"path": "a.txt", "num_lines": 10}, `"num_lines" (use "limit")`},
		{"execute", map[string]any{"command": "ls", "workdir": "/tmp"}, `"workdir" (use "cwd")`},
		{"execute", map[string]any{"cmd": "ls"}, `"cmd" (use "command")`},
		{"execute", map[string]any{"command": "ls", "timeout_seconds": 5}, `"timeout_seconds" (use "timeout")`},
		{"execute", map[string]any{"command": "ls", "maxOutput": 5000}, `"maxOutput" (use "max_output")`},
		{"edit_file", map[string]any{"path": "a.txt", "old_string": "a", "new_string": "b"}, `"new_string" (use "new_text"), "old_string" (use "old_text")`},
		{"write_file", map[string]any{"file_path": "a.txt", "content": "x"}, `"file_path" (use "path")`},
		{"write_file", map[string]any{"path": "a.txt", "text": "x"}, `"text" (use "content")`},
		{"job_input", map[string]any{"jobId": fakeJob, "text": "y"}, `"jobId" (use "job_id"), "text" (use "input")`},
		{"share_file", map[string]any{"path": "a.txt", "ttl": 60}, `"ttl" (use "expires_in")`},
		{"upload_link", map[string]any{"dir": "in"}, `"dir" (use "directory")`},
		{"execute", map[string]any{"command": "pwd", "cwdd": "/tmp"}, `execute does not take the argument "cwdd"; it accepts:`},
	})
	if got := h.box.called(); len(got) > 0 {
		t.Errorf("refused calls reached the sandbox: %q", got)
	}
}

// TestKilledAndDuration: killed is true whatever killed the command (job_kill, its
// timeout, a cancelled call), false for a command that never started; the duration is
// the job's own, not the time of the call that returned it.
func TestKilledAndDuration(t *testing.T) {
	for _, c := range []struct {
		res     boxapi.ExecResult
		killed  bool
		seconds float64
	}{
		{boxapi.ExecResult{ExitCode: 137, TimedOut: true, Duration: 60 * time.Millisecond, JobDuration: 10 * time.Second}, true, 10},
		{boxapi.ExecResult{ExitCode: 137, Cancelled: true, Duration: 60 * time.Millisecond, JobDuration: 2500 * time.Millisecond}, true, 2.5},
		{boxapi.ExecResult{ExitCode: 137, Killed: true, Duration: time.Second, JobDuration: 3 * time.Second}, true, 3},
		{boxapi.ExecResult{ExitCode: -1, Cancelled: true, Duration: 40 * time.Millisecond}, false, 0.04},
		{boxapi.ExecResult{ExitCode: 0, Duration: 1500 * time.Millisecond}, false, 1.5},
	} {
		if out := toOutput(&c.res); out.Killed != c.killed || out.DurationSeconds != c.seconds {
			t.Errorf("%+v: killed %v, duration_seconds %v; want %v, %v", c.res, out.Killed, out.DurationSeconds, c.killed, c.seconds)
		}
	}
}

// TestOfflineDownloadNote: a download that fails, or still runs, in a sandbox that
// reaches no host gets a note saying it is offline; other commands, and sandboxes with
// a network, do not.
func TestOfflineDownloadNote(t *testing.T) {
	const failed, running = "[note: the sandbox is offline, so downloads and package installs fail", "[note: the sandbox is offline, so this download cannot succeed; stop it with job_kill"
	for _, c := range []struct {
		network string
		egress  *Egress
		args    map[string]any
		want    string
	}{
		{"none", nil, map[string]any{"command": "apt-get install -y jq"}, failed},
		{"none", nil, map[string]any{"command": "apt-get -q update && apt-get install -y jq"}, failed},
		{"none", nil, map[string]any{"command": "pip install --user requests"}, failed},
		{"none", nil, map[string]any{"command": "cd app && npm install", "wait": 0}, running},
		{"bridge", &Egress{Offline: true}, map[string]any{"command": "git clone https://github.com/x/y"}, failed},
		{"bridge", &Egress{}, map[string]any{"command": "python3 -m pip install numpy"}, failed},
		{"none", nil, map[string]any{"command": "ls -la"}, ""},
		{"none", nil, map[string]any{"command": "apt-cache policy jq"}, ""},
		{"bridge", nil, map[string]any{"command": "apt-get install -y jq"}, ""},
		{"bridge", &Egress{Hosts: "pypi.org"}, map[string]any{"command": "pip install requests"}, ""},
	} {
		h := newToolsHarness(t, func(o *Options) { o.Config.NetworkMode = c.network })
		h.box.egress = c.egress
		_, text, _ := h.call("execute", c.args)
		if c.want == "" && strings.Contains(text, "offline") || c.want != "" && !strings.Contains(text, c.want) {
			t.Errorf("network %s, egress %+v, %v: %q", c.network, c.egress, c.args, text)
		}
	}
}

// endingBox is a sandbox whose interactive job ends on the input it gets.
type endingBox struct {
	fakeBox
	err error
}

func (b *endingBox) JobOutput(_ context.Context, id string, _ time.Duration, input *string, _ int, _ func(boxapi.Stream, []byte)) (*boxapi.ExecResult, error) {
	return &boxapi.ExecResult{JobID: id, Stdout: "bye\n", ExitCode: 4, JobDuration: time.Second}, b.err
}

// TestJobInputThatEndsSaysSent: input the program ended on is a result, not an error,
// whose note says the input was sent; input a job never took is an error saying it
// was not sent, with the job's last output.
func TestJobInputThatEndsSaysSent(t *testing.T) {
	h := newToolsHarness(t, func(o *Options) { o.Boxes = oneBox{&endingBox{}} })
	isErr, text, st := h.call("job_input", map[string]any{"job_id": fakeJob, "input": "quit"})
	if isErr || !strings.Contains(text, "bye\n[exit code 4, ran 1.00s]\n[the input was sent; the program then ended]") || st.(map[string]any)["exit_code"] != float64(4) {
		t.Errorf("input the program ended on: %v %q", isErr, text)
	}
	h = newToolsHarness(t, func(o *Options) { o.Boxes = oneBox{&endingBox{err: boxapi.ErrJobFinished}} })
	isErr, text, _ = h.call("job_input", map[string]any{"job_id": fakeJob, "input": "quit"})
	if !isErr || !strings.Contains(text, "The input was not sent: job "+fakeJob+" has already ended. Its last output:\nbye\n") || strings.Contains(text, "was sent;") {
		t.Errorf("input for a job that had ended: %v %q", isErr, text)
	}
}
