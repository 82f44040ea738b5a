package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// agentOpts is the site of TestAgentEndToEnd; the restart loads it again.
var agentOpts = testsite.Options{Directive: []string{"yield_after 10s"}}

// TestAgentEndToEnd drives the in-container agent the way a model does, with the
// official TypeScript SDK through a real Caddy on the realistic image: a command under
// a tty, a Python REPL typed into through job_input, a job that outlives a killed agent
// and `kill -9 -1`, and a job that outlives a Caddy restart (after which one agent
// runs). One site serves every step, in this order.
func TestAgentEndToEnd(t *testing.T) {
	s := realisticSite(t, agentOpts)
	stdout := func(r tsCallResult) string { o, _ := r.Structured["stdout"].(string); return o }
	all := func(rs []tsCallResult) string {
		var b strings.Builder
		for _, r := range rs {
			b.WriteString(stdout(r))
		}
		return b.String()
	}
	failed := func(rs []tsCallResult) string {
		for _, r := range rs {
			if r.Error != "" {
				return r.Tool + ": " + r.Error
			}
		}
		return ""
	}
	agents := func() string { return s.TryExec("ps -eo pid,args | grep '[s]andbox-agent.* serve' || true") }

	t.Run("tty", func(t *testing.T) {
		cmd := "tty; [ -t 0 ] && echo is-a-tty"
		r := runTSCalls(t, s,
			tsCall{Tool: "execute", Args: map[string]any{"command": cmd, "tty": true}},
			tsCall{Tool: "execute", Args: map[string]any{"command": cmd}},
		).Results
		if on := stdout(r[0]); r[0].IsError || !strings.Contains(on, "/dev/pts/") || !strings.Contains(on, "is-a-tty") {
			t.Errorf("with tty: %q", r[0].Text)
		}
		if off := stdout(r[1]); r[1].IsError || strings.Contains(off, "/dev/pts/") || strings.Contains(off, "is-a-tty") {
			t.Errorf("without tty: %q", r[1].Text)
		}
	})

	t.Run("python REPL under a tty", func(t *testing.T) {
		r := runTSCalls(t, s,
			tsCall{Tool: "execute", Args: map[string]any{"command": "python3 -q", "tty": true, "wait": 1}},
			tsCall{Tool: "job_input", Args: map[string]any{"job_id": "$job", "input": "print(6*7)\n", "wait": 3}},
			tsCall{Tool: "job_input", Args: map[string]any{"job_id": "$job", "input": "import sys; sys.exit(3)\n", "wait": 3}},
			tsCall{Tool: "job_output", Args: map[string]any{"job_id": "$job", "wait": 10}, Follow: true},
		).Results
		last := r[len(r)-1]
		if e := failed(r); e != "" || r[0].Structured["running"] != true {
			t.Fatalf("REPL: %s; start %q", e, r[0].Text)
		}
		if !strings.Contains(stdout(r[1]), "42") {
			t.Errorf("print(6*7) answered %q", r[1].Text)
		}
		if last.Structured["running"] != false || last.Structured["exit_code"] != float64(3) {
			t.Errorf("after sys.exit(3): %q", last.Text)
		}
		t.Logf("the REPL's terminal: %q", all(r))
	})

	// startJob starts command in a session of its own and returns it running.
	startJob := func(t *testing.T, command string, wait int) (tsCallResult, string) {
		t.Helper()
		r := runTSCalls(t, s, tsCall{Tool: "execute", Args: map[string]any{"command": command, "wait": wait}}).Results[0]
		id, _ := r.Structured["job_id"].(string)
		if r.Structured["running"] != true || id == "" {
			t.Fatalf("%s: %q", command, r.Text)
		}
		return r, id
	}
	// killThen runs kill, then a command that must work within 3 s, then follows job
	// id to its end, in one session.
	killThen := func(t *testing.T, kill, id string) []tsCallResult {
		t.Helper()
		r := runTSCalls(t, s,
			tsCall{Tool: "execute", Args: map[string]any{"command": kill}},
			tsCall{Tool: "execute", Args: map[string]any{"command": "echo next"}},
			tsCall{Tool: "job_output", Args: map[string]any{"job_id": id, "wait": 10}, Follow: true},
		).Results
		t.Logf("%s took %.0f ms (%q), the next call %.0f ms", kill, r[0].MS, r[0].Text+r[0].Error, r[1].MS)
		if stdout(r[1]) != "next\n" || r[1].MS > 3000 {
			t.Errorf("the next call after %s (%.0f ms): %q", kill, r[1].MS, r[1].Text+r[1].Error)
		}
		if e := failed(r[2:]); e != "" {
			t.Errorf("following the job: %s", e)
		}
		return r
	}

	t.Run("a job outlives a killed agent", func(t *testing.T) {
		before := agents()
		first, id := startJob(t, "for i in $(seq 1 20); do echo count-$i; sleep 0.2; done", 0)
		// [t] keeps the pattern from matching the shell that runs pkill.
		r := killThen(t, "pkill -9 -f 'sandbox-agen[t].* serve'; echo killed", id)
		// The killing call's own output comes through the new agent.
		if stdout(r[0]) != "killed\n" || r[0].Structured["exit_code"] != float64(0) {
			t.Errorf("the killing call: %q, stdout %q", r[0].Text+r[0].Error, stdout(r[0]))
		}
		out := stdout(first) + all(r[2:])
		var want strings.Builder
		for i := 1; i <= 20; i++ {
			fmt.Fprintf(&want, "count-%d\n", i)
		}
		if last := r[len(r)-1]; out != want.String() || last.Structured["exit_code"] != float64(0) {
			t.Errorf("the counter after the agent's death: %q, last %q", out, last.Text)
		}
		if after := agents(); after == before || strings.Count(after, "serve") != 1 {
			t.Errorf("agents before the kill %q, after %q: want one new one", before, after)
		}
	})

	t.Run("kill -9 -1", func(t *testing.T) {
		first, id := startJob(t, "echo started; sleep 600", 1)
		r := killThen(t, "kill -9 -1", id)
		if j := r[len(r)-1]; j.IsError || j.Structured["running"] != false || !strings.Contains(j.Text, "killed with its runner") || !strings.Contains(stdout(first)+all(r[2:]), "started") {
			t.Errorf("the killed job: %q (first part %q)", j.Text+j.Error, first.Text)
		}
	})

	t.Run("a job outlives a Caddy restart", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := s.Client(ctx)
		st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "for i in $(seq 1 20); do echo line-$i; sleep 0.2; done", "wait": 0}))
		id, _ := st["job_id"].(string)
		if st["running"] != true || id == "" {
			t.Fatalf("start: %v", st)
		}
		before := agents()
		stopped := time.Now()
		if err := caddy.Stop(); err != nil {
			t.Fatal(err)
		}
		s.Load(agentOpts)
		t.Logf("Caddy down for %v; agents before %q", time.Since(stopped), before)
		c2 := s.Client(ctx)
		got, _, last := followJob(ctx, t, c2, testsite.Structured(t, testsite.Call(ctx, t, c2, "job_output", map[string]any{"job_id": id, "wait": 10})))
		var want strings.Builder
		for i := 1; i <= 20; i++ {
			fmt.Fprintf(&want, "line-%d\n", i)
		}
		if got = st["stdout"].(string) + got; got != want.String() || last["exit_code"] != float64(0) {
			t.Errorf("across the restart: %q, last %v", got, last)
		}
		var after string
		testenv.WaitFor(t, 10*time.Second, "one agent to run", func() bool {
			after = agents()
			return strings.Count(after, "serve") == 1
		})
		if after == before {
			t.Errorf("the old agent %q still serves", before)
		}
	})
}

// TestAgentOff: with `agent off`, every command is a Docker exec of its own: execute
// works, no agent runs, and tty is refused with a text that says why and what to do.
func TestAgentOff(t *testing.T) {
	s := realisticSite(t, testsite.Options{Directive: []string{"agent off"}})
	r := runTSCalls(t, s,
		tsCall{Tool: "execute", Args: map[string]any{"command": "echo plain; [ -t 0 ] || echo no-tty"}},
		tsCall{Tool: "execute", Args: map[string]any{"command": "tty", "tty": true}},
	).Results
	if out, _ := r[0].Structured["stdout"].(string); r[0].IsError || out != "plain\nno-tty\n" {
		t.Errorf("execute without the agent: %q", r[0].Text+r[0].Error)
	}
	if !r[1].IsError || !strings.Contains(r[1].Text, "tty needs the sandbox agent") || !strings.Contains(r[1].Text, "run the command without tty") {
		t.Errorf("tty without the agent: error %v, %q", r[1].IsError, r[1].Text+r[1].Error)
	}
	if ps := s.ContainerExec("ps -eo args | grep '[s]andbox-agent' || true"); ps != "" {
		t.Errorf("an agent runs with agent off: %q", ps)
	}
}
