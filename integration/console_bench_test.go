package integration

import (
	"context"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/oauth"
)

// BenchmarkAuditCost measures what recording a tool call costs next to the call it
// records, in the same run: each iteration makes one execute("true") round trip
// through Caddy (with the audit log on, as deployed) and then, on a separate audit log
// over real file storage, builds and records 20 entries the way the middleware does
// and flushes once, as the background loop does once a second (20 calls a second is
// back-to-back execute calls). It reports both and the recorder's share of a round
// trip in percent (the target is under 5).
func BenchmarkAuditCost(b *testing.B) {
	s := testsite.Start(b, testsite.Options{})
	ctx := context.Background()
	c := s.Client(ctx)
	testsite.Call(ctx, b, c, "execute", map[string]any{"command": "true"})

	log := console.NewAuditLog(&certmagic.FileStorage{Path: b.TempDir()}, "bench", 0, nil)
	callCtx := mcptools.WithCaller(ctx, mcptools.Caller{Subject: "grant-id", ClientID: "client-id", ClientName: "Claude", Method: oauth.MethodOAuth, Label: "Claude"})
	req := mcp.CallToolRequest{}
	req.Params.Name = "execute"
	req.Params.Arguments = map[string]any{"command": "true"}
	res := mcp.NewToolResultStructured(mcptools.ExecuteOutput{ExitCode: new(int), DurationSeconds: 0.05}, "[exit code 0, ran 0.05s]")
	const perFlush = 20

	var roundTrip, record time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r := testsite.Call(ctx, b, c, "execute", map[string]any{"command": "true"})
		t1 := time.Now()
		if r.IsError {
			b.Fatal(testsite.ResultText(r))
		}
		for j := 0; j < perFlush; j++ {
			log.Record(mcptools.AuditEntry(callCtx, req, res, nil, time.Now()))
		}
		if err := log.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		roundTrip += t1.Sub(t0)
		record += t2.Sub(t1)
	}
	b.StopTimer()
	perCall := float64(record.Nanoseconds()) / float64(b.N*perFlush)
	rt := float64(roundTrip.Nanoseconds()) / float64(b.N)
	b.ReportMetric(rt, "roundtrip-ns")
	b.ReportMetric(perCall, "record-ns")
	b.ReportMetric(100*perCall/rt, "record-%")
}
