package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// Through a real Caddy with two people: alice's credential reaches the upstream from her
// sandbox and not from bob's, the host only her block allows is refused to bob, and a
// reload that removes her block applies to her running sandbox.
func TestPersonEgressThroughCaddy(t *testing.T) {
	up := newEgressUpstream(t)
	secret := "alice-egress-secret-" + testenv.RandomHex(12)
	t.Setenv("EGRESS_TEST_SECRET", secret)
	s := testsite.New(t)
	keys := map[string]string{"alice": "alice-key-" + testenv.RandomHex(16), "bob": "bob-key-" + testenv.RandomHex(16)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for name := range keys {
			_ = s.Docker.ContainerRemove(ctx, s.Container+"-"+name, container.RemoveOptions{Force: true})
			_ = s.Docker.VolumeRemove(ctx, s.Volume+"-"+name, true)
		}
	})
	site := fmt.Sprintf(`egress {
			allow allowed.test:%[1]s
			host allowed.test 127.0.0.1
			host refused.test 127.0.0.1
		}`, up.port)
	s.Start(testsite.Options{Address: "http://:%d", Directive: []string{site, fmt.Sprintf(`person alice %[2]s {
			egress {
				allow refused.test:%[1]s
				credential http://allowed.test:%[1]s/api header X-Api-Key {env.EGRESS_TEST_SECRET}
			}
		}`, up.port, keys["alice"]), "person bob " + keys["bob"]}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(person, cmd string) map[string]any {
		t.Helper()
		c := s.ClientAs(ctx, s.URL, mcp.LATEST_PROTOCOL_VERSION, keys[person])
		defer c.Close()
		testsite.Call(ctx, t, c, "execute", map[string]any{"command": `for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && break; sleep 0.1; done`})
		return testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": cmd}))
	}
	get := func(host string) string { return "wget -q -O - http://" + host + ":" + up.port + "/api/hello" }
	for _, person := range []string{"alice", "bob"} {
		if out := run(person, get("allowed.test")); out["exit_code"] != 0.0 {
			t.Fatalf("%s to the site's host: %v", person, out)
		}
	}
	reqs := up.requests()
	if len(reqs) != 2 || reqs[0].Header.Get("X-Api-Key") != secret || reqs[1].Header.Get("X-Api-Key") != "" {
		t.Fatalf("the upstream got %+v", reqs)
	}
	if out := run("alice", get("refused.test")); out["exit_code"] != 0.0 {
		t.Fatalf("alice to her own host: %v", out)
	}
	if out := run("bob", get("refused.test")); out["exit_code"] == 0.0 || !strings.Contains(out["note"].(string), "blocked: refused.test") {
		t.Fatalf("bob to alice's host: %v", out)
	}
	if n := len(up.requests()); n != 3 {
		t.Fatalf("the upstream got %d requests, want 3", n)
	}
	// A reload without alice's block applies to her running sandbox: no credential, and
	// her host is refused.
	s.Load(testsite.Options{Address: "http://:%d", Directive: []string{site, "person alice " + keys["alice"], "person bob " + keys["bob"]}})
	if out := run("alice", get("allowed.test")); out["exit_code"] != 0.0 {
		t.Fatalf("alice after the reload: %v", out)
	}
	if reqs := up.requests(); len(reqs) != 4 || reqs[3].Header.Get("X-Api-Key") != "" {
		t.Fatalf("after the reload the upstream got %+v", reqs)
	}
	if out := run("alice", get("refused.test")); out["exit_code"] == 0.0 || !strings.Contains(out["note"].(string), "blocked: refused.test") {
		t.Fatalf("alice to her former host after the reload: %v", out)
	}
}

// Through a real Caddy with two people: a host refused to alice's sandbox is counted
// under her name in the refusal metric and listed with her name by GET
// /console/api/egress; bob, who asked for nothing refused, has no refusal.
func TestEgressRefusalsNamePersonThroughCaddy(t *testing.T) {
	up := newEgressUpstream(t)
	refused := "refused-" + testenv.RandomHex(4) + ".test"
	p := startPeopleSite(t, []string{"alice", "bob"}, fmt.Sprintf(`egress {
			allow allowed.test:%[1]s
			host allowed.test 127.0.0.1
			host %[2]s 127.0.0.1
		}`, up.port, refused))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(person, cmd string) map[string]any {
		t.Helper()
		c := p.client(ctx, person)
		defer c.Close()
		testsite.Call(ctx, t, c, "execute", map[string]any{"command": `for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && break; sleep 0.1; done`})
		return testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": cmd}))
	}
	if out := run("alice", "wget -q -O - http://"+refused+":"+up.port+"/x"); out["exit_code"] == 0.0 {
		t.Fatalf("alice reached a refused host: %v", out)
	}
	if out := run("bob", "wget -q -O - http://allowed.test:"+up.port+"/x"); out["exit_code"] != 0.0 {
		t.Fatalf("bob to an allowed host: %v", out)
	}

	metrics := testsite.Metrics(t, nil, p.URL)
	if want := `caddy_mcp_sandbox_egress_refused_total{host="` + refused + `",person="alice"} 1`; !strings.Contains(metrics, want) {
		t.Fatalf("the metric lacks %s:\n%s", want, metrics)
	}

	resp, body := p.request(t, "GET", p.URL+"/console/api/egress", p.Key, nil)
	var got struct {
		Refusals  []console.EgressRefusal `json:"refusals"`
		Approvals []any                   `json:"approvals"`
	}
	if err := json.Unmarshal([]byte(body), &got); resp.StatusCode != 200 || err != nil {
		t.Fatalf("GET /console/api/egress: %d %s", resp.StatusCode, body)
	}
	var mine []console.EgressRefusal
	for _, r := range got.Refusals {
		if r.Host == refused {
			mine = append(mine, r)
		}
		if r.Person == "bob" {
			t.Errorf("bob has a refusal: %+v", r)
		}
	}
	if len(mine) != 1 || mine[0].Person != "alice" || mine[0].Count != 1 || time.Since(mine[0].LastAt) > 3*time.Minute || mine[0].Reason == "" {
		t.Fatalf("refusals of %s: %+v (all: %s)", refused, mine, body)
	}
	resp, body = p.request(t, "GET", p.URL+"/console/api/egress?person=bob", p.Key, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `"refusals": []`) {
		t.Fatalf("bob's refusals: %d %s", resp.StatusCode, body)
	}

	// A reload keeps the list, though the new configuration has not placed alice's
	// sandbox yet; her next refusal adds to the same entry.
	aliceRefusals := func() []console.EgressRefusal {
		t.Helper()
		resp, body := p.request(t, "GET", p.URL+"/console/api/egress?person=alice", p.Key, nil)
		var got struct {
			Refusals []console.EgressRefusal `json:"refusals"`
		}
		if err := json.Unmarshal([]byte(body), &got); resp.StatusCode != 200 || err != nil {
			t.Fatalf("GET /console/api/egress?person=alice: %d %s", resp.StatusCode, body)
		}
		var out []console.EgressRefusal
		for _, r := range got.Refusals {
			if r.Host == refused {
				out = append(out, r)
			}
		}
		return out
	}
	p.Load(p.options([]string{"alice", "bob"}))
	if got := aliceRefusals(); len(got) != 1 || got[0].Person != "alice" || got[0].Count != 1 || !got[0].LastAt.Equal(mine[0].LastAt) {
		t.Fatalf("alice's refusals after a reload: %+v, before %+v", got, mine)
	}
	if out := run("alice", "wget -q -O - http://"+refused+":"+up.port+"/x"); out["exit_code"] == 0.0 {
		t.Fatalf("alice reached a refused host after the reload: %v", out)
	}
	if got := aliceRefusals(); len(got) != 1 || got[0].Count != 2 {
		t.Fatalf("alice's refusals after a reload and one more: %+v", got)
	}
}
