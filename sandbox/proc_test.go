package sandbox

import (
	"context"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// A program on the agent yields its chunks as they came, each with its stream, and its
// exit status: no Docker frames in between.
func TestAgentProcStreams(t *testing.T) {
	sess := fakeAgent(t, func(st *agentwire.Stream, req agentwire.Request) {
		if r, ok := req.(*agentwire.ExecRequest); !ok || r.Argv[0] != "prog" {
			st.Reset("unexpected request")
			return
		}
		for _, c := range []struct {
			ch byte
			s  string
		}{{1, "o"}, {2, "e1"}, {1, "ut\n"}, {2, "\x00\x00\x00\x00\x00\x00\x00\x05"}, {1, "!"}} {
			st.Write(c.ch, []byte(c.s))
		}
		st.CloseChannel(agentwire.Stdout)
		st.Exit(3)
	})
	p, err := (&agentLink{}).agentStart(sess, agentwire.ExecRequest{Argv: []string{"prog"}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb []byte
	if err := drain(p, func(b []byte) { out = append(out, b...) }, func(b []byte) { errb = append(errb, b...) }); err != nil {
		t.Fatal(err)
	}
	if string(out) != "out\n!" || string(errb) != "e1\x00\x00\x00\x00\x00\x00\x00\x05" {
		t.Errorf("stdout %q, stderr %q", out, errb)
	}
	if code, ok := p.exitCode(context.Background(), false); !ok || code != 3 {
		t.Errorf("exit code %d, %v; want 3", code, ok)
	}
}
