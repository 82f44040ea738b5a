package mcpsandbox

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// timedCall runs a tool with its own deadline and returns the result and how long it
// took; an error (such as the deadline) fails the test with the time it took.
func timedCall(ctx context.Context, t *testing.T, c *mcpclient.Client, limit time.Duration, tool string, args map[string]any) (*mcp.CallToolResult, time.Duration) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	start := time.Now()
	res, err := c.CallTool(cctx, req)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%s did not answer within %v (after %v): %v", tool, limit, took, err)
	}
	return res, took
}

// TestJobInputNeverBlocks: input a program has not read is bounded. Two inputs of
// 60 KiB to a program that reads nothing (more than its stdin pipe holds) both answer
// at once; a third is refused at once, saying why and what to do; job_output is not
// held up meanwhile. Once the program reads, it gets both inputs whole and in order.
func TestJobInputNeverBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.client(ctx)
	total := 2 * (boxapi.MaxInputBytes + 1) // job_input adds a newline to each
	st := structured(t, call(ctx, t, c, "execute", map[string]any{
		"command":     fmt.Sprintf("echo ready; until [ -e /tmp/go-read ]; do sleep 0.2; done; head -c %d | tr -s ab; echo read-done", total),
		"interactive": true, "wait": 1}))
	if st["running"] != true || st["stdout"] != "ready\n" {
		t.Fatalf("interactive start: %v", st)
	}
	id := st["job_id"]
	for i, ch := range []string{"a", "b"} {
		res, took := timedCall(ctx, t, c, 20*time.Second, "job_input", map[string]any{
			"job_id": id, "input": strings.Repeat(ch, boxapi.MaxInputBytes), "wait": 1})
		t.Logf("job_input %d of 60 KiB answered in %v: error %v, %q", i+1, took, res.IsError, human.Clip(resultText(res), 300))
		if took > 10*time.Second {
			t.Errorf("job_input %d took %v, want under 10 s", i+1, took)
		}
		if res.IsError || structured(t, res)["running"] != true {
			t.Fatalf("job_input %d: %q", i+1, resultText(res))
		}
		if i == 1 && !strings.Contains(resultText(res), "has not read all of this input yet") {
			t.Errorf("job_input 2 does not say its input waits: %q", resultText(res))
		}
	}
	res, took := timedCall(ctx, t, c, 20*time.Second, "job_input", map[string]any{"job_id": id, "input": "c", "wait": 1})
	t.Logf("job_input 3 answered in %v: %q", took, resultText(res))
	if took > 5*time.Second {
		t.Errorf("refused job_input took %v", took)
	}
	if txt := resultText(res); !res.IsError || !strings.Contains(txt, "has not read its input yet") ||
		!strings.Contains(txt, "job_output") || !strings.Contains(txt, "job_kill") {
		t.Errorf("third input: error %v, %q", res.IsError, txt)
	}
	res, took = timedCall(ctx, t, c, 20*time.Second, "job_output", map[string]any{"job_id": id, "wait": 0})
	t.Logf("job_output answered in %v", took)
	if took > 5*time.Second || res.IsError {
		t.Errorf("job_output after the inputs: %v, error %v, %q", took, res.IsError, resultText(res))
	}
	s.containerExec("touch /tmp/go-read")
	stdout, _, last := followJob(ctx, t, c, structured(t, call(ctx, t, c, "job_output", map[string]any{"job_id": id, "wait": 5})))
	if stdout != "a\nb\nread-done\n" || last["exit_code"] != float64(0) {
		t.Errorf("the program read %q, %v; want both inputs whole, in order", stdout, last)
	}

	// A job killed while its input waits leaves no writer behind.
	st = structured(t, call(ctx, t, c, "execute", map[string]any{"command": "sleep 600", "interactive": true, "wait": 0}))
	for range 2 {
		res, _ = timedCall(ctx, t, c, 20*time.Second, "job_input", map[string]any{"job_id": st["job_id"], "input": strings.Repeat("x", boxapi.MaxInputBytes), "wait": 0})
		if res.IsError {
			t.Fatalf("input to sleep: %q", resultText(res))
		}
	}
	call(ctx, t, c, "job_kill", map[string]any{"job_id": st["job_id"]})
	waitFor(t, 10*time.Second, "the input writer to end", func() bool {
		ps := s.tryExec("ps -o args")
		return !strings.Contains(ps, "mcpjob poll") && !strings.Contains(ps, "mcpjob-input")
	})
}

