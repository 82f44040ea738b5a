package sandbox

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// volumeDiskBytes is what volume vol takes on the engine's disk (du: blocks, not
// apparent sizes), read by a container of the configured image.
func volumeDiskBytes(t *testing.T, cli dockerEngine, cfg Config, vol string) int64 {
	t.Helper()
	ctx := context.Background()
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: cfg.Image, Entrypoint: []string{"du", "-sk", "/v"}},
		&container.HostConfig{NetworkMode: "none", Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: "/v", ReadOnly: true}}},
		nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true})
	waitC, errC := cli.ContainerWait(ctx, resp.ID, container.WaitConditionNextExit)
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waitC:
	case err := <-errC:
		t.Fatal(err)
	}
	logs, err := cli.ContainerLogs(ctx, resp.ID, container.LogsOptions{ShowStdout: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var out strings.Builder
	_, _ = stdcopy.StdCopy(&out, &out, logs)
	f := strings.Fields(out.String())
	if len(f) == 0 {
		t.Fatalf("du printed %q", out.String())
	}
	kb, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		t.Fatalf("du printed %q", out.String())
	}
	return kb << 10
}

// TestCheckpointReservedNames: a checkpoint holding the names of a restore's own
// directories (a model can make them in /sandbox) restores, twice, with every file of
// the checkpoint back and nothing of the replaced files left or mixed in.
func TestCheckpointReservedNames(t *testing.T) {
	cli, _, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	mustExec(t, sb, "cd /sandbox && mkdir -p .mcp-sandbox-restore .mcp-sandbox-replaced/d .mcp-sandbox-restore-0 && echo r > .mcp-sandbox-restore/f && "+
		"echo p > .mcp-sandbox-replaced/d/f && echo z > .mcp-sandbox-restore-0/f && echo saved > f", boxapi.ExecOptions{})
	const list = "cd /sandbox && find . | sort && cat f .mcp-sandbox-restore/f .mcp-sandbox-replaced/d/f .mcp-sandbox-restore-0/f"
	want := mustExec(t, sb, list, boxapi.ExecOptions{}).Stdout
	res, err := sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID) })
	for i := 0; i < 2; i++ {
		mustExec(t, sb, "cd /sandbox && echo changed > f && echo mine > g && rm -r .mcp-sandbox-restore && echo x > .mcp-sandbox-replaced/new", boxapi.ExecOptions{})
		if _, err := sb.Restore(ctx, res.Checkpoint.ID); err != nil {
			t.Fatalf("restore %d: %v", i+1, err)
		}
		if got := mustExec(t, sb, list, boxapi.ExecOptions{}).Stdout; got != want {
			t.Fatalf("after restore %d:\n%s\nwant\n%s", i+1, got, want)
		}
	}
}

// TestCheckpointSparse: 12 GB of sparse files cost little in /sandbox (truncate -s),
// and must cost as little in a checkpoint and after a restore, within a minute; the
// same outside /sandbox, which docker commit would write at full size, is refused
// saying what to do, and the sandbox runs on.
func TestCheckpointSparse(t *testing.T) {
	cli, cfg, sb, ctx := noAgentSandbox(t, 5*time.Minute)
	mustExec(t, sb, "truncate -s 6G /sandbox/a /sandbox/b && echo data >> /sandbox/b", boxapi.ExecOptions{})
	begin := time.Now()
	res, err := sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatalf("a checkpoint of sparse files: %v", err)
	}
	t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID) })
	took := time.Since(begin)
	disk := volumeDiskBytes(t, cli, cfg, checkpointVolume(cfg.Container, res.Checkpoint.ID))
	t.Logf("checkpoint of 12 GB of sparse files: %v, %d bytes on disk, %d recorded", took, disk, res.Checkpoint.SizeBytes)
	if disk > 1<<30 || res.Checkpoint.SizeBytes > 1<<30 || took > time.Minute {
		t.Errorf("the checkpoint took %v and %d bytes of disk (%d recorded)", took, disk, res.Checkpoint.SizeBytes)
	}
	mustExec(t, sb, "rm /sandbox/a && echo changed > /sandbox/b", boxapi.ExecOptions{})
	begin = time.Now()
	if _, err := sb.Restore(ctx, res.Checkpoint.ID); err != nil {
		t.Fatal(err)
	}
	took = time.Since(begin)
	disk = volumeDiskBytes(t, cli, cfg, cfg.Volume)
	r := mustExec(t, sb, "stat -c %s /sandbox/a /sandbox/b && tail -c 5 /sandbox/b", boxapi.ExecOptions{})
	t.Logf("restore: %v, %d bytes on disk", took, disk)
	if r.Stdout != "6442450944\n6442450949\ndata\n" || disk > 1<<30 || took > time.Minute {
		t.Errorf("after the restore (%v, %d bytes on disk): %q", took, disk, r.Stdout)
	}

	mustExec(t, sb, "rm /sandbox/a /sandbox/b && mkdir -p /opt && truncate -s 12G /opt/sparse", boxapi.ExecOptions{})
	begin = time.Now()
	res2, err := sb.Checkpoint(ctx, "", 0)
	if err == nil {
		_ = DeleteCheckpoint(context.Background(), cli, res2.Checkpoint.ID)
		t.Fatalf("a checkpoint of 12 GB of sparse files outside /sandbox was made in %v (%d bytes)", time.Since(begin), res2.Checkpoint.SizeBytes)
	}
	if !strings.Contains(err.Error(), "sparse") || !strings.Contains(err.Error(), "delete large files") || time.Since(begin) > time.Minute {
		t.Errorf("the refusal (after %v) does not say what to do: %v", time.Since(begin), err)
	}
	t.Logf("refused after %v: %v", time.Since(begin), err)
	if info, err := cli.ContainerInspect(ctx, cfg.Container); err != nil || !info.State.Running || info.State.Paused {
		t.Fatalf("the sandbox after the refusal: %v %+v", err, info.State)
	}
}

