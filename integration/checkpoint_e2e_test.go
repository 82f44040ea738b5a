package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Checkpoints through a real Caddy and real sandboxes: save, break, restore; one
// person's checkpoints are not another's; the limit drops the oldest; a reset to the
// image keeps /sandbox; the operator lists, deletes, restores and copies; what a
// failed checkpoint made is gone.

// setupScript gives a sandbox something in /opt, a program in /usr/local/bin and a
// file in /sandbox.
const setupScript = `mkdir -p /opt/app /usr/local/bin && echo v1 > /opt/app/data &&
printf '#!/bin/sh\necho hello-from-bin\n' > /usr/local/bin/hello && chmod +x /usr/local/bin/hello &&
echo keep > /sandbox/notes.txt`

// checkScript prints what setupScript made, and how many `sleep 600` processes run.
const checkScript = `cat /opt/app/data 2>&1; hello 2>&1; cat /sandbox/notes.txt 2>&1; ls /sandbox/after.txt 2>&1;
n=0; for p in /proc/[0-9]*; do c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); case $c in "sleep 600 ") n=$((n+1));; esac; done; echo sleeps=$n`

func stdoutOf(ctx context.Context, t *testing.T, c *mcpclient.Client, command string) string {
	t.Helper()
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": command})
	if res.IsError {
		t.Fatalf("%s: %s", command, testsite.ResultText(res))
	}
	return testsite.Structured(t, res)["stdout"].(string)
}

// imageGone reports whether checkpoint id's image and volume are gone from the engine
// (whatever their names: see sandbox.CheckpointImage).
func imageGone(t *testing.T, cli *client.Client, id string) bool {
	t.Helper()
	ctx := context.Background()
	list, err := sandbox.Checkpoints(ctx, sandbox.Docker(cli))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		if c.ID == id {
			return false
		}
	}
	vols, err := cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "mcp-sandbox.checkpoint="+id))})
	if err != nil {
		t.Fatal(err)
	}
	return len(vols.Volumes) == 0
}

func checkpointIDs(t *testing.T, m map[string]any) []string {
	t.Helper()
	var ids []string
	for _, c := range m["checkpoints"].([]any) {
		ids = append(ids, c.(map[string]any)["id"].(string))
	}
	return ids
}

