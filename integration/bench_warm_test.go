package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// BenchmarkWarmFirstCall: a new person's first call (connect, then `execute`) through
// one Caddy, median of 5 new people each way in the same run: without warm sandboxes
// (warm_sandboxes 0, the container made for the call) and with warm_sandboxes 3
// (one taken). People come one after another, each once the pool is full again. Each
// run of the function makes 10 people's sandboxes: run it with -benchtime 1x.
func BenchmarkWarmFirstCall(b *testing.B) {
	const n = 5
	var cold, warm []string
	for i := range n {
		cold, warm = append(cold, fmt.Sprintf("c%d", i)), append(warm, fmt.Sprintf("w%d", i))
	}
	everyone := append(slices.Clone(cold), warm...)
	ctx := context.Background()
	var coldTook, warmTook []time.Duration
	for b.Loop() {
		b.StopTimer()
		p := startPeopleSite(b, everyone)
		p.removeWarmLeftovers(b)
		first := func(person string) time.Duration {
			t0 := time.Now()
			c := p.client(ctx, person)
			connected := time.Since(t0)
			res := testsite.Call(ctx, b, c, "execute", map[string]any{"command": "echo " + person})
			took := time.Since(t0)
			if got := testsite.Structured(b, res)["stdout"]; res.IsError || got != person+"\n" {
				b.Fatalf("%s's first call: %q (%s)", person, got, testsite.ResultText(res))
			}
			c.Close()
			b.Logf("%s: connect %v, first call %v", person, connected, took)
			return took
		}
		for _, person := range cold {
			coldTook = append(coldTook, first(person))
		}
		p.extra = []string{"warm_sandboxes 3"}
		p.Load(p.options(everyone))
		for _, person := range warm {
			p.awaitWarm(b, 3)
			warmTook = append(warmTook, first(person))
			id, _, _ := p.sandboxVolume(b, person)
			if _, err := p.Docker.ContainerInspect(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	slices.Sort(coldTook)
	slices.Sort(warmTook)
	coldMs := float64(coldTook[len(coldTook)/2].Microseconds()) / 1000
	warmMs := float64(warmTook[len(warmTook)/2].Microseconds()) / 1000
	b.ReportMetric(coldMs, "warm0-first-call-median-ms")
	b.ReportMetric(warmMs, "warm3-first-call-median-ms")
	b.ReportMetric(coldMs/warmMs, "speedup-x")
	b.Logf("first calls, warm_sandboxes 0: %v; warm_sandboxes 3: %v", coldTook, warmTook)
}
