package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// BenchmarkPeople: 20 people call at once, through one Caddy, each in a sandbox of their
// own. The first round creates the 20 containers (the first call of a new person); the
// timed rounds are warm. Every result must be the caller's own, and Caddy's RSS (this
// process's, sampled throughout) must stay under 256 MB. Run it with -benchtime 5x: each
// run of the function creates 20 containers.
func BenchmarkPeople(b *testing.B) {
	const n = 20
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("p%02d", i)
	}
	p := startPeopleSite(b, names)
	ctx := context.Background()
	clients := make([]*mcpclient.Client, n)
	for i, name := range names {
		clients[i] = p.client(ctx, name)
	}

	stopRSS, _ := sampleRSS()

	// round makes every person's call at once and returns each one's duration.
	round := func() []time.Duration {
		took := make([]time.Duration, n)
		var wg sync.WaitGroup
		for i, name := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				res := testsite.Call(ctx, b, clients[i], "execute", map[string]any{
					"command": "[ -f /sandbox/me ] || echo " + name + " > /sandbox/me; cat /sandbox/me",
				})
				took[i] = time.Since(t0)
				if got := testsite.Structured(b, res)["stdout"]; res.IsError || got != name+"\n" {
					b.Errorf("%s got %q (%s)", name, got, testsite.ResultText(res))
				}
			}()
		}
		wg.Wait()
		return took
	}

	first := round()
	var warm []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		warm = append(warm, round()...)
	}
	b.StopTimer()
	peak := stopRSS()

	slices.Sort(first)
	slices.Sort(warm)
	b.ReportMetric(float64(first[n/2].Milliseconds()), "first-call-median-ms")
	b.ReportMetric(float64(first[n-1].Milliseconds()), "first-call-max-ms")
	b.ReportMetric(float64(warm[len(warm)/2].Microseconds())/1000, "warm-call-median-ms")
	b.ReportMetric(float64(peak)/1024, "peak-rss-MB")
	if mb := peak / 1024; mb >= 256 {
		b.Errorf("Caddy's RSS reached %d MB with %d people calling at once, want under 256 MB", mb, n)
	}
}