// TestJobListLongCommand: a command too long for the environment (sent on stdin) is
// listed by job_list with the start of its text.
func TestJobListLongCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.client(ctx)
	cmd := "echo long-command-marker; : " + strings.Repeat("x", 100<<10)
	st := structured(t, call(ctx, t, c, "execute", map[string]any{"command": cmd}))
	if st["stdout"] != "long-command-marker\n" {
		t.Fatalf("long command: %v", st)
	}
	list := structured(t, call(ctx, t, c, "job_list", nil))
	for _, j := range list["jobs"].([]any) {
		e := j.(map[string]any)
		if e["job_id"] != st["job_id"] {
			continue
		}
		command := e["command"].(string)
		if !strings.HasPrefix(command, "echo long-command-marker; : xxx") || len(command) > 1024 {
			t.Errorf("job_list shows the 100 KiB command as %q", human.Clip(command, 300))
		}
		return
	}
	t.Errorf("job %v not in job_list: %v", st["job_id"], list)
}

// fakeOldBash claims to be bash 5.0 and, like 5.0, knows no `wait -p`; it runs the
// real bash otherwise. Placed first on the PATH, it is the bash every exec finds. The job
// runner comes in the environment, and is rewritten there.
const fakeOldBash = `#!/bin/bash
if [ -n "$MCP_SANDBOX_RUNNER" ]; then
	r=${MCP_SANDBOX_RUNNER//BASH_VERSINFO/FAKE_VERSINFO}
	export MCP_SANDBOX_RUNNER=${r//wait -n -p/wait -n -Q}
fi
if [ "$1" = -c ]; then
	s=${2//BASH_VERSINFO/FAKE_VERSINFO}
	s=${s//wait -n -p/wait -n -Q}
	shift 2
	exec /bin/bash -c "FAKE_VERSINFO=(5 0 17 1 release x86_64-pc-linux-gnu); $s" "$@"
fi
exec /bin/bash "$@"
`

// TestOldBashRefused: with a bash older than 5.1 in the image, execute and the job
// tools answer with one clear error naming the requirement, instead of jobs that read
// as running or lost.
func TestOldBashRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	s := jobsSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.client(ctx)
	st := structured(t, call(ctx, t, c, "execute", map[string]any{"command": "echo fine"}))
	if st["stdout"] != "fine\n" {
		t.Fatalf("before the fake bash: %v", st)
	}
	s.containerExec("cat >/usr/local/bin/bash <<'EOF'\n" + fakeOldBash + "EOF\nchmod 755 /usr/local/bin/bash")
	if got := s.containerExec(`echo "${BASH_VERSINFO[0]}.${BASH_VERSINFO[1]}"`); got != "5.0\n" {
		t.Fatalf("the fake bash reports %q", got)
	}
	// The agent's spare runner was started with the earlier bash: it serves one call.
	call(ctx, t, c, "execute", map[string]any{"command": "true"})
	want := "the sandbox image's bash is 5.0; commands need bash 5.1 or newer"
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"execute", map[string]any{"command": "echo hi"}},
		{"execute", map[string]any{"command": "sleep 1; echo hi", "wait": 0}},
		{"job_list", nil},
	} {
		res, took := timedCall(ctx, t, c, 30*time.Second, tc.tool, tc.args)
		if txt := resultText(res); !res.IsError || !strings.Contains(txt, want) || strings.Contains(txt, "Try again") || took > 10*time.Second {
			t.Errorf("%s%v with bash 5.0 answered in %v: error %v, %q", tc.tool, tc.args, took, res.IsError, txt)
		}
	}
}
