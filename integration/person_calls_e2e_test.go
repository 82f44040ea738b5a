package integration

import (
	"context"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestPersonCallsCountToolCalls: through a real Caddy, person_calls_total counts
// alice's tool calls, one each, and not the sessions she opens.
func TestPersonCallsCountToolCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	p := startPeopleSite(t, []string{"alice"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	count := func() float64 {
		n, _ := testsite.MetricSum(testsite.Metrics(t, nil, p.URL), "caddy_mcp_sandbox_person_calls_total", map[string]string{"person": "alice"})
		return n
	}
	before := count()
	for range 2 {
		c := p.client(ctx, "alice") // a new session each: initialize, then one call
		testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"})
		c.Close()
	}
	if n := count() - before; n != 2 {
		t.Fatalf("2 tool calls in 2 sessions counted %v", n)
	}
}
