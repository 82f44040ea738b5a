package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestFilterJobs: of the archive the sandbox gives for its jobs directory, only regular
// files directly in it pass, renamed under JobsDir; links, devices, FIFOs, deeper
// paths, dot files and escapes do not.
func TestFilterJobs(t *testing.T) {
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	add := func(h tar.Header, body string) {
		h.Size = int64(len(body))
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(tw, body)
	}
	add(tar.Header{Typeflag: tar.TypeDir, Name: "jobs/"}, "")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "jobs/j1.meta"}, "meta")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "jobs/j1.out", Mode: 0o4755}, "out")
	add(tar.Header{Typeflag: tar.TypeSymlink, Name: "jobs/evil", Linkname: "/etc/shadow"}, "")
	add(tar.Header{Typeflag: tar.TypeFifo, Name: "jobs/j1.in"}, "")
	add(tar.Header{Typeflag: tar.TypeChar, Name: "jobs/dev", Devmajor: 1, Devminor: 3}, "")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "jobs/.tick"}, "x")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "jobs/sub/deep"}, "x")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "jobs/../../etc/passwd"}, "x")
	add(tar.Header{Typeflag: tar.TypeLink, Name: "jobs/hard", Linkname: "jobs/j1.meta"}, "")
	_ = tw.Close()

	var out bytes.Buffer
	if _, err := filterJobs(&in, &out); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got = append(got, h.Name+"="+string(b)+"/"+string(rune(h.Typeflag)))
		if h.Mode&^0o777 != 0 {
			t.Errorf("%s keeps mode bits beyond 0777: %o", h.Name, h.Mode)
		}
	}
	want := "var/lib/mcp-sandbox/jobs/=/5 var/lib/mcp-sandbox/jobs/j1.meta=meta/0 var/lib/mcp-sandbox/jobs/j1.out=out/0"
	if strings.Join(got, " ") != want {
		t.Errorf("got %v\nwant %s", got, want)
	}
}

// TestFilterJobsBounds: of a jobs directory past the bounds, the records within them
// are carried and the rest left, without failing the restore.
func TestFilterJobsBounds(t *testing.T) {
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	for i := 0; i <= carryMaxEntries+1; i++ {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "jobs/j" + strconv.Itoa(i) + ".exit", Mode: 0o644})
	}
	_ = tw.Close()
	var out bytes.Buffer
	left, err := filterJobs(&in, &out)
	if err != nil || left == 0 {
		t.Fatalf("too many entries: %v, left %d", err, left)
	}
	tr := tar.NewReader(&out)
	n := 0
	for {
		if _, err := tr.Next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != carryMaxEntries+1 { // the directory and the records within the bound
		t.Errorf("carried %d entries", n)
	}
}

