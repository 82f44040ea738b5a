package mcptools

import (
	"context"
	"strings"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestJobListRunningAndRetention: job_list's description states what is kept (the
// newest 20 finished and any of the last 10 minutes, so more than 20 may show), and
// running: true lists only the jobs still running.
func TestJobListRunningAndRetention(t *testing.T) {
	h := newToolsHarness(t)
	if d := h.description("job_list"); !strings.Contains(d, "the newest 20 plus any finished in the last 10 minutes") {
		t.Errorf("job_list description: %q", d)
	}
	_, all, st := h.call("job_list", map[string]any{})
	if n := len(st.(map[string]any)["jobs"].([]any)); n != 2 || !strings.Contains(all, "exit code 3") {
		t.Errorf("job_list: %d jobs, %q", n, all)
	}
	isErr, running, st := h.call("job_list", map[string]any{"running": true})
	jobs := st.(map[string]any)["jobs"].([]any)
	if isErr || len(jobs) != 1 || jobs[0].(map[string]any)["job_id"] != fakeJob || strings.Contains(running, "exit code 3") {
		t.Errorf("job_list running: %v %q %v", isErr, running, jobs)
	}
}

// exitBox ends every command with the exit code it is given.
type exitBox struct {
	fakeBox
	code int
}

func (b *exitBox) Exec(context.Context, string, boxapi.ExecOptions) (*boxapi.ExecResult, error) {
	return &boxapi.ExecResult{JobID: "j000000000002", Stderr: "curl: (6) Could not resolve host\n", ExitCode: b.code}, nil
}

// TestOfflineNoteWhenPiped: in an offline sandbox, a download piped into another
// command gets the offline note even though the pipe ends in exit code 0, and curl or
// wget from a host other than the sandbox counts as a download; a download that
// succeeds unpiped (apt-get install of what is installed) and curl of the sandbox's
// own servers get none.
func TestOfflineNoteWhenPiped(t *testing.T) {
	const note = "[note: the sandbox is offline, so downloads and package installs fail"
	for _, c := range []struct {
		command string
		code    int
		want    bool
	}{
		{"curl -fsSL https://deb.nodesource.com/setup_20.x | bash -", 0, true},
		{"apt-get install -y jq 2>&1 | tail -3", 0, true},
		{"wget -qO- https://example.com/install.sh | sh", 0, true},
		{"curl -sSLo tool.tgz https://example.com/tool.tgz", 6, true},
		{"apt-get update", 0, true},
		{"apt-get -q update && apt-get install -y jq", 0, true},
		{"apt-get install -y jq", 0, false},
		{"apt-get install -y jq || true", 0, false},
		{"curl -s http://localhost:8000/ | head", 0, false},
		{"curl -s http://127.0.0.1:8000/health", 7, false},
		{"ls | wc -l", 0, false},
	} {
		h := newToolsHarness(t, func(o *Options) { o.Boxes = oneBox{&exitBox{code: c.code}} })
		_, text, _ := h.call("execute", map[string]any{"command": c.command})
		if strings.Contains(text, note) != c.want {
			t.Errorf("%q (exit %d): note %v, want %v: %q", c.command, c.code, !c.want, c.want, text)
		}
	}
}

// fileBox holds one text file, /sandbox/a.txt, and edits it as the sandbox does.
type fileBox struct {
	fakeBox
	text string
}

func (b *fileBox) EditFile(_ context.Context, p, old, _ string) (boxapi.EditResult, error) {
	if n := strings.Count(b.text, old); n != 1 {
		e := &boxapi.MatchError{Count: n}
		if n == 0 {
			e.Near = boxapi.Closest(b.text, old)
		}
		return boxapi.EditResult{}, e
	}
	return boxapi.EditResult{Line: 1}, nil
}

// TestEditFileNotFoundSaysWhere: when old_text is not in the file, the error names the
// line where it comes closest and what differs there.
func TestEditFileNotFoundSaysWhere(t *testing.T) {
	h := newToolsHarness(t, func(o *Options) {
		o.Boxes = oneBox{&fileBox{text: "def f():\n\tx = 1\n\treturn x\n"}}
	})
	h.wantErrors(t, []errorCase{
		{"edit_file", map[string]any{"path": "a.txt", "old_text": "def f():\n    x = 1\n", "new_text": "y"},
			`old_text was not found in /sandbox/a.txt, so nothing changed. Its first 1 line(s) match the file from line 1; then line 2 of the file is "\tx = 1" where old_text has "    x = 1": they differ only in whitespace`},
		{"edit_file", map[string]any{"path": "a.txt", "old_text": "return x + 1", "new_text": "y"},
			`The closest line: line 3 of the file is "\treturn x" where old_text has "return x + 1": they agree up to "return x", then differ.`},
	})
}

// TestUnknownToolListsTools: a call of a tool the server does not have is a tool error
// that lists the tools (mcp-go's own error named none), and the hidden tool that
// answers it is in no listing.
func TestUnknownToolListsTools(t *testing.T) {
	h := newToolsHarness(t)
	h.wantErrors(t, []errorCase{{"bash", map[string]any{"command": "ls"},
		`There is no tool "bash" on this server. Its tools are: checkpoint, checkpoint_list, edit_file, execute, expose_port, job_input, job_kill, job_list, job_output, read_file, restore, share_file, unexpose_port, upload_link, write_file. To run a program or command in the sandbox, use execute.`}})
	for _, tl := range h.rpc("tools/list", map[string]any{})["tools"].([]any) {
		if name := tl.(map[string]any)["name"]; strings.HasPrefix(name.(string), "_") {
			t.Errorf("tools/list has %v", name)
		}
	}
	if isErr, text, _ := h.call("job_list", map[string]any{}); isErr {
		t.Errorf("a known tool: %q", text)
	}
}

// silentBox runs every command on, having printed nothing.
type silentBox struct{ fakeBox }

func (b *silentBox) Exec(context.Context, string, boxapi.ExecOptions) (*boxapi.ExecResult, error) {
	return &boxapi.ExecResult{JobID: fakeJob, Running: true, ExitCode: -1}, nil
}

// TestPromptNote: an interactive command without a terminal that runs on silently gets
// a note that its prompt (read -p) may not show; with tty, or not interactive, none.
// execute's description says so too.
func TestPromptNote(t *testing.T) {
	h := newToolsHarness(t, func(o *Options) { o.Boxes = oneBox{&silentBox{}} })
	const note = "its prompt may not show: read -p and programs that check for a terminal print none without tty: true"
	for _, c := range []struct {
		args map[string]any
		want bool
	}{
		{map[string]any{"command": `read -p "Name? " n; echo "hi $n"`, "interactive": true}, true},
		{map[string]any{"command": `read -p "Name? " n; echo "hi $n"`, "tty": true}, false},
		{map[string]any{"command": "sleep 100"}, false},
	} {
		_, text, _ := h.call("execute", c.args)
		if strings.Contains(text, note) != c.want {
			t.Errorf("%v: %q", c.args, text)
		}
	}
	for _, tl := range h.rpc("tools/list", map[string]any{})["tools"].([]any) {
		tl := tl.(map[string]any)
		if tl["name"] != "execute" {
			continue
		}
		d := tl["inputSchema"].(map[string]any)["properties"].(map[string]any)["interactive"].(map[string]any)["description"].(string)
		if !strings.Contains(d, "`read -p` prompts show only with tty.") {
			t.Errorf("execute's interactive: %q", d)
		}
	}
}

// checkpointBox can restore checkpoints.
type checkpointBox struct{ fakeBox }

func (b *checkpointBox) SaveCheckpoint(context.Context, string) (boxapi.Checkpoint, []boxapi.Checkpoint, error) {
	return boxapi.Checkpoint{}, nil, nil
}
func (b *checkpointBox) ListCheckpoints(context.Context) ([]boxapi.Checkpoint, error) {
	return nil, nil
}
func (b *checkpointBox) RestoreCheckpoint(context.Context, string) error { return nil }

// TestRestoreWording: restore's result says plainly that the processes running before
// have ended.
func TestRestoreWording(t *testing.T) {
	h := newToolsHarness(t, func(o *Options) { o.Boxes = oneBox{&checkpointBox{}} })
	for _, id := range []string{"image", "c0123456789abcd"} {
		isErr, text, _ := h.call("restore", map[string]any{"id": id})
		if isErr || !strings.Contains(text, "every process that was running before has ended.") || strings.Contains(text, "of before") {
			t.Errorf("restore %s: %v %q", id, isErr, text)
		}
	}
}
