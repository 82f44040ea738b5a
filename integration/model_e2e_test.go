package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestJobInputThatEndsProgram: through a real Caddy, with the agent and on the Docker
// exec fallback, input that makes the program end is reported as sent (no error),
// with the output that followed and the exit code, every time; the job's stderr
// carries nothing of the runner's.
func TestJobInputThatEndsProgram(t *testing.T) {
	testsite.WithAndWithoutAgent(t, func(t *testing.T, opts testsite.Options) {
		opts.Directive = append(opts.Directive, "yield_after 5s")
		s := testsite.Start(t, opts)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := s.Client(ctx)
		for i := range 3 {
			st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{
				"command": `echo ready; read l; echo "bye $l"; exit 4`, "interactive": true, "wait": 1}))
			if st["running"] != true || st["stdout"] != "ready\n" {
				t.Fatalf("start %d: %v", i, st)
			}
			res := testsite.Call(ctx, t, c, "job_input", map[string]any{"job_id": st["job_id"], "input": "quit", "wait": 5})
			r := testsite.Structured(t, res)
			if res.IsError || r["stdout"] != "bye quit\n" || r["stderr"] != "" || r["running"] != false || r["exit_code"] != float64(4) ||
				!strings.Contains(testsite.ResultText(res), "[the input was sent; the program then ended]") {
				t.Fatalf("try %d: input that ends the program: error %v, %v\n%s", i, res.IsError, r, testsite.ResultText(res))
			}
		}
	})
}

// TestInstructionsWithoutPreviews: through a real Caddy, a site without previews tells
// the model, in its instructions and in execute's description, that the person cannot
// reach the sandbox's ports and what to do instead; a site with previews points at
// expose_port.
func TestInstructionsWithoutPreviews(t *testing.T) {
	for _, previews := range []bool{false, true} {
		var opts testsite.Options
		if previews {
			opts.Directive = []string{"previews localhost"}
		}
		s := testsite.Start(t, opts)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		instructions, tools := mcpSession(ctx, t, s, mcp.LATEST_PROTOCOL_VERSION)
		cancel()
		said := strings.Contains(instructions, "The user cannot reach ports in the sandbox (this server has no previews)") &&
			strings.Contains(instructions, "an HTML page shared with share_file downloads as a file and cannot reach any server") &&
			strings.Contains(tools, "The user cannot open ports in the sandbox")
		if said == previews || strings.Contains(instructions, "expose_port") != previews {
			t.Errorf("previews %v: instructions %q", previews, instructions)
		}
	}
}

// TestOfflineInstallNote: through a real Caddy and container with no network, a
// package install that fails carries a note that the sandbox is offline; a command
// that downloads nothing does not.
func TestOfflineInstallNote(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client(ctx)
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "apt-get install -y jq || pip install requests"})
	if !strings.Contains(testsite.ResultText(res), "[note: the sandbox is offline, so downloads and package installs fail; use what is installed") {
		t.Errorf("a failed install: %q", testsite.ResultText(res))
	}
	if res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "ls /nonexistent"}); strings.Contains(testsite.ResultText(res), "offline") {
		t.Errorf("a failed ls: %q", testsite.ResultText(res))
	}
}
