package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// egressStopRounds is how many times each kind of stop is repeated: the agent's
// fallback after a stop was a race lost every time, but a race.
const egressStopRounds = 5

// egressSteady is a little more than how long a proxy listener must have lasted for
// the gateway to listen again at once when it ends (egress.steady).
const egressSteady = 11 * time.Second

// TestEgressReachesAfterStops: through a real Caddy, after an idle stop and after the
// console's Stop and Start, each repeated, and after its Restart and Recreate, the
// first command reaches an allowed host through the proxy, and nothing in the log says
// the agent fell back or the sandbox went offline: a container being stopped is no
// reason for either. Before, the proxy's listener started an agent in the container
// being stopped and took its failure for an agent that cannot run: 5 minutes offline.
func TestEgressReachesAfterStops(t *testing.T) {
	up := newEgressUpstream(t)
	t.Setenv("EGRESS_TEST_SECRET", "unused-"+testenv.RandomHex(8))
	p := startPeopleSite(t, []string{"alice"}, append(egressDirective(up.port, "allowed.test:"+up.port), "idle_stop 12s")...)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	get := func(person, tag string) {
		t.Helper()
		c := p.client(ctx, person)
		defer c.Close()
		// One try: no loop waiting for the proxy.
		st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{
			"command": "wget -q -O - http://allowed.test:" + up.port + "/" + tag}))
		if st["stdout"] != "hello from allowed.test:"+up.port+"/"+tag+"\n" {
			t.Fatalf("%q, %s: the first command did not reach the allowed host: %v", person, tag, st)
		}
		if desc := executeDescription(ctx, p.Site, c); strings.Contains(desc, "offline") {
			t.Fatalf("%q, %s: the model is told the sandbox is offline: %q", person, tag, desc)
		}
	}
	noFallback := func(when string) {
		t.Helper()
		log, _ := os.ReadFile(filepath.Join(p.Storage, "caddy.log"))
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, "cannot run in this container") || strings.Contains(line, "cannot listen in the sandbox") {
				t.Fatalf("%s: %s", when, line)
			}
		}
	}
	operator := p.containerOf("")
	for i := range egressStopRounds {
		get("", fmt.Sprintf("before-idle-stop-%d", i))
		get("alice", fmt.Sprintf("before-stop-%d", i))
		// The listeners have lasted long enough for the proxy to listen again at once
		// when their channel ends.
		time.Sleep(egressSteady)

		// The console's Stop, then its Start; the next command goes through the proxy.
		if code, body := consoleAct(t, p.Site, "/sandboxes/alice/stop"); code != 200 {
			t.Fatalf("console stop: %d %s", code, body)
		}
		time.Sleep(500 * time.Millisecond) // what follows the stop
		if code, body := consoleAct(t, p.Site, "/sandboxes/alice/start"); code != 200 {
			t.Fatalf("console start: %d %s", code, body)
		}
		get("alice", fmt.Sprintf("after-start-%d", i))
		noFallback(fmt.Sprintf("console stop %d", i))

		// An idle stop; the next call starts the container again.
		testenv.WaitFor(t, 30*time.Second, "the operator's idle sandbox to stop", func() bool { return !testsite.ContainerRunning(t, p.Docker, operator) })
		time.Sleep(500 * time.Millisecond) // what follows the stop
		get("", fmt.Sprintf("after-idle-stop-%d", i))
		noFallback(fmt.Sprintf("idle stop %d", i))
	}
	// The console's Restart and Recreate: the same.
	for _, act := range []string{"restart", "recreate"} {
		get("alice", "before-"+act)
		time.Sleep(egressSteady)
		if code, body := consoleAct(t, p.Site, "/sandboxes/alice/"+act); code != 200 {
			t.Fatalf("console %s: %d %s", act, code, body)
		}
		get("alice", "after-"+act)
		noFallback("console " + act)
	}
}