// TestRestoreFailureKeepsSandbox: a restore that fails (here its copy runs past its
// time bound) puts the sandbox back: same container, same files, running.
func TestRestoreFailureKeepsSandbox(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	sb := newTestSandbox(t, cli, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mustExec(t, sb, "echo saved > /sandbox/f && echo sys > /etc/marker", boxapi.ExecOptions{})
	res, err := sb.Checkpoint(ctx, "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID) })
	mustExec(t, sb, "echo changed > /sandbox/f && echo sys2 > /etc/marker", boxapi.ExecOptions{})
	before, err := cli.ContainerInspect(ctx, cfg.Container)
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { copierTimeout = d }(copierTimeout)
	copierTimeout = time.Nanosecond
	_, err = sb.Restore(ctx, res.Checkpoint.ID)
	copierTimeout = time.Minute
	if err == nil || !strings.Contains(err.Error(), "it is as it was") || !strings.Contains(err.Error(), "took over") {
		t.Fatalf("restore: %v", err)
	}
	after, err := cli.ContainerInspect(ctx, cfg.Container)
	if err != nil || after.ID != before.ID || !after.State.Running {
		t.Fatalf("after the failed restore: %v, id %s (was %s)", err, after.ID, before.ID)
	}
	if r := mustExec(t, sb, "cat /sandbox/f /etc/marker; ls -a /sandbox", boxapi.ExecOptions{}); r.Stdout != "changed\nsys2\n.\n..\nf\n" {
		t.Errorf("after the failed restore: %q", r.Stdout)
	}
	list, _ := cli.ContainerList(ctx, container.ListOptions{All: true})
	for _, c := range list {
		if strings.HasPrefix(strings.TrimPrefix(c.Names[0], "/"), cfg.Container+"-") {
			t.Errorf("left behind: %v", c.Names)
		}
	}
	if _, err := sb.Restore(ctx, "c0000000000000f"); !errors.Is(err, boxapi.ErrCheckpointNotFound) {
		t.Errorf("restoring an unknown checkpoint: %v", err)
	}
}

// TestCheckpointHoldsCommands: a command that comes while a checkpoint holds the
// container paused waits for it (even as its own Docker exec, which fails on a paused
// container and repairs through Ensure) instead of unpausing it halfway.
func TestCheckpointHoldsCommands(t *testing.T) {
	cli, cfg, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	saved := checkpointPaused(t, ctx, cli, cfg, sb)
	sb.life.invalidate() // the next command asks Docker, as one would after readyTrust
	r := mustExec(t, sb, "echo ran", boxapi.ExecOptions{})
	ran := time.Now()
	end := <-saved
	if r.Stdout != "ran\n" || ran.Before(end) {
		t.Errorf("the command %q ended at %v, before the checkpoint ended at %v", r.Stdout, ran, end)
	}
}

// TestRestoreWithCommands: commands that come while a restore replaces the container
// wait for the restored one; none makes a container of its own under the name, which
// would fail the restore.
func TestRestoreWithCommands(t *testing.T) {
	cli, _, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	mustExec(t, sb, "echo saved > /sandbox/f && dd if=/dev/zero of=/sandbox/blob bs=1M count=200 2>/dev/null", boxapi.ExecOptions{Timeout: time.Minute})
	res, err := sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID) })
	mustExec(t, sb, "echo changed > /sandbox/f", boxapi.ExecOptions{})
	done := make(chan error, 1)
	go func() { _, err := sb.Restore(ctx, res.Checkpoint.ID); done <- err }()
	outs := make(chan string, 5)
	for i := 0; i < 5; i++ {
		go func() {
			time.Sleep(time.Duration(i) * 100 * time.Millisecond)
			sb.life.invalidate()
			r, err := sb.Exec(ctx, "cat /sandbox/f", boxapi.ExecOptions{})
			if err != nil {
				outs <- err.Error()
				return
			}
			outs <- r.Stdout
		}()
	}
	if err := <-done; err != nil {
		t.Fatalf("restore with commands under way: %v", err)
	}
	// A command the restore killed fails; the others see one sandbox or the other.
	for i := 0; i < 5; i++ {
		t.Logf("a command during the restore: %q", <-outs)
	}
	if r := mustExec(t, sb, "cat /sandbox/f", boxapi.ExecOptions{}); r.Stdout != "saved\n" {
		t.Errorf("after the restore: %q", r.Stdout)
	}
}

// noAgentSandbox is a test sandbox on Docker's exec (no agent) and a context that ends
// after timeout, or with the test.
func noAgentSandbox(t *testing.T, timeout time.Duration) (dockerEngine, Config, *Sandbox, context.Context) {
	t.Helper()
	cli := dockerClient(t)
	cfg := testConfig(t)
	cfg.NoAgent = true
	sb := newTestSandbox(t, cli, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return cli, cfg, sb, ctx
}

// checkpointPaused starts a checkpoint of a sandbox holding 300 MB in /sandbox and
// returns once it holds the container paused; saved gets the moment it ended.
func checkpointPaused(t *testing.T, ctx context.Context, cli dockerEngine, cfg Config, sb *Sandbox) <-chan time.Time {
	t.Helper()
	mustExec(t, sb, "dd if=/dev/zero of=/sandbox/blob bs=1M count=300 2>/dev/null", boxapi.ExecOptions{Timeout: time.Minute})
	saved := make(chan time.Time, 1)
	go func() {
		res, err := sb.Checkpoint(ctx, "", 0)
		if err != nil {
			t.Error(err)
		} else {
			t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID) })
		}
		saved <- time.Now()
	}()
	for {
		info, err := cli.ContainerInspect(ctx, cfg.Container)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Paused {
			return saved
		}
		time.Sleep(10 * time.Millisecond)
	}
}
