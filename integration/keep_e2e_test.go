package integration

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/checkpoint"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// countingJob counts in /tmp/count every 0.2 s, forever. Each number is written aside
// and renamed into place, so a reader never meets the file between its truncation and
// its write (a save can fall in that gap, and a loaded machine can stretch it).
const countingJob = "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done"

// TestKeepProcessesIdleStop: through a real Caddy on a gVisor engine, with
// `keep_processes on` and `idle_stop 8s`: a counting job, a process holding 60 MB and a
// preview server run; the sandbox goes idle and is stopped (the container does not run,
// its processes saved); a preview request starts it again and is served by the same
// server; the counter went on from where it was, the same job runs in job_list, and the
// 60 MB process has its pid and its memory. The console shows the processes saved.
// (alice's sandbox: the operator's is not used, and idle-stopped as without it.)
func TestKeepProcessesIdleStop(t *testing.T) {
	cli := testengine.DockerClient(t)
	rt := testengine.GVisorMemory(t, cli)
	p := startPeopleSite(t, []string{"alice"}, "runtime "+rt, "keep_processes on", "idle_stop 8s", "previews localhost")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := p.client(ctx, "alice")
	name := p.containerOf("alice")
	if desc := executeDescription(ctx, p.Site, c); !strings.Contains(desc, "running processes and jobs are saved with their memory") {
		t.Errorf("execute's description does not say processes are kept: %s", desc)
	}
	counter := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{
		"command": countingJob, "wait": 0}))
	holder := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{
		"command": "x=$(head -c 60000000 /dev/zero | tr '\\0' a); echo $$ > /tmp/holder; sleep 100000; echo ${#x}", "wait": 0}))
	if counter["running"] != true || holder["running"] != true {
		t.Fatalf("jobs: %v %v", counter, holder)
	}
	u := servePreview(ctx, t, p.Site, name, c)
	index, err := os.ReadFile(filepath.Join("testdata", "previewsite", "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	get := func() (int, string) {
		resp, err := p.web.Get(u)
		if err != nil {
			t.Fatalf("preview: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != 200 || body != string(index) {
		t.Fatalf("preview before the stop: %d %.100q", code, body)
	}
	number := func(command string) int {
		out := strings.TrimSpace(stdoutOf(ctx, t, c, command))
		n, err := strconv.Atoi(out)
		if err != nil {
			t.Fatalf("%s: %q", command, out)
		}
		return n
	}
	testenv.WaitFor(t, 30*time.Second, "the holder's 60 MB", func() bool {
		out := strings.TrimSpace(stdoutOf(ctx, t, c, "p=$(cat /tmp/holder) && grep VmRSS /proc/$p/status | tr -dc 0-9"))
		kb, _ := strconv.Atoi(out)
		return kb > 55000
	})
	pid := number("cat /tmp/holder")
	before := number("cat /tmp/count")

	testenv.WaitFor(t, time.Minute, "the idle sandbox to stop", func() bool { return !testsite.ContainerRunning(t, p.Docker, name) })
	if list, err := cli.CheckpointList(ctx, name, checkpoint.ListOptions{}); err != nil || len(list) != 1 {
		t.Fatalf("the stopped container's checkpoints: %+v %v, want the saved processes", list, err)
	}
	// The container exits within the save; the console says so once it has returned.
	var a map[string]any
	testenv.WaitFor(t, 30*time.Second, "the console to show the processes saved", func() bool {
		a = consoleSandboxList(t, p.Site)["alice"]
		return a != nil && a["processes"] == "saved"
	})
	if kb, _ := a["kept_bytes"].(float64); kb < 60<<20 || a["stopped_by"] != "idle" {
		t.Errorf("the console's sandbox while stopped: %v", a)
	}
	metric := regexp.MustCompile(`caddy_mcp_sandbox_kept_processes_bytes\{container="` + regexp.QuoteMeta(name) + `"\} (\S+)\n`)
	if m := metric.FindStringSubmatch(testsite.Metrics(t, http.DefaultClient, p.URL)); m == nil {
		t.Error("no caddy_mcp_sandbox_kept_processes_bytes of the sandbox in /metrics")
	} else if v, _ := strconv.ParseFloat(m[1], 64); v < 60<<20 {
		t.Errorf("caddy_mcp_sandbox_kept_processes_bytes %s, want at least the 60 MB held", m[1])
	}
	time.Sleep(2 * time.Second)

	// The next request is the preview's: it starts the sandbox, and the server of
	// before answers it.
	begin := time.Now()
	code, body := get()
	t.Logf("the first request after the idle stop answered in %v", time.Since(begin))
	if code != 200 || body != string(index) {
		t.Fatalf("preview after the stop: %d %.100q", code, body)
	}
	after := number("cat /tmp/count")
	if after < before || after > before+200 {
		t.Errorf("the counter was at %d before the stop and %d after: it did not go on from where it was", before, after)
	}
	if got := number("cat /tmp/holder"); got != pid {
		t.Errorf("the holder's pid: %d, was %d", got, pid)
	}
	if kb := number("grep VmRSS /proc/" + strconv.Itoa(pid) + "/status | tr -dc 0-9"); kb < 55000 {
		t.Errorf("the holder has %d kB resident, want its 60 MB", kb)
	}
	list := testsite.ResultText(testsite.Call(ctx, t, c, "job_list", map[string]any{}))
	for _, id := range []any{counter["job_id"], holder["job_id"]} {
		if !strings.Contains(list, id.(string)) {
			t.Errorf("job_list does not list %v: %s", id, list)
		}
	}
	jobs := testsite.Structured(t, testsite.Call(ctx, t, c, "job_list", map[string]any{}))["jobs"].([]any)
	for _, j := range jobs {
		j := j.(map[string]any)
		if (j["job_id"] == counter["job_id"] || j["job_id"] == holder["job_id"]) && j["state"] != "running" {
			t.Errorf("job %v after the restore: %v, want running", j["job_id"], j)
		}
	}
	if later := number("sleep 1; cat /tmp/count"); later <= after {
		t.Errorf("the counter stands at %d a second after %d", later, after)
	}
	log, _ := os.ReadFile(filepath.Join(p.Storage, "caddy.log"))
	if !strings.Contains(string(log), "saved the sandbox's running processes and memory, and stopped it") ||
		!strings.Contains(string(log), "restored the sandbox's running processes") {
		t.Errorf("the log does not tell the save and the restore")
	}
}
