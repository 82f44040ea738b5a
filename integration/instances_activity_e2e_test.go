package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// TestActivityAcrossInstances: two Caddy processes with the same site and one shared
// storage: a command run through one shows in the other's console (its activity log)
// within seconds, and the other way round, with no restart.
func TestActivityAcrossInstances(t *testing.T) {
	site, a, b := startPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	type activity struct {
		Entries []struct{ Tool, Args, Outcome string }
	}
	shows := func(in *instance, marker string) bool {
		var got activity
		consoleGet(t, in.http, in.url, site.Key, "/console/api/activity?limit=0", &got)
		for _, e := range got.Entries {
			if e.Tool == "execute" && strings.Contains(e.Args, marker) {
				return true
			}
		}
		return false
	}
	for _, hop := range []struct{ from, to *instance }{{a, b}, {b, a}} {
		marker := "activity-of-" + hop.from.name + "-" + testenv.RandomHex(4)
		if _, err := hop.from.execute(ctx, site.Key, "echo "+marker, 30); err != nil {
			t.Fatal(err)
		}
		if !shows(hop.from, marker) {
			t.Errorf("%s's console does not show the command it ran", hop.from.name)
		}
		begin := time.Now()
		testenv.WaitFor(t, 15*time.Second, hop.to.name+"'s console to show "+hop.from.name+"'s command", func() bool { return shows(hop.to, marker) })
		t.Logf("a command run through %s showed in %s's console after %v", hop.from.name, hop.to.name, time.Since(begin).Round(10*time.Millisecond))
	}
}
