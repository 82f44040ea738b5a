package console

import (
	"context"
	"encoding/json"
	"html"
	"net/http/httptest"
	"strings"
	"testing"
)

// usageSandbox is a running sandbox whose engine gives usage figures or not.
type usageSandbox struct {
	agentSandbox
	noUsage bool
}

func (s usageSandbox) Status(context.Context) (SandboxStatus, error) {
	return SandboxStatus{Container: "box", State: "running", Exists: true, CPULimit: 2, MemoryLimit: 1 << 30,
		PIDsLimit: 512, DiskUsed: 4096, NoUsage: s.noUsage}, nil
}

// usageSandboxes lists one sandbox without usage figures (alice's) and one with.
type usageSandboxes struct{ fakeSandboxes }

func (*usageSandboxes) List(context.Context) ([]SandboxInfo, error) {
	return []SandboxInfo{{Person: "alice", State: "running", MemoryLimit: 1 << 30, NoUsage: true},
		{Person: "bob", State: "running", CPU: 0.25, Memory: 3 << 20, MemoryLimit: 1 << 30}}, nil
}

// TestNoUsage: on an engine without usage figures (a Kubernetes cluster without the
// metrics API) the API leaves out cpu, memory and pids and says why, and the pages say
// it instead of showing zeros; with figures, both show them as before.
func TestNoUsage(t *testing.T) {
	text := NoUsageText
	for _, noUsage := range []bool{true, false} {
		c := newTestConsole(t, fullLog(t))
		c.opts.Sandbox = usageSandbox{noUsage: noUsage}
		req := httptest.NewRequest("GET", "http://console.test/console/api/sandbox", nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); rec.Code != 200 || err != nil {
			t.Fatalf("API: %d %v", rec.Code, err)
		}
		for _, k := range []string{"cpu", "memory_bytes", "pids"} {
			if _, ok := m[k]; ok == noUsage {
				t.Errorf("NoUsage %v: API has %s: %v", noUsage, k, ok)
			}
		}
		if got, _ := m["no_usage"].(string); (got == text) != noUsage || (!noUsage && got != "") {
			t.Errorf("NoUsage %v: no_usage %q", noUsage, got)
		}
		if m["cpu_limit"] != 2.0 || m["memory_limit_bytes"] != float64(1<<30) || m["disk_used_bytes"] != 4096.0 || m["container"] != "box" {
			t.Errorf("NoUsage %v: the rest of the status changed: %v", noUsage, m)
		}

		req = httptest.NewRequest("GET", "http://console.test/console", nil)
		req.AddCookie(signedIn(t, c))
		rec = httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		page := html.UnescapeString(rec.Body.String())
		if got := strings.Contains(page, text); got != noUsage {
			t.Errorf("NoUsage %v: the overview says %q: %v", noUsage, text, got)
		}
		if got := strings.Contains(page, `<span class="label">CPU</span><meter`); got == noUsage {
			t.Errorf("NoUsage %v: the overview has a CPU meter: %v", noUsage, got)
		}
		if noUsage && !strings.Contains(page, text+"; limit 2.00 CPUs; memory limit 1.0 GiB; at most 512 processes") {
			t.Errorf("the overview does not give the limits after %q:\n%s", text, page)
		}
	}

	// The list of sandboxes (with people).
	c := newTestConsole(t, fullLog(t))
	c.opts.Sandboxes = &usageSandboxes{}
	req := httptest.NewRequest("GET", "http://console.test/console/api/sandboxes", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	var m struct{ Sandboxes []map[string]any }
	if err := json.Unmarshal(rec.Body.Bytes(), &m); rec.Code != 200 || err != nil || len(m.Sandboxes) != 2 {
		t.Fatalf("API list: %d %v %s", rec.Code, err, rec.Body)
	}
	alice, bob := m.Sandboxes[0], m.Sandboxes[1]
	_, cpu := alice["cpu"]
	_, mem := alice["memory"]
	if cpu || mem || alice["no_usage"] != text || alice["memory_limit"] != float64(1<<30) || alice["person"] != "alice" {
		t.Errorf("alice (no usage figures): %v", alice)
	}
	if _, ok := bob["no_usage"]; ok || bob["cpu"] != 0.25 || bob["memory"] != float64(3<<20) {
		t.Errorf("bob (usage figures): %v", bob)
	}
	req = httptest.NewRequest("GET", "http://console.test/console", nil)
	req.AddCookie(signedIn(t, c))
	rec = httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	page := html.UnescapeString(rec.Body.String())
	row := func(person string) string {
		i := strings.Index(page, `<tr data-person="`+person+`"`)
		if i < 0 {
			t.Fatalf("no row of %s:\n%s", person, page)
		}
		end := strings.Index(page[i:], "</tr>")
		return page[i : i+end]
	}
	if r := row("alice"); !strings.Contains(r, text+"; memory limit 1.0 GiB") || strings.Contains(r, `<td class="num">0.00</td>`) {
		t.Errorf("alice's row: %s", r)
	}
	if r := row("bob"); strings.Contains(r, text) || !strings.Contains(r, `<td class="num">0.25</td>`) {
		t.Errorf("bob's row: %s", r)
	}
}