func TestCheckpointRestore(t *testing.T) {
	p := startPeopleSite(t, []string{"alice", "bob", "carol"}, "max_checkpoints 3")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		removeCheckpoints(p.Docker, p.containerOf("alice"), p.containerOf("bob"), p.containerOf("carol"))
	})
	alice, bob := p.client(ctx, "alice"), p.client(ctx, "bob")

	stdoutOf(ctx, t, alice, setupScript)
	stdoutOf(ctx, t, bob, "echo bob > /sandbox/bob.txt")
	saved := testsite.Structured(t, testsite.Call(ctx, t, alice, "checkpoint", map[string]any{"name": "good"}))
	id := saved["id"].(string)
	if saved["name"] != "good" || saved["size_bytes"].(float64) <= 0 || saved["created_at"] == "" || saved["seconds"] == nil ||
		len(checkpointIDs(t, saved)) != 1 {
		t.Fatalf("checkpoint: %v", saved)
	}
	t.Logf("checkpoint %s: %v bytes in %vs", id, saved["size_bytes"], saved["seconds"])

	// Break it: delete in /opt, /usr/local/bin and /sandbox, add a file, start a job.
	stdoutOf(ctx, t, alice, "rm /opt/app/data /usr/local/bin/hello /sandbox/notes.txt && echo new > /sandbox/after.txt")
	job := testsite.Structured(t, testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "sleep 600", "wait": 0}))
	jobID, _ := job["job_id"].(string)
	if job["running"] != true || jobID == "" {
		t.Fatalf("job: %v", job)
	}
	if out := stdoutOf(ctx, t, alice, checkScript); !strings.Contains(out, "sleeps=1") || strings.Contains(out, "v1") {
		t.Fatalf("broken sandbox: %q", out)
	}

	// Bob sees none of alice's checkpoints and cannot restore hers.
	if ids := checkpointIDs(t, testsite.Structured(t, testsite.Call(ctx, t, bob, "checkpoint_list", map[string]any{}))); len(ids) != 0 {
		t.Fatalf("bob lists %v", ids)
	}
	res := testsite.Call(ctx, t, bob, "restore", map[string]any{"id": id})
	if !res.IsError || !strings.Contains(testsite.ResultText(res), "no checkpoint "+id) {
		t.Fatalf("bob restoring alice's checkpoint: %v %q", res.IsError, testsite.ResultText(res))
	}
	if out := stdoutOf(ctx, t, bob, "cat /sandbox/bob.txt; ls /opt/app 2>&1"); !strings.Contains(out, "bob\n") || strings.Contains(out, "data") {
		t.Fatalf("bob's sandbox after the refused restore: %q", out)
	}

	res = testsite.Call(ctx, t, alice, "restore", map[string]any{"id": id})
	if res.IsError {
		t.Fatalf("restore: %s", testsite.ResultText(res))
	}
	t.Logf("restore: %s", testsite.ResultText(res))
	out := stdoutOf(ctx, t, alice, checkScript)
	for _, want := range []string{"v1\n", "hello-from-bin\n", "keep\n", "No such file", "sleeps=0"} {
		if !strings.Contains(out, want) {
			t.Errorf("after the restore, want %q in %q", want, out)
		}
	}
	jobs := testsite.Structured(t, testsite.Call(ctx, t, alice, "job_list", map[string]any{}))["jobs"].([]any)
	found := false
	for _, j := range jobs {
		j := j.(map[string]any)
		if j["job_id"] == jobID {
			found = true
			if j["state"] == "running" {
				t.Errorf("the job of before the restore still shows running: %v", j)
			}
		}
	}
	if !found {
		t.Errorf("the job of before the restore is not listed: %v", jobs)
	}
	info, err := p.Docker.ContainerInspect(ctx, p.containerOf("alice"))
	if err != nil || info.Config.Labels["mcp-sandbox.person"] != "alice" || info.HostConfig.Memory != 1<<30 || string(info.HostConfig.NetworkMode) != "none" {
		t.Errorf("restored container: %v %+v", err, info.Config)
	}

	// Survives a Caddy restart.
	if err := stopCaddy(); err != nil {
		t.Fatal(err)
	}
	p.Load(p.options([]string{"alice", "bob", "carol"}))
	alice = p.client(ctx, "alice")
	if ids := checkpointIDs(t, testsite.Structured(t, testsite.Call(ctx, t, alice, "checkpoint_list", map[string]any{}))); len(ids) != 1 || ids[0] != id {
		t.Fatalf("after a Caddy restart alice lists %v, want [%s]", ids, id)
	}

	// max_checkpoints 3: the fourth drops the first, names it, and its image goes.
	var last map[string]any
	for i := 0; i < 3; i++ {
		r := testsite.Call(ctx, t, alice, "checkpoint", map[string]any{})
		last = testsite.Structured(t, r)
		if i == 2 && !strings.Contains(testsite.ResultText(r), "oldest was removed: "+id) {
			t.Errorf("the note does not name the dropped checkpoint: %q", testsite.ResultText(r))
		}
	}
	if d, _ := last["dropped"].([]any); len(d) != 1 || d[0] != id || len(checkpointIDs(t, last)) != 3 {
		t.Fatalf("fourth checkpoint: %v", last)
	}
	if !imageGone(t, p.Docker, id) {
		t.Errorf("the dropped checkpoint %s is still on the engine", id)
	}
	if v, _ := testsite.MetricSum(testsite.Metrics(t, nil, p.URL), "caddy_mcp_sandbox_checkpoint_bytes", map[string]string{"person": "alice"}); v <= 0 {
		t.Errorf("checkpoint_bytes{person=alice} = %v", v)
	}

	// restore "image": the system is the image's again, /sandbox stays.
	stdoutOf(ctx, t, alice, "echo later > /sandbox/later.txt")
	if res := testsite.Call(ctx, t, alice, "restore", map[string]any{"id": "image"}); res.IsError {
		t.Fatalf("restore image: %s", testsite.ResultText(res))
	}
	out = stdoutOf(ctx, t, alice, "cat /opt/app/data 2>&1; cat /sandbox/notes.txt /sandbox/later.txt")
	if !strings.Contains(out, "No such file") || !strings.Contains(out, "keep\nlater\n") {
		t.Errorf("after restore image: %q", out)
	}

	// The operator's API: list (with person), copy to bob (refused, then replacing),
	// restore, delete.
	resp, body := p.request(t, "GET", p.URL+"/console/api/checkpoints", p.Key, nil)
	var listed struct {
		Checkpoints []struct{ ID, Person string } `json:"checkpoints"`
	}
	if err := json.Unmarshal([]byte(body), &listed); err != nil || resp.StatusCode != 200 || len(listed.Checkpoints) != 3 || listed.Checkpoints[0].Person != "alice" {
		t.Fatalf("GET /console/api/checkpoints: %d %s", resp.StatusCode, body)
	}
	seed := listed.Checkpoints[0].ID
	resp, body = p.request(t, "POST", p.URL+"/console/api/checkpoints/"+seed+"/copy", p.Key, strings.NewReader(`{"to":"bob"}`))
	if resp.StatusCode != 409 || !strings.Contains(body, "bob's sandbox exists already") {
		t.Fatalf("copy to bob without replace: %d %s", resp.StatusCode, body)
	}
	resp, body = p.request(t, "POST", p.URL+"/console/api/checkpoints/"+seed+"/copy", p.Key, strings.NewReader(`{"to":"bob","replace":true}`))
	if resp.StatusCode != 200 {
		t.Fatalf("copy to bob: %d %s", resp.StatusCode, body)
	}
	bob = p.client(ctx, "bob")
	if out := stdoutOf(ctx, t, bob, "cat /opt/app/data /sandbox/notes.txt; ls /sandbox"); !strings.Contains(out, "v1\nkeep\n") || strings.Contains(out, "bob.txt") {
		t.Errorf("bob after the copy: %q", out)
	}
	if info, err := p.Docker.ContainerInspect(ctx, p.containerOf("bob")); err != nil || info.Config.Labels["mcp-sandbox.person"] != "bob" {
		t.Errorf("bob's container after the copy: %v %v", err, info.Config.Labels)
	}
	if ids := checkpointIDs(t, testsite.Structured(t, testsite.Call(ctx, t, bob, "checkpoint_list", map[string]any{}))); len(ids) != 0 {
		t.Errorf("bob lists alice's checkpoints after the copy: %v", ids)
	}
	// A new teammate starts from the checkpoint: carol has never run anything.
	resp, body = p.request(t, "POST", p.URL+"/console/api/checkpoints/"+seed+"/copy", p.Key, strings.NewReader(`{"to":"carol"}`))
	if resp.StatusCode != 200 {
		t.Fatalf("copy to carol: %d %s", resp.StatusCode, body)
	}
	if out := stdoutOf(ctx, t, p.client(ctx, "carol"), "cat /opt/app/data /sandbox/notes.txt; hello"); out != "v1\nkeep\nhello-from-bin\n" {
		t.Errorf("carol after the copy: %q", out)
	}
	resp, body = p.request(t, "POST", p.URL+"/console/api/checkpoints/"+seed+"/restore", p.Key, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("console restore: %d %s", resp.StatusCode, body)
	}
	if out := stdoutOf(ctx, t, alice, "cat /opt/app/data; ls /sandbox"); !strings.Contains(out, "v1\n") || strings.Contains(out, "later.txt") {
		t.Errorf("alice after the console's restore: %q", out)
	}
	resp, body = p.request(t, "DELETE", p.URL+"/console/api/checkpoints/"+seed, p.Key, nil)
	if resp.StatusCode != 200 || !imageGone(t, p.Docker, seed) {
		t.Fatalf("console delete: %d %s; gone: %v", resp.StatusCode, body, imageGone(t, p.Docker, seed))
	}
	if resp, _ := p.request(t, "DELETE", p.URL+"/console/api/checkpoints/"+seed, p.Key, nil); resp.StatusCode != 404 {
		t.Errorf("deleting it again: %d, want 404", resp.StatusCode)
	}
}