// TestCheckpointBytesBounded: the checkpoints of a sandbox hold at most
// MaxCheckpointBytes together: a checkpoint whose copy of /sandbox would pass what is
// left is refused saying what to do, and leaves nothing behind.
func TestCheckpointBytesBounded(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	cfg.NoAgent = true
	cfg.MaxCheckpointBytes = 50 << 20
	sb := newTestSandbox(t, cli, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mustExec(t, sb, "dd if=/dev/zero of=/sandbox/blob bs=1M count=30 2>/dev/null", boxapi.ExecOptions{})
	res, err := sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID) })
	_, err = sb.Checkpoint(ctx, "", 0)
	if err == nil || !strings.Contains(err.Error(), "may hold together") || !strings.Contains(err.Error(), "delete") {
		t.Fatalf("a second checkpoint past max_checkpoint_bytes: %v", err)
	}
	t.Logf("refused: %v", err)
	if list, err := sb.Checkpoints(ctx); err != nil || len(list) != 1 {
		t.Errorf("after the refusal: %v %v", list, err)
	}
	// With one kept at most, the old one goes and the new one fits.
	res2, err := sb.Checkpoint(ctx, "", 1)
	if err != nil {
		t.Fatalf("a checkpoint that replaces the only one kept: %v", err)
	}
	t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, res2.Checkpoint.ID) })
}

// TestRestoreManyJobRecords: a sandbox with 20,000 job records (five files each) is
// restored, and keeps them, instead of failing the restore with a broken upload that
// read as an engine that did not answer.
func TestRestoreManyJobRecords(t *testing.T) {
	cli, _, sb, ctx := noAgentSandbox(t, 4*time.Minute)
	mustExec(t, sb, "echo saved > /sandbox/f", boxapi.ExecOptions{})
	res, err := sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID) })
	mustExec(t, sb, "echo changed > /sandbox/f && mkdir -p "+JobsDir+" && cd "+JobsDir+
		" && seq 1 20000 | sed 's/.*/j&.out j&.err j&.exit j&.meta j&.cmd/' | xargs touch", boxapi.ExecOptions{Timeout: 2 * time.Minute})
	begin := time.Now()
	if _, err := sb.Restore(ctx, res.Checkpoint.ID); err != nil {
		t.Fatalf("restoring with 20,000 job records: %v", err)
	}
	t.Logf("restored in %v", time.Since(begin))
	r := mustExec(t, sb, "cat /sandbox/f; ls "+JobsDir+" | grep -c '^j[0-9]*\\.'", boxapi.ExecOptions{})
	if r.Stdout != "saved\n100000\n" {
		t.Errorf("after the restore: %q", r.Stdout)
	}
}

