package mcptools

import (
	"context"
	"errors"
	"testing"
)

// A job's questions go to the latest call waiting for it, with the command execute
// gave; once no call waits, nobody is asked, and another person's job is not theirs.
func TestCallsTrackJobs(t *testing.T) {
	var c calls
	ctx := WithCaller(context.Background(), Caller{Person: "alice"})
	untrackExec := c.track(ctx, "j1", "pip install x", nil)
	untrackFollow := c.track(ctx, "j1", "", nil)
	if rc := c.get("j1"); rc == nil || rc.command != "pip install x" || rc.person != "alice" {
		t.Fatalf("%+v", rc)
	}
	first := c.m["j1"][0]
	untrackExec()
	if first.ctx.Err() == nil {
		t.Fatal("a returned call's questions go on")
	}
	if rc := c.get("j1"); rc == nil || rc.ctx.Err() != nil {
		t.Fatal("the call still waiting lost the job")
	}
	untrackFollow()
	if c.get("j1") != nil {
		t.Fatal("a job with no call waiting can be asked about")
	}
	tools := &Tools{}
	defer tools.calls.track(ctx, "j2", "curl x", nil)()
	if _, err := tools.AskHost(context.Background(), "bob", "j2", "x.test", 443); !errors.Is(err, ErrCannotAsk) {
		t.Fatalf("another person's job: %v", err)
	}
	if _, err := tools.AskHost(context.Background(), "alice", "j2", "x.test", 443); !errors.Is(err, ErrCannotAsk) {
		t.Fatalf("a call without a session: %v", err)
	}
}
