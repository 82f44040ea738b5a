package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestOfflineAptFailsAtOnce: in a realistic image with no network, apt-get update and
// install fail within seconds (apt's retries, with their growing delays, took 7 to 15 s
// to give up), with the note that the sandbox is offline; pip is told the same.
func TestOfflineAptFailsAtOnce(t *testing.T) {
	s := testsite.Start(t, testsite.Options{Image: debianImage})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"}) // the container is made
	for _, command := range []string{"apt-get update", "apt-get install -y cowsay"} {
		start := time.Now()
		res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": command})
		took := time.Since(start)
		text := testsite.ResultText(res)
		t.Logf("%s: %v", command, took)
		if took > 5*time.Second || !strings.Contains(text, "[note: the sandbox is offline") {
			t.Errorf("%s took %v: %q", command, took, text)
		}
	}
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "cat /etc/apt/apt.conf.d/99mcp-sandbox-offline /etc/pip.conf"})
	if text := testsite.ResultText(res); !strings.Contains(text, `Acquire::Retries "0";`) || !strings.Contains(text, "retries = 0") {
		t.Errorf("offline settings: %q", text)
	}
}
