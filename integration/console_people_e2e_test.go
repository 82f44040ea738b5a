package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/browsertest"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestConsolePeopleInBrowser: with two people and the operator, headless Chromium signs
// in to the console, whose overview lists the three sandboxes; stopping bob's (through
// its confirmation) stops his container, and the activity page filtered to alice shows
// her calls only. The overview is saved under testdata/artifacts/.
func TestConsolePeopleInBrowser(t *testing.T) {
	p := startPeopleSite(t, []string{"alice", "bob"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for person, who := range map[string]string{"": "operator", "alice": "alice", "bob": "bob"} {
		cmd := "echo " + who + "-was-here"
		if st := testsite.Structured(t, testsite.Call(ctx, t, p.client(ctx, person), "execute", map[string]any{"command": cmd})); st["exit_code"] != float64(0) {
			t.Fatalf("%q: %v", person, st)
		}
	}

	b := browsertest.New(t, 1280, 900, 2*time.Minute)
	text := func() string {
		s, _ := chromedp.Run(b, chromedp.Evaluate[string]("document.body.innerText"))
		return s
	}
	if err := chromedp.Do(b, chromedp.Navigate(p.URL+"/console/signin"), chromedp.SendKeys(chromedp.ID("api_key"), p.Key)); err != nil {
		t.Fatal(err)
	}
	if resp, err := chromedp.RunResponse(b, chromedp.Submit(chromedp.ID("api_key"))); err != nil || resp.Status != 200 {
		t.Fatalf("signing in: %v %v: %.400s", resp, err, text())
	}
	rows, err := chromedp.Run(b, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#sandboxes tbody tr")].map(r => r.dataset.person + " " + r.querySelector(".state").textContent)`))
	if err != nil || strings.Join(rows, ",") != "- running,alice running,bob running" {
		t.Fatalf("sandboxes table: %q %v", rows, err)
	}

	// Stop… asks first; its button stops bob's container and no other.
	if _, err := chromedp.RunResponse(b, chromedp.Click(chromedp.CSS(`tr[data-person="bob"] a.danger[href*="sandbox_stop"]`))); err != nil {
		t.Fatal(err)
	}
	if s := text(); !strings.Contains(s, "Stop bob's sandbox?") {
		t.Fatalf("confirmation: %.400s", s)
	}
	if _, err := chromedp.RunResponse(b, chromedp.Click(chromedp.CSS(`main form.inline button`))); err != nil {
		t.Fatal(err)
	}
	if s := text(); !strings.Contains(s, "The sandbox was stopped") {
		t.Fatalf("after stopping: %.600s", s)
	}
	for person, running := range map[string]bool{"": true, "alice": true, "bob": false} {
		info, err := p.Docker.ContainerInspect(ctx, p.containerOf(person))
		if err != nil || info.State.Running != running {
			t.Errorf("%q's container: running %v, want %v (%v)", person, info.State != nil && info.State.Running, running, err)
		}
	}
	if state, _ := chromedp.Run(b, chromedp.Evaluate[string](`document.querySelector('tr[data-person="bob"] .state').textContent`)); state != "stopped (operator)" {
		t.Errorf("bob's state on the page: %q", state)
	}
	browsertest.Screenshot(t, b, "console-people-overview.png")

	// bob's name opens his view: his newest calls, the operator's Stop among them, and
	// nobody else's.
	if _, err := chromedp.RunResponse(b, chromedp.Click(chromedp.CSS(`tr[data-person="bob"] a[href="/console/?person=bob"]`))); err != nil {
		t.Fatal(err)
	}
	calls, err := chromedp.Run(b, chromedp.Evaluate[string](`(s => s ? s.innerText : "")(document.querySelector("#calls"))`))
	if err != nil || !strings.Contains(calls, "bob-was-here") || !strings.Contains(calls, "console.sandbox_stop") || strings.Contains(calls, "alice-was-here") {
		t.Fatalf("bob's view, recent activity: %q %v", calls, err)
	}
	browsertest.Screenshot(t, b, "console-people-person.png")

	// The activity page, filtered to alice with its select.
	if err := chromedp.Do(b, chromedp.Navigate(p.URL+"/console/activity"), chromedp.SetValue(chromedp.CSS(`select[name=person]`), "alice")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.RunResponse(b, chromedp.Submit(chromedp.CSS(`select[name=person]`))); err != nil {
		t.Fatal(err)
	}
	s := text()
	if !strings.Contains(s, "alice-was-here") || strings.Contains(s, "bob-was-here") || strings.Contains(s, "operator-was-here") {
		t.Fatalf("activity filtered to alice: %.1200s", s)
	}
	browsertest.Screenshot(t, b, "console-people-activity.png")

	// bob leaves the configuration: his row says so and offers Stop… and Delete… only;
	// Delete asks what becomes of his volume, and keeping it removes the container alone.
	bobBox := p.containerOf("bob")
	p.Load(p.options([]string{"alice"}))
	if err := chromedp.Do(b, chromedp.Navigate(p.URL+"/console")); err != nil {
		t.Fatal(err)
	}
	row, err := chromedp.Run(b, chromedp.Evaluate[string](`(r => r ? r.dataset.removed + " " + r.innerText : "") (document.querySelector('tr[data-person="bob"]'))`))
	if err != nil || !strings.HasPrefix(row, "true ") || !strings.Contains(row, "removed from the configuration") || strings.Contains(row, "Restart") || !strings.Contains(row, "Delete") {
		t.Fatalf("bob's row after his removal: %q %v", row, err)
	}
	browsertest.Screenshot(t, b, "console-people-removed.png")
	if _, err := chromedp.RunResponse(b, chromedp.Click(chromedp.CSS(`tr[data-person="bob"] a[href*="sandbox_delete"]`))); err != nil {
		t.Fatal(err)
	}
	choices, err := chromedp.Run(b, chromedp.Evaluate[[]string](`[...document.querySelectorAll("main button[data-volume]")].map(b => b.dataset.volume + ": " + b.textContent)`))
	if err != nil || len(choices) != 2 {
		t.Fatalf("delete confirmation: %q %v: %.600s", choices, err, text())
	}
	browsertest.Screenshot(t, b, "console-confirm-delete.png")
	if _, err := chromedp.RunResponse(b, chromedp.Click(chromedp.CSS(`main button[data-volume="keep"]`))); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Docker.ContainerInspect(ctx, bobBox); err == nil {
		t.Errorf("bob's container %s is still there after Delete", bobBox)
	}
	if _, err := p.Docker.VolumeInspect(ctx, p.Volume+"-bob"); err != nil {
		t.Errorf("bob's volume went with \"keep the volume\": %v", err)
	}
}
