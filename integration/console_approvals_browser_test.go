package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/docker/docker/api/types/container"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/browsertest"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestConsoleApprovalsInBrowser: through a real Caddy with two people whose egress
// asks, bob answers "allow always" for a host; headless Chromium signs in to the
// console, whose overview lists the approval (bob, the host and port, when, the
// answer) and whose sandboxes table shows bob's agent running and his proxy listening
// (alice's, never used, stopped); its Revoke button revokes it (the host is asked
// about again), and the activity log and Caddy's log name bob and the host. The
// overview is saved under testdata/artifacts/.
func TestConsoleApprovalsInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and Chromium")
	}
	up := newEgressUpstream(t)
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
	s.Start(testsite.Options{Address: "http://:%d", Directive: []string{"egress {\n\t\t\task\n\t\t}",
		fmt.Sprintf("person bob %s {\n\t\t\tegress {\n\t\t\t\thost always.test 127.0.0.1\n\t\t\t}\n\t\t}", keys["bob"]),
		"person alice " + keys["alice"]}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var asked atomic.Int32
	bob, _ := elicitClientAs(ctx, t, s, keys["bob"], mcp.ProtocolVersion20251125, func(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
		asked.Add(1)
		return accept("allow_always"), nil
	})
	get := "wget -q -O - http://always.test:" + up.port + "/hi"
	testsite.Call(ctx, t, bob, "execute", map[string]any{"command": waitProxy})
	if st := testsite.Structured(t, testsite.Call(ctx, t, bob, "execute", map[string]any{"command": get})); st["exit_code"] != 0.0 || asked.Load() != 1 {
		t.Fatalf("bob's allow always (asked %d): %v", asked.Load(), st)
	}
	api := getEgressAPI(t, s)
	if len(api.Approvals) != 1 || api.Approvals[0].Person != "bob" || api.Approvals[0].Host != "always.test" || api.Approvals[0].Answer != console.AnswerAllowAlways {
		t.Fatalf("approvals: %+v", api.Approvals)
	}

	// The sandboxes API: whose commands go through the agent, and each proxy's state.
	req, _ := http.NewRequest("GET", s.URL+"/console/api/sandboxes", nil)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var boxes struct {
		Sandboxes []console.SandboxInfo `json:"sandboxes"`
	}
	err = json.NewDecoder(resp.Body).Decode(&boxes)
	resp.Body.Close()
	if err != nil || len(boxes.Sandboxes) != 3 {
		t.Fatalf("sandboxes: %v %+v", err, boxes)
	}
	for _, b := range boxes.Sandboxes[1:] { // the operator's runs or not, as the site started it
		want := map[string]string{"bob": console.EgressListening, "alice": console.EgressStopped}[b.Person]
		if b.Egress != want || b.Agent.Running != (b.Person == "bob") {
			t.Errorf("%q's sandbox: agent %+v, egress %q, want running %v and %q", b.Person, b.Agent, b.Egress, b.Person == "bob", want)
		}
	}

	b := browsertest.New(t, 1280, 1000, 2*time.Minute)
	text := func() string {
		s, _ := chromedp.Run(b, chromedp.Evaluate[string]("document.body.innerText"))
		return s
	}
	if err := chromedp.Do(b, chromedp.Navigate(s.URL+"/console/signin"), chromedp.SendKeys(chromedp.ID("api_key"), s.Key)); err != nil {
		t.Fatal(err)
	}
	if resp, err := chromedp.RunResponse(b, chromedp.Submit(chromedp.ID("api_key"))); err != nil || resp.Status != 200 {
		t.Fatalf("signing in: %v %v: %.400s", resp, err, text())
	}
	rows, err := chromedp.Run(b, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#approvals tbody tr")].map(r => [...r.cells].slice(0, 4).map(c => c.textContent).join("|"))`))
	if want := "bob|always.test:" + up.port + "|"; err != nil || len(rows) != 1 || !strings.HasPrefix(rows[0], want) || !strings.HasSuffix(rows[0], "ago|allow always") {
		t.Fatalf("approvals table: %q %v: %.1500s", rows, err, text())
	}
	channel, err := chromedp.Run(b, chromedp.Evaluate[string](`document.querySelector('#sandboxes tr[data-person="bob"] .channel').innerText`))
	if err != nil || !strings.Contains(channel, "agent running") || !strings.Contains(channel, "egress listening") {
		t.Errorf("bob's channel on the page: %q %v", channel, err)
	}
	browsertest.Screenshot(t, b, "console-approvals-overview.png")

	if _, err := chromedp.RunResponse(b, chromedp.Click(chromedp.CSS(`#approvals tr[data-approval] button`))); err != nil {
		t.Fatal(err)
	}
	if page := text(); !strings.Contains(page, "The egress approval was revoked") || !strings.Contains(page, "No host is allowed always") {
		t.Fatalf("after Revoke: %.1500s", page)
	}
	if api := getEgressAPI(t, s); len(api.Approvals) != 0 {
		t.Fatalf("approvals after Revoke: %+v", api.Approvals)
	}
	// The host is asked about again.
	testsite.Call(ctx, t, bob, "execute", map[string]any{"command": get})
	if n := asked.Load(); n != 2 {
		t.Errorf("after revoking, bob was asked %d times in all, want 2", n)
	}
	req, _ = http.NewRequest("GET", s.URL+"/console/api/activity?tool=console.revoke_egress_approval", nil)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var act struct {
		Entries []struct {
			Client, Args, Outcome string
		} `json:"entries"`
	}
	err = json.NewDecoder(resp.Body).Decode(&act)
	resp.Body.Close()
	want := fmt.Sprintf(`{"id":%q,"person":"bob","host":"always.test","port":%s}`, api.Approvals[0].ID, up.port)
	if err != nil || len(act.Entries) != 1 || act.Entries[0].Args != want || act.Entries[0].Client != "console" || act.Entries[0].Outcome != "ok" {
		t.Fatalf("activity log of the revocation: %v %+v, want args %s", err, act.Entries, want)
	}
	if l, _ := os.ReadFile(filepath.Join(s.Storage, "caddy.log")); !strings.Contains(string(l), `"msg":"egress approval revoked"`) || !strings.Contains(string(l), `"person":"bob","host":"always.test"`) {
		t.Errorf("Caddy's log lacks the revocation with person and host")
	}
}
