package mcptools

import (
	"context"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
)

// TestAuditShowsRefusedHosts: a command that exits 0 although the egress proxy refused
// it hosts is logged as refused, naming them, as blockedNote writes them; one that
// failed keeps its outcome and names them too; one refused nothing is ok.
func TestAuditShowsRefusedHosts(t *testing.T) {
	box := &fakeBox{blocked: map[string][]string{fakeJob: {"evil.example (not allowed)", "other.example (not allowed)"}}}
	zero, one := 0, 1
	entry := func(out ExecuteOutput) audit.Entry {
		ctx := WithCaller(context.Background(), Caller{Person: "alice", Label: "Claude"})
		return AuditEntry(ctx, mcp.CallToolRequest{}, mcp.NewToolResultStructured(out, "text"), nil, time.Now())
	}
	out := ExecuteOutput{ExitCode: &zero, Note: "[exit 0]" + blockedNote(box, fakeJob)}
	e := entry(out)
	if e.Outcome != audit.OutcomeRefused || e.Error != "egress refused: evil.example (not allowed), other.example (not allowed)" || e.Person != "alice" {
		t.Fatalf("a refused command that exited 0: %+v", e)
	}
	out.ExitCode = &one
	if e := entry(out); e.Outcome != audit.OutcomeNonZero || e.Error == "" {
		t.Fatalf("a refused command that failed: %+v", e)
	}
	if e := entry(ExecuteOutput{ExitCode: &zero, Note: "[exit 0]"}); e.Outcome != audit.OutcomeOK || e.Error != "" {
		t.Fatalf("a command refused nothing: %+v", e)
	}
}

// TestAuditShowsRefusalsWhenAsking: on a site that asks, a command refused a host by
// the person's answer, or with nobody to ask, is logged as refused too.
func TestAuditShowsRefusalsWhenAsking(t *testing.T) {
	zero := 0
	for _, reason := range []string{"refused by the person", "not allowed by the operator, and nobody could be asked"} {
		box := &fakeBox{egress: &Egress{Ask: true}, blocked: map[string][]string{fakeJob: {"pypi.org (" + reason + ")"}}}
		out := ExecuteOutput{ExitCode: &zero, Note: "[exit 0]" + blockedNote(box, fakeJob)}
		ctx := WithCaller(context.Background(), Caller{Person: "bob", Label: "Claude"})
		e := AuditEntry(ctx, mcp.CallToolRequest{}, mcp.NewToolResultStructured(out, "text"), nil, time.Now())
		if e.Outcome != audit.OutcomeRefused || e.Error != "egress refused: pypi.org ("+reason+")" {
			t.Errorf("%s: %+v", reason, e)
		}
	}
}
