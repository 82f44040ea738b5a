package mcptools

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// auditTool records every tool call in the audit log (registered as mcp-go tool
// middleware, so tools added later are covered without a line of their own).
func (s *Tools) auditTool(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		res, err := next(ctx, req)
		s.opts.Audit.Record(AuditEntry(ctx, req, res, err, start))
		return res, err
	}
}

// auditArgLimit is how much of each string argument (the command) the log keeps.
const auditArgLimit = 1000

// AuditEntry makes the audit entry of one tool call.
func AuditEntry(ctx context.Context, req mcp.CallToolRequest, res *mcp.CallToolResult, err error, start time.Time) audit.Entry {
	id := CallerFrom(ctx)
	e := audit.Entry{
		Time: start, Client: id.Label, ClientID: id.ClientID, Subject: id.Subject, Person: id.Person, Remote: id.Remote,
		Tool: req.Params.Name, Outcome: audit.OutcomeOK,
		DurationMS: float64(time.Since(start).Microseconds()) / 1000,
	}
	if m, ok := req.Params.Arguments.(map[string]any); ok && len(m) > 0 {
		clipped := make(map[string]any, len(m))
		for k, v := range m {
			if s, ok := v.(string); ok {
				v = human.Clip(s, auditArgLimit)
			}
			clipped[k] = v
		}
		// Not HTML-escaped: the log keeps what was sent; the console escapes on output.
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if enc.Encode(clipped) == nil {
			e.Args = strings.TrimSuffix(b.String(), "\n")
		}
	}
	switch {
	case err != nil:
		e.Outcome, e.Error = audit.OutcomeError, human.Clip(err.Error(), 500)
	case res == nil:
	case res.IsError:
		e.Outcome, e.Error = audit.OutcomeError, human.Clip(resultErrorText(res), 500)
	default:
		if f, ok := res.StructuredContent.(auditFacter); ok {
			e.Outcome, e.ExitCode, e.Bytes = f.auditFacts()
		}
		if o, ok := res.StructuredContent.(ExecuteOutput); ok {
			if hosts := refusedHosts(o.Note); hosts != "" {
				// The command may well exit 0 (curl … || true): its row still shows
				// that it was refused the network.
				if e.Outcome == audit.OutcomeOK {
					e.Outcome = audit.OutcomeRefused
				}
				e.Error = human.Clip("egress refused: "+hosts, 500)
			}
		}
	}
	return e
}

// refusedHosts finds the hosts the egress proxy refused in a result's note, as
// blockedNote writes them ("[blocked: a (reason), b; …]"); "" when there are none.
func refusedHosts(note string) string {
	_, rest, ok := strings.Cut(note, "\n[blocked: ")
	if !ok {
		return ""
	}
	for _, tail := range []string{blockedTail, blockedAskTail} {
		if hosts, _, ok := strings.Cut(rest, tail); ok {
			return hosts
		}
	}
	return ""
}

func resultErrorText(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			return tc.Text
		}
	}
	return "tool error"
}

// auditFacter is implemented by structured tool results that have an outcome, an exit
// code or a byte count worth logging.
type auditFacter interface {
	auditFacts() (outcome string, exitCode *int, bytes int64)
}

// auditFacts of execute and the job tools: a job still running is "ok" with no exit
// code yet.
func (o ExecuteOutput) auditFacts() (string, *int, int64) {
	outcome := audit.OutcomeOK
	switch {
	case o.TimedOut:
		outcome = audit.OutcomeTimeout
	case o.Cancelled:
		outcome = audit.OutcomeCancelled
	case o.ExitCode != nil && *o.ExitCode != 0:
		outcome = audit.OutcomeNonZero
	}
	return outcome, o.ExitCode, o.StdoutBytes + o.StderrBytes
}

func (o shareOutput) auditFacts() (string, *int, int64) { return audit.OutcomeOK, nil, o.Size }