// stopCaddy stops the running Caddy, as a restart of the server does.
func stopCaddy() error { return caddy.Stop() }

// TestCheckpointStopped: a stopped (idle) sandbox is saved as it is, and stays
// stopped; its checkpoint restores.
func TestCheckpointStopped(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Cleanup(func() { removeCheckpoints(s.Docker, s.Container) })
	c := s.Client(ctx)
	stdoutOf(ctx, t, c, setupScript)
	timeout := 1
	if err := s.Docker.ContainerStop(ctx, s.Container, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	res := testsite.Call(ctx, t, c, "checkpoint", map[string]any{"name": "idle"})
	if res.IsError {
		t.Fatalf("checkpoint of a stopped sandbox: %s", testsite.ResultText(res))
	}
	id := testsite.Structured(t, res)["id"].(string)
	if info, err := s.Docker.ContainerInspect(ctx, s.Container); err != nil || info.State.Running {
		t.Errorf("the stopped sandbox was started by the checkpoint: %v %+v", err, info.State)
	}
	stdoutOf(ctx, t, c, "rm -rf /opt/app /sandbox/notes.txt")
	if res := testsite.Call(ctx, t, c, "restore", map[string]any{"id": id}); res.IsError {
		t.Fatalf("restore: %s", testsite.ResultText(res))
	}
	if out := stdoutOf(ctx, t, c, "cat /opt/app/data /sandbox/notes.txt"); out != "v1\nkeep\n" {
		t.Errorf("after the restore: %q", out)
	}
	// The restored container has its agent again.
	var status struct {
		Agent struct {
			Running bool   `json:"running"`
			Reason  string `json:"reason"`
		} `json:"agent"`
	}
	if code := apiCall(t, s, "GET", "/sandbox", &status); code != 200 || !status.Agent.Running {
		t.Errorf("GET /console/api/sandbox after the restore: %d %+v", code, status)
	}
}

// TestCheckpointDiskFull: a checkpoint whose copy of /sandbox runs out of space says
// so and leaves no image, volume or copying container behind.
func TestCheckpointDiskFull(t *testing.T) {
	s := testsite.Start(t, testsite.Options{Directive: []string{"checkpoint_volume_options type=tmpfs device=tmpfs o=size=2m"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Cleanup(func() { removeCheckpoints(s.Docker, s.Container) })
	c := s.Client(ctx)
	stdoutOf(ctx, t, c, "dd if=/dev/zero of=/sandbox/big bs=1M count=8 2>/dev/null && echo ok")
	res := testsite.Call(ctx, t, c, "checkpoint", map[string]any{})
	if !res.IsError || !strings.Contains(testsite.ResultText(res), "No space left on device") {
		t.Fatalf("checkpoint with a full disk: %v %q", res.IsError, testsite.ResultText(res))
	}
	t.Logf("the refusal: %s", testsite.ResultText(res))
	if left := leftovers(t, s.Docker, s.Container); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if out := stdoutOf(ctx, t, c, "ls -l /sandbox/big | wc -l"); out != "1\n" {
		t.Errorf("the sandbox after the failed checkpoint: %q", out)
	}
}

// TestCheckpointEngineRestart: the engine restarting while a checkpoint copies leaves
// nothing behind once it is back. It restarts dockerd, so it runs only with
// MCP_SANDBOX_RESTART_DOCKER=1, as TestEngineRestart.
func TestCheckpointEngineRestart(t *testing.T) {
	if os.Getenv("MCP_SANDBOX_RESTART_DOCKER") != "1" {
		t.Skip("restarts the Docker engine: set MCP_SANDBOX_RESTART_DOCKER=1 (make test does, in a step of its own)")
	}
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Cleanup(func() { removeCheckpoints(s.Docker, s.Container) })
	c := s.Client(ctx)
	stdoutOf(ctx, t, c, "dd if=/dev/urandom of=/sandbox/big bs=1M count=1500 2>/dev/null && echo ok")
	type outcome struct {
		text   string
		failed bool
	}
	done := make(chan outcome, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = "checkpoint", map[string]any{}
		res, err := c.CallTool(ctx, req)
		if err != nil {
			done <- outcome{err.Error(), true}
			return
		}
		done <- outcome{testsite.ResultText(res), res.IsError}
	}()
	testenv.WaitFor(t, time.Minute, "the copying container", func() bool {
		list, _ := s.Docker.ContainerList(ctx, container.ListOptions{})
		for _, x := range list {
			if x.Labels["mcp-sandbox.checkpoint.copier"] == s.Container {
				return true
			}
		}
		return false
	})
	// Killed, not stopped: a stopping engine lets the copy run on for its containers'
	// grace period, long enough to finish it, and the checkpoint would be whole.
	if out, err := exec.Command("pkill", "-KILL", "-x", "dockerd").CombinedOutput(); err != nil {
		t.Fatalf("stopping dockerd: %v %s", err, out)
	}
	testenv.WaitFor(t, 60*time.Second, "dockerd to stop", func() bool { return exec.Command("pgrep", "-x", "dockerd").Run() != nil })
	if out, err := exec.Command("../scripts/docker-up.sh").CombinedOutput(); err != nil {
		t.Fatalf("starting dockerd again: %v %s", err, out)
	}
	if got := <-done; !got.failed || !strings.Contains(got.text, "checkpoint") && !strings.Contains(got.text, "engine") {
		t.Errorf("the interrupted checkpoint (failed %v) said: %q", got.failed, got.text)
	}
	// The next list sweeps what the interrupted one left.
	testsite.Call(ctx, t, c, "checkpoint_list", map[string]any{})
	if left := leftovers(t, s.Docker, s.Container); len(left) > 0 {
		t.Errorf("left behind after the engine restart: %v", left)
	}
}

// leftovers are the checkpoint images, volumes and copying containers of container.
func leftovers(t *testing.T, cli *client.Client, name string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	imgs, _ := cli.ImageList(ctx, image.ListOptions{All: true})
	for _, im := range imgs {
		if im.Labels["mcp-sandbox.checkpoint.of"] == name {
			out = append(out, "image "+im.ID)
		}
	}
	vols, _ := cli.VolumeList(ctx, volume.ListOptions{})
	for _, v := range vols.Volumes {
		if v.Labels["mcp-sandbox.checkpoint.of"] == name {
			out = append(out, "volume "+v.Name)
		}
	}
	list, _ := cli.ContainerList(ctx, container.ListOptions{All: true})
	for _, c := range list {
		if c.Labels["mcp-sandbox.checkpoint.copier"] == name {
			out = append(out, "container "+c.ID)
		}
	}
	return out
}

// removeCheckpoints removes every checkpoint of the containers.
func removeCheckpoints(cli *client.Client, names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, _ := sandbox.Checkpoints(ctx, sandbox.Docker(cli))
	for _, c := range list {
		for _, n := range names {
			if c.Container == n {
				_ = sandbox.DeleteCheckpoint(ctx, sandbox.Docker(cli), c.ID)
			}
		}
	}
}

// TestCheckpointHostileContents: through Caddy, a model that plants the names of a
// restore's own directories and 12 GB of sparse files in /sandbox gets a checkpoint
// that costs little disk, is restored twice with nothing lost, and copied twice by
// the console onto another person's sandbox the same way; 12 GB of sparse files
// outside /sandbox, which docker commit would write at full size, are refused within
// a minute, saying what to do.
func TestCheckpointHostileContents(t *testing.T) {
	p := startPeopleSite(t, []string{"alice", "bob"})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	t.Cleanup(func() { removeCheckpoints(p.Docker, p.containerOf("alice"), p.containerOf("bob")) })
	alice, bob := p.client(ctx, "alice"), p.client(ctx, "bob")
	const list = "cd /sandbox && find . | sort && cat f .mcp-sandbox-restore/f .mcp-sandbox-replaced/d/f && stat -c %s big && du -sk . | cut -f1"
	stdoutOf(ctx, t, alice, "cd /sandbox && mkdir -p .mcp-sandbox-restore .mcp-sandbox-replaced/d && echo r > .mcp-sandbox-restore/f && "+
		"echo p > .mcp-sandbox-replaced/d/f && echo saved > f && truncate -s 12G big")
	want := stdoutOf(ctx, t, alice, list)
	begin := time.Now()
	saved := testsite.Structured(t, testsite.Call(ctx, t, alice, "checkpoint", map[string]any{}))
	id := saved["id"].(string)
	if took := time.Since(begin); saved["size_bytes"].(float64) > 1<<30 || took > time.Minute {
		t.Errorf("a checkpoint of 12 GB of sparse files: %v bytes in %v", saved["size_bytes"], took)
	}
	if _, err := p.Docker.ImageInspect(ctx, p.containerOf("alice")+"-checkpoint:"+id); err != nil {
		t.Errorf("the checkpoint's image is not named after alice's container: %v", err)
	}
	for i := 0; i < 2; i++ {
		stdoutOf(ctx, t, alice, "cd /sandbox && echo changed > f && echo mine > g && rm -r .mcp-sandbox-restore")
		if res := testsite.Call(ctx, t, alice, "restore", map[string]any{"id": id}); res.IsError {
			t.Fatalf("restore %d: %s", i+1, testsite.ResultText(res))
		}
		if got := stdoutOf(ctx, t, alice, list); got != want {
			t.Fatalf("alice after restore %d:\n%s\nwant\n%s", i+1, got, want)
		}
	}
	for i := 0; i < 2; i++ {
		stdoutOf(ctx, t, bob, "cd /sandbox && echo bob > f && mkdir -p .mcp-sandbox-replaced && echo bob > .mcp-sandbox-replaced/b")
		resp, body := p.request(t, "POST", p.URL+"/console/api/checkpoints/"+id+"/copy", p.Key, strings.NewReader(`{"to":"bob","replace":true}`))
		if resp.StatusCode != 200 {
			t.Fatalf("console copy %d to bob: %d %s", i+1, resp.StatusCode, body)
		}
		bob = p.client(ctx, "bob")
		if got := stdoutOf(ctx, t, bob, list); got != want {
			t.Fatalf("bob after copy %d:\n%s\nwant\n%s", i+1, got, want)
		}
	}

	stdoutOf(ctx, t, alice, "rm /sandbox/big && mkdir -p /opt && truncate -s 12G /opt/big && ls -ls /opt/big")
	begin = time.Now()
	res := testsite.Call(ctx, t, alice, "checkpoint", map[string]any{})
	if !res.IsError || !strings.Contains(testsite.ResultText(res), "delete large files outside /sandbox") || time.Since(begin) > time.Minute {
		t.Fatalf("a checkpoint of 12 GB of sparse files outside /sandbox (after %v): %v %q", time.Since(begin), res.IsError, testsite.ResultText(res))
	}
	t.Logf("refused in %v: %s", time.Since(begin), testsite.ResultText(res))
}