// TestCheckpointNames: a checkpoint's image and volume are named after its sandbox's
// container; one made before (mcp-sandbox-checkpoint:<id> and its volume) is still
// listed, restored and deleted.
func TestCheckpointNames(t *testing.T) {
	cli, cfg, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	mustExec(t, sb, "echo saved > /sandbox/f && echo sys > /etc/marker", boxapi.ExecOptions{})
	res, err := sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	id := res.Checkpoint.ID
	t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, id) })
	if _, err := cli.ImageInspect(ctx, cfg.Container+"-checkpoint:"+id); err != nil {
		t.Errorf("the image is not named after the container: %v", err)
	}
	if _, err := cli.VolumeInspect(ctx, cfg.Container+"-checkpoint-"+id); err != nil {
		t.Errorf("the volume is not named after the container: %v", err)
	}

	// One as checkpoints were made before: docker commit under checkpointRepo, and a
	// copy volume checkpointRepo-<id>.
	old := newCheckpointID()
	ref, vol := checkpointRepo+":"+old, checkpointRepo+"-"+old
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true})
		_ = cli.VolumeRemove(context.Background(), vol, true)
	})
	if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: vol, Labels: map[string]string{labelCheckpoint: old, labelCheckpointOf: cfg.Container}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{labelCheckpoint: old, labelCheckpointOf: cfg.Container, labelCheckpointVolume: vol,
		labelCheckpointCreated: time.Now().UTC().Format(time.RFC3339Nano), labelCheckpointBytes: "1"}
	if _, err := cli.ContainerCommit(ctx, cfg.Container, container.CommitOptions{Reference: ref, Comment: checkpointComment(old),
		Config: &container.Config{Labels: labels}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.saves.copyVolumes(ctx, old, time.Minute, []string{"save", "/from", "/to"}, []mount.Mount{
		{Type: mount.TypeVolume, Source: cfg.Volume, Target: "/from", ReadOnly: true},
		{Type: mount.TypeVolume, Source: vol, Target: "/to"}}, nil); err != nil {
		t.Fatal(err)
	}
	list, err := sb.Checkpoints(ctx)
	if err != nil || len(list) != 2 || list[1].ID != old {
		t.Fatalf("the list with a checkpoint of before: %v %v", list, err)
	}
	mustExec(t, sb, "echo changed > /sandbox/f && echo sys2 > /etc/marker", boxapi.ExecOptions{})
	if _, err := sb.Restore(ctx, old); err != nil {
		t.Fatalf("restoring a checkpoint of before: %v", err)
	}
	if r := mustExec(t, sb, "cat /sandbox/f /etc/marker", boxapi.ExecOptions{}); r.Stdout != "saved\nsys\n" {
		t.Errorf("after restoring a checkpoint of before: %q", r.Stdout)
	}
	if _, err := sb.Restore(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := DeleteCheckpoint(ctx, cli, old); err != nil {
		t.Fatalf("deleting a checkpoint of before: %v", err)
	}
	if _, err := cli.VolumeInspect(ctx, vol); err == nil {
		t.Errorf("the deleted checkpoint's volume %s stays", vol)
	}
}

// TestRestoreHungCopy: a restore's copying container that runs past the agent's own
// time bound (a hung agent) is stopped; the restore then does not claim the sandbox is
// as it was, but names where the files may be, and deletes nothing.
func TestRestoreHungCopy(t *testing.T) {
	cli, _, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	// Many small files besides a large one, so the copy outlasts its bound on any disk:
	// a copy of one file in the page cache can end before the stop reaches it.
	mustExec(t, sb, "echo saved > /sandbox/f && mkdir /sandbox/many && cd /sandbox/many && seq 1 20000 | xargs touch && "+
		"dd if=/dev/zero of=/sandbox/blob bs=1M count=300 2>/dev/null", boxapi.ExecOptions{Timeout: time.Minute})
	res, err := sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID) })
	mustExec(t, sb, "echo changed > /sandbox/f", boxapi.ExecOptions{})
	defer func(d time.Duration) { restoreGrace = d }(restoreGrace)
	restoreGrace = -copierTimeout + 200*time.Millisecond
	_, err = sb.Restore(ctx, res.Checkpoint.ID)
	restoreGrace = time.Minute
	if err == nil || strings.Contains(err.Error(), "it is as it was") || !strings.Contains(err.Error(), "/sandbox/.mcp-sandbox-replaced-") {
		t.Fatalf("a restore whose copy hung: %v", err)
	}
	t.Logf("the error: %v", err)
	// The stop may come before the renames or among them: the files of before are in
	// place, or in the directory the error names; never lost.
	replaced := regexp.MustCompile(`/sandbox/\.mcp-sandbox-replaced-[0-9a-f]+`).FindString(err.Error())
	r := mustExec(t, sb, "cat /sandbox/f; cat "+replaced+"/f 2>/dev/null; true", boxapi.ExecOptions{})
	if !strings.Contains(r.Stdout, "changed\n") {
		t.Errorf("after the stopped restore, the file of before is neither in place nor in %s: %q", replaced, r.Stdout)
	}
}
