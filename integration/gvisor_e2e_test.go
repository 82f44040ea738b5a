package integration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestGVisorPeople: through a real Caddy, alice has `runtime runsc` and bob none:
// alice's container runs under gVisor and bob's under the engine's default, and both
// work. Under gVisor, a job followed to its end, tty, a 3 MiB file shared and
// downloaded byte for byte, and a checkpoint whose restore brings back a file in /opt
// and one in /sandbox, still under gVisor. carol's `runtime nosuch` is an error naming
// it within 15 s.
func TestGVisorPeople(t *testing.T) {
	cli := testengine.DockerClient(t)
	rt := testengine.GVisor(t, cli)
	s := testsite.New(t)
	keys := map[string]string{}
	var lines []string
	for _, p := range []struct{ name, runtime string }{{"alice", rt}, {"bob", ""}, {"carol", "nosuch"}} {
		keys[p.name] = p.name + "-key-" + testenv.RandomHex(16)
		if p.runtime == "" {
			lines = append(lines, "person "+p.name+" "+keys[p.name])
		} else {
			lines = append(lines, "person "+p.name+" "+keys[p.name]+" {", "\truntime "+p.runtime, "}")
		}
	}
	p := &peopleSite{Site: s, keys: keys}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for name := range keys {
			_ = s.Docker.ContainerRemove(ctx, s.Container+"-"+name, container.RemoveOptions{Force: true})
			_ = s.Docker.VolumeRemove(ctx, s.Volume+"-"+name, true)
		}
		removeCheckpoints(s.Docker, p.containerOf("alice"))
	})
	s.Start(testsite.Options{Address: "http://:%d", Directive: lines})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	alice, bob := p.client(ctx, "alice"), p.client(ctx, "bob")

	runtimeOf := func(person string) string {
		info, err := s.Docker.ContainerInspect(ctx, p.containerOf(person))
		if err != nil {
			t.Fatal(err)
		}
		return info.HostConfig.Runtime
	}
	if out := stdoutOf(ctx, t, alice, "uname -r"); !strings.Contains(out, "gvisor") {
		t.Errorf("alice's kernel: %q, want gVisor's", out)
	}
	if got := runtimeOf("alice"); got != rt {
		t.Errorf("alice's container runtime %q, want %q", got, rt)
	}
	if out := stdoutOf(ctx, t, bob, "uname -r; echo bob-ok"); strings.Contains(out, "gvisor") || !strings.Contains(out, "bob-ok") {
		t.Errorf("bob's sandbox: %q, want the host's kernel", out)
	}
	if got := runtimeOf("bob"); got != "" && got != "runc" {
		t.Errorf("bob's container runtime %q, want the engine's default", got)
	}

	// A job with wait 0, followed to its end.
	st := testsite.Structured(t, testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "sleep 1; echo late-output", "wait": 0}))
	if st["running"] != true {
		t.Fatalf("background job: %v", st)
	}
	out, _, last := followJob(ctx, t, alice, testsite.Structured(t, testsite.Call(ctx, t, alice, "job_output", map[string]any{"job_id": st["job_id"], "wait": 5})))
	if out != "late-output\n" || last["exit_code"] != float64(0) {
		t.Errorf("job under gVisor: %q %v", out, last)
	}

	// tty: true gives the command a terminal.
	res := testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "tty; test -t 1 && echo term", "tty": true})
	if txt := testsite.ResultText(res); res.IsError || !strings.Contains(txt, "/dev/pts/") || !strings.Contains(txt, "term") {
		t.Errorf("tty under gVisor: %v %q", res.IsError, txt)
	}

	// A 3 MiB file shared and downloaded byte for byte.
	stdoutOf(ctx, t, alice, "head -c 3145728 /dev/urandom > /sandbox/share.bin; sha256sum /sandbox/share.bin > /sandbox/share.sum")
	sum := strings.Fields(stdoutOf(ctx, t, alice, "cat /sandbox/share.sum"))[0]
	link := testsite.Structured(t, testsite.Call(ctx, t, alice, "share_file", map[string]any{"path": "/sandbox/share.bin"}))["url"].(string)
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(got) != 3<<20 || sha256Hex(got) != sum {
		t.Errorf("download under gVisor: %d, %d bytes, sha256 %s want %s", resp.StatusCode, len(got), sha256Hex(got), sum)
	}

	// A checkpoint keeps /opt and /sandbox; its restore brings both back, under gVisor.
	stdoutOf(ctx, t, alice, "mkdir -p /opt && echo opt-v1 > /opt/kept; echo box-v1 > /sandbox/kept")
	saved := testsite.Structured(t, testsite.Call(ctx, t, alice, "checkpoint", map[string]any{"name": "gvisor"}))
	id, _ := saved["id"].(string)
	if id == "" {
		t.Fatalf("checkpoint: %v", saved)
	}
	stdoutOf(ctx, t, alice, "rm /opt/kept; echo box-v2 > /sandbox/kept")
	if res := testsite.Call(ctx, t, alice, "restore", map[string]any{"id": id}); res.IsError {
		t.Fatalf("restore: %s", testsite.ResultText(res))
	}
	if out := stdoutOf(ctx, t, alice, "cat /opt/kept /sandbox/kept; uname -r"); !strings.Contains(out, "opt-v1\nbox-v1\n") || !strings.Contains(out, "gvisor") {
		t.Errorf("after the restore: %q, want both files back under gVisor", out)
	}
	if got := runtimeOf("alice"); got != rt {
		t.Errorf("alice's restored container runtime %q, want %q", got, rt)
	}

	// A runtime the engine lacks: an error naming it, at once.
	carol := p.client(ctx, "carol")
	begin := time.Now()
	res = testsite.Call(ctx, t, carol, "execute", map[string]any{"command": "true"})
	txt := testsite.ResultText(res)
	if took := time.Since(begin); !res.IsError || !strings.Contains(txt, `"nosuch"`) || !strings.Contains(txt, "runtimes are") || took > 15*time.Second {
		t.Errorf("carol's runtime nosuch: error %v after %v: %q", res.IsError, took, txt)
	}
	if bytes.Contains([]byte(txt), []byte("goroutine")) {
		t.Errorf("carol's error holds a stack trace: %q", txt)
	}
}

