package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// Two Caddy instances over one storage behind a third that balances them round robin,
// egress `ask` on: the official TypeScript SDK (2025-11-25, one session) runs commands
// that reach unlisted hosts, and answers each question. The session was initialized on
// one instance only, yet both ask it (what it declared rides in its session id). Each
// answer is sent either at once or after one request of the client's own through the
// balancer, so that it lands on the instance whose call asked or on the other; the
// instances' logs show which answers were handed over through the storage. Allow once
// lets the command reach the host and deny refuses it, whichever instance the answer
// reached; denied hosts are never reached.
func TestElicitationAcrossInstances(t *testing.T) {
	up := newEgressUpstream(t)
	site, a, b := startPair(t, askDirective()...)
	c := startBalancer(t, caddyBinary(t), t.TempDir(), testsite.FreePort(t), a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Each instance's proxy listens in the sandbox once it has run a command there.
	for _, in := range []*instance{a, b} {
		if _, err := in.execute(ctx, site.Key, waitProxy, 30); err != nil {
			t.Fatal(err)
		}
	}
	get := func(host string) string { return "wget -q -O - http://" + host + ":" + up.port + "/hi" }
	hello := "hello from once.test:" + up.port + "/hi\n"

	// Six allow once, then two deny; every other answer takes a detour.
	var answers []map[string]string
	var commands []string
	for i := range 8 {
		decision, host := "allow_once", "once.test"
		if i >= 6 {
			decision, host = "deny", "other.test"
		}
		answers = append(answers, map[string]string{"action": "accept", "decision": decision, "detour": strconv.Itoa(i % 2)})
		commands = append(commands, get(host))
	}
	began := time.Now()
	res := runTSElicit(t, &testsite.Site{T: t, URL: c.url, Key: site.Key}, answers, commands...)
	t.Logf("8 commands, each asked about and answered, through the balancer in %v", time.Since(began).Round(time.Millisecond))
	if len(res.Questions) != 8 {
		t.Fatalf("%d questions, want 8: %+v", len(res.Questions), res.Questions)
	}

	handed := replyLog(t, "handed a client's reply to the instance that asked", a, b)
	delivered := replyLog(t, "delivered a client's reply handed over by another instance", a, b)
	var crossed, same [2]int              // by decision: allow once, deny
	var afterCrossed, afterSame []float64 // ms from the answer to the call's result, allow once
	var handedIn []float64                // ms from the storage to the request, by the asking instance's log
	for i, q := range res.Questions {
		r := res.Results[i]
		key, ok := replyKey(q.ID)
		if !ok {
			t.Fatalf("question %d came with id %v, not one that names an instance", i+1, q.ID)
		}
		kind := 0
		if i >= 6 {
			kind = 1
		}
		to, wasHanded := handed[key]
		got, wasDelivered := delivered[key]
		after := r.End - q.AnsweredAt
		switch {
		case wasHanded != wasDelivered:
			t.Errorf("question %d (%s): handed over %v, delivered %v", i+1, key, wasHanded, wasDelivered)
		case wasHanded:
			crossed[kind]++
			if got.entry["delivered"] != true || got.in == to.in {
				t.Errorf("question %d: handed over by %s, delivered by %s: %v", i+1, to.in, got.in, got.entry)
			}
			if d, ok := got.entry["handed_over_in"].(float64); ok {
				handedIn = append(handedIn, d*1000)
			}
			if kind == 0 {
				afterCrossed = append(afterCrossed, after)
			}
		default:
			same[kind]++
			if kind == 0 {
				afterSame = append(afterSame, after)
			}
		}
		t.Logf("question %d (detour %s): asked by the instance of inbox %s; answer handed over: %v (by %s); result %.0f ms after the answer",
			i+1, answers[i]["detour"], strings.SplitN(key, "-", 2)[0], wasHanded, to.in, after)
		if !strings.Contains(q.Message, "once.test") && !strings.Contains(q.Message, "other.test") {
			t.Errorf("question %d: %q", i+1, q.Message)
		}
		// A deny's note names the host when the call's own instance refused the
		// connection; the proxy of the other may have taken it.
		switch {
		case kind == 0 && (r.Structured["exit_code"] != 0.0 || r.Structured["stdout"] != hello):
			t.Errorf("allow once #%d (handed over %v): %s %s", i+1, wasHanded, r.Text, r.Error)
		case kind == 1 && (r.Structured == nil || r.Structured["exit_code"] == 0.0 || r.Structured["stdout"] != ""):
			t.Errorf("deny #%d (handed over %v): %s %s", i+1, wasHanded, r.Text, r.Error)
		}
	}
	t.Logf("answers handed over between instances: %d allow once, %d deny; answered on the instance that asked: %d allow once, %d deny",
		crossed[0], crossed[1], same[0], same[1])
	t.Logf("allow once, from the answer to the call's result: median %.0f ms handed over (%v), %.0f ms on the same instance (%v); hand-over, storage to the waiting request: median %.0f ms (%v)",
		medianOr0(afterCrossed), afterCrossed, medianOr0(afterSame), afterSame, medianOr0(handedIn), handedIn)
	if crossed[0] == 0 || crossed[1] == 0 || same[0] == 0 || same[1] == 0 {
		t.Errorf("want answers of both kinds both handed over and not: handed over %v, not %v", crossed, same)
	}
	reqs := up.requests()
	for _, r := range reqs {
		if !strings.HasPrefix(r.Host, "once.test") {
			t.Errorf("a denied host was reached: %s", r.Host)
		}
	}
	if len(reqs) != 6 {
		t.Errorf("the host got %d requests, want 6 (one per allow once)", len(reqs))
	}
}

// replyIDForm is the id an instance gives its request to a client: the instance's
// inbox and its number of the request come first.
var replyIDForm = regexp.MustCompile(`^srv-([0-9a-f]{16})-([0-9]+)-`)

// replyKey is "inbox-number" of a request's id.
func replyKey(id any) (string, bool) {
	s, _ := id.(string)
	m := replyIDForm.FindStringSubmatch(s)
	if m == nil {
		return "", false
	}
	return m[1] + "-" + m[2], true
}

// medianOr0 is the median of xs, 0 for none.
func medianOr0(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return median(xs)
}

// replyLine is a log entry about a reply, and the instance that wrote it.
type replyLine struct {
	in    string
	entry map[string]any
}

// replyLog is the entries of the instances' logs with message msg, by the inbox-number
// of the request they name ("to" when they name the inbox it went to, else "inbox").
func replyLog(t *testing.T, msg string, ins ...*instance) map[string]replyLine {
	t.Helper()
	out := map[string]replyLine{}
	for _, in := range ins {
		b, err := os.ReadFile(in.log)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			var e map[string]any
			if !strings.Contains(line, msg) || json.Unmarshal([]byte(line), &e) != nil || e["msg"] != msg {
				continue
			}
			inbox, _ := e["to"].(string)
			if inbox == "" {
				inbox, _ = e["inbox"].(string)
			}
			n, _ := e["request"].(float64)
			out[fmt.Sprintf("%s-%d", inbox, int64(n))] = replyLine{in: in.name, entry: e}
		}
	}
	return out
}
