package integration

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestConsoleJobs: through a real Caddy and container, a job started with execute
// shows in the console's jobs API and on its overview page, and the operator kills it
// from either: the API's DELETE and the page's kill button end its processes in the
// container, job_list then shows it ended, and the console lists it no more.
func TestConsoleJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and the test image")
	}
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Client(ctx)

	type apiJob struct {
		ID, Command, State string
		StartedAt          time.Time `json:"started_at"`
	}
	listed := func() []apiJob {
		t.Helper()
		var out struct{ Jobs []apiJob }
		if code := apiCall(t, s, "GET", "/jobs", &out); code != 200 || out.Jobs == nil {
			t.Fatalf("GET /console/api/jobs: %d %+v", code, out)
		}
		return out.Jobs
	}
	start := func(marker string) string {
		t.Helper()
		st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "sleep " + marker + "; echo never", "wait": 1}))
		if st["running"] != true {
			t.Fatalf("the command did not become a job: %v", st)
		}
		return st["job_id"].(string)
	}
	sleeping := func(marker string) bool {
		return strings.Contains(s.TryExec("ps -o args"), "sleep "+marker)
	}
	// ended checks that job_list shows job id ended and the console lists it no more.
	ended := func(id string) {
		t.Helper()
		jl := testsite.Structured(t, testsite.Call(ctx, t, c, "job_list", nil))
		for _, j := range jl["jobs"].([]any) {
			if j := j.(map[string]any); j["job_id"] == id && (j["state"] != "done" || j["exit_code"] == nil) {
				t.Errorf("job_list after the kill: %v", j)
			}
		}
		for _, j := range listed() {
			if j.ID == id {
				t.Errorf("the console still lists the killed job: %+v", j)
			}
		}
	}

	// Looking never starts the container: with the one the site started with
	// removed, there is none before the next command.
	testenv.WaitFor(t, time.Minute, "the container the site starts with", func() bool {
		info, err := s.Docker.ContainerInspect(ctx, s.Container)
		return err == nil && info.State != nil && info.State.Running
	})
	if err := s.Docker.ContainerRemove(ctx, s.Container, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if js := listed(); len(js) != 0 {
		t.Fatalf("jobs before any command: %+v", js)
	}
	if _, err := s.Docker.ContainerInspect(ctx, s.Container); err == nil {
		t.Fatal("listing the jobs created the sandbox container")
	}

	// The API: listed while it runs, killed by DELETE.
	id := start("3761")
	var found *apiJob
	for _, j := range listed() {
		if j.ID == id {
			found = &j
		}
	}
	if found == nil || found.State != "running" || !strings.Contains(found.Command, "sleep 3761") || time.Since(found.StartedAt) > time.Minute {
		t.Fatalf("the console does not list job %s as running: %+v", id, listed())
	}
	if !sleeping("3761") {
		t.Fatal("the job's sleep does not run in the container")
	}
	if code := apiCall(t, s, "DELETE", "/jobs/"+id, nil); code != 200 {
		t.Fatalf("DELETE /console/api/jobs/%s: %d", id, code)
	}
	testenv.WaitFor(t, 10*time.Second, "the killed job's sleep to end", func() bool { return !sleeping("3761") })
	ended(id)
	if code := apiCall(t, s, "DELETE", "/jobs/"+id, nil); code != 404 {
		t.Errorf("killing an ended job: %d, want 404", code)
	}

	// The page: the overview shows the job with Kill…, which asks first; its button
	// kills it.
	id = start("3762")
	u := newConsoleUser(t, s.URL)
	if resp, _ := u.do("POST", "/console/signin", url.Values{"api_key": {s.Key}}, map[string]string{"Origin": s.URL}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("signing in to the console: %d", resp.StatusCode)
	}
	_, page := u.do("GET", "/console", nil, nil)
	if !strings.Contains(page, "<code>"+id+"</code>") || !strings.Contains(page, "sleep 3762") || !strings.Contains(page, `action=kill_job&amp;id=`+id+`&amp;person=-">Kill…`) {
		t.Fatalf("the overview does not show job %s with a kill button: %.3000s", id, page)
	}
	_, page = u.do("GET", "/console/confirm?action=kill_job&id="+id+"&person=-", nil, nil)
	if !strings.Contains(page, "Kill job "+id+" in the operator&#39;s sandbox?") || !strings.Contains(page, `name="person" value="-"`) || !sleeping("3762") {
		t.Fatalf("the kill confirmation: %.3000s", page)
	}
	resp, _ := u.do("POST", "/console/action", url.Values{"action": {"kill_job"}, "id": {id}, "person": {"-"}, "back": {"overview"}, "csrf": {u.csrf()}}, map[string]string{"Origin": s.URL})
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "done=kill_job") {
		t.Fatalf("the kill button: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	testenv.WaitFor(t, 10*time.Second, "the killed job's sleep to end", func() bool { return !sleeping("3762") })
	ended(id)
	if _, page = u.do("GET", "/console", nil, nil); strings.Contains(page, id) || !strings.Contains(page, "No background jobs are running") {
		t.Errorf("the overview still shows job %s: %.3000s", id, page)
	}
	if es := activity(t, s, "tool=console.kill_job&outcome=ok"); len(es) != 2 {
		t.Errorf("kills in the audit log: %+v", es)
	}
}