// TestGVisorEgressAndPreview: a site whose sandboxes all run under gVisor (a site-wide
// runtime line): an allowed host answers through the egress proxy, a refused one is
// refused and named, and a page served in the sandbox shows through its preview.
func TestGVisorEgressAndPreview(t *testing.T) {
	cli := testengine.DockerClient(t)
	rt := testengine.GVisor(t, cli)
	up := newEgressUpstream(t)
	t.Setenv("EGRESS_TEST_SECRET", "unused-"+testenv.RandomHex(8))
	p := startPeopleSite(t, []string{"alice"}, append(egressDirective(up.port, "allowed.test:"+up.port),
		"runtime "+rt, "previews localhost")...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	alice := p.client(ctx, "alice")
	if out := stdoutOf(ctx, t, alice, "uname -r"); !strings.Contains(out, "gvisor") {
		t.Fatalf("alice's kernel: %q, want gVisor's", out)
	}
	if out := stdoutOf(ctx, t, alice, "wget -q -O - http://allowed.test:"+up.port+"/under-gvisor"); out != "hello from allowed.test:"+up.port+"/under-gvisor\n" {
		t.Errorf("allowed host under gVisor: %q", out)
	}
	seen := len(up.requests())
	res := testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "wget -q -O - http://refused.test:" + up.port + "/no"})
	if txt := testsite.ResultText(res); !strings.Contains(txt, "refused.test") {
		t.Errorf("refused host under gVisor: the result does not name it: %q", txt)
	}
	if n := len(up.requests()); n != seen {
		t.Errorf("the refused host was reached: %d requests, want %d", n, seen)
	}

	stdoutOf(ctx, t, alice, `mkdir -p /sandbox/www && echo "gvisor page" > /sandbox/www/index.html && busybox httpd -p 127.0.0.1:8000 -h /sandbox/www`)
	res = testsite.Call(ctx, t, alice, "expose_port", map[string]any{"port": 8000})
	if res.IsError {
		t.Fatalf("expose_port: %s", testsite.ResultText(res))
	}
	preview := testsite.Structured(t, res)["url"].(string)
	testenv.WaitFor(t, 30*time.Second, "the preview to show the page served under gVisor", func() bool {
		resp, b := p.request(t, "GET", preview, "", nil)
		return resp.StatusCode == 200 && strings.Contains(b, "gvisor page")
	})
}
