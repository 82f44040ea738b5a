package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

// checkpointImages are the images on the engine labelled as checkpoint id, tagged or not.
func checkpointImages(t *testing.T, cli dockerEngine, id string) []string {
	t.Helper()
	list, err := cli.ImageList(context.Background(), image.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, im := range list {
		if im.Labels[labelCheckpoint] == id {
			out = append(out, im.ID)
		}
	}
	return out
}

// TestDeletedCheckpointInUseGoes: a checkpoint deleted while the sandbox runs from it
// (restored) loses its tag at once; once the sandbox no longer runs from it (another
// restore), its image and layers go too instead of staying as a dangling image.
func TestDeletedCheckpointInUseGoes(t *testing.T) {
	cli, _, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	mustExec(t, sb, "echo sys > /etc/marker", boxapi.ExecOptions{})
	res, err := sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	id := res.Checkpoint.ID
	t.Cleanup(func() {
		for _, im := range checkpointImages(t, cli, id) {
			_, _ = cli.ImageRemove(context.Background(), im, image.RemoveOptions{Force: true})
		}
	})
	if _, err := sb.Restore(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := DeleteCheckpoint(ctx, cli, id); err != nil {
		t.Fatalf("deleting the checkpoint the sandbox runs from: %v", err)
	}
	if list, err := sb.Checkpoints(ctx); err != nil || len(list) != 0 {
		t.Fatalf("after the delete: %v %v", list, err)
	}
	if r := mustExec(t, sb, "cat /etc/marker", boxapi.ExecOptions{}); r.Stdout != "sys\n" {
		t.Fatalf("the sandbox lost its system with the deleted checkpoint: %q", r.Stdout)
	}
	if _, err := sb.Restore(ctx, boxapi.ImageReset); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := sb.Checkpoints(ctx); err != nil {
			t.Fatal(err)
		}
		left := checkpointImages(t, cli, id)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted checkpoint's image stays once nothing runs from it: %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCheckpointCopyBounded: a copy that takes longer than copierTimeout (here a
// /sandbox of many files and a tiny bound) ends: the checkpoint fails saying what to
// do, the sandbox runs again (not left paused) and nothing of it stays on the engine.
func TestCheckpointCopyBounded(t *testing.T) {
	cli, cfg, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	mustExec(t, sb, "mkdir /sandbox/many && cd /sandbox/many && seq 1 50000 | xargs touch", boxapi.ExecOptions{Timeout: 2 * time.Minute})
	defer func(d time.Duration) { copierTimeout = d }(copierTimeout)
	copierTimeout = 300 * time.Millisecond
	begin := time.Now()
	_, err := sb.Checkpoint(ctx, "", 0)
	if err == nil || !strings.Contains(err.Error(), "took over") || !strings.Contains(err.Error(), "fewer files") {
		t.Fatalf("a checkpoint whose copy runs past its bound: %v", err)
	}
	t.Logf("failed after %v: %v", time.Since(begin), err)
	info, err := cli.ContainerInspect(ctx, cfg.Container)
	if err != nil || !info.State.Running || info.State.Paused {
		t.Fatalf("the sandbox after the failed checkpoint: %v %+v", err, info.State)
	}
	vols, err := cli.VolumeList(ctx, volume.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols.Volumes {
		if v.Labels[labelCheckpointOf] == cfg.Container {
			t.Errorf("left behind: volume %s", v.Name)
		}
	}
	list, _ := cli.ContainerList(ctx, container.ListOptions{All: true})
	for _, c := range list {
		if c.Labels[labelCheckpointCopier] == cfg.Container {
			t.Errorf("left behind: copying container %v", c.Names)
		}
	}
}

// TestCheckpointSystemBounded: `docker commit` writes a sparse file at its full size,
// so a file of a few bytes on disk (truncate -s 2G) would cost the engine's disk
// gigabytes, or terabytes, outside every limit of the sandbox. A system past
// checkpointMaxSystem is refused before anything is copied, saying what to do.
func TestCheckpointSystemBounded(t *testing.T) {
	cli, cfg, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	mustExec(t, sb, "mkdir -p /opt && truncate -s 2G /opt/sparse", boxapi.ExecOptions{})
	defer func(n int64) { checkpointMaxSystem = n }(checkpointMaxSystem)
	checkpointMaxSystem = 1 << 30
	begin := time.Now()
	res, err := sb.Checkpoint(ctx, "", 0)
	if err == nil {
		_ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID)
		t.Fatalf("a checkpoint of a 2 GiB sparse file past a bound of 1 GiB was made in %v", time.Since(begin))
	}
	if !strings.Contains(err.Error(), "sparse") || !strings.Contains(err.Error(), "delete") {
		t.Fatalf("the refusal does not say what to do: %v", err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("the refusal took %v", took)
	}
	info, err := cli.ContainerInspect(ctx, cfg.Container)
	if err != nil || !info.State.Running || info.State.Paused {
		t.Fatalf("the sandbox after the refusal: %v %+v", err, info.State)
	}
	if list, err := sb.Checkpoints(ctx); err != nil || len(list) != 0 {
		t.Errorf("after the refusal: %v %v", list, err)
	}
	mustExec(t, sb, "rm /opt/sparse", boxapi.ExecOptions{})
	res, err = sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatalf("once the file is gone: %v", err)
	}
	_ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID)
}

// TestListDuringRestore: listing the checkpoints (checkpoint_list from another call)
// while a restore copies /sandbox leaves the restore's copying container alone: the
// sweep of what failed checkpoints left must not take it for a leftover.
func TestListDuringRestore(t *testing.T) {
	cli, cfg, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	mustExec(t, sb, "echo saved > /sandbox/f && dd if=/dev/zero of=/sandbox/blob bs=1M count=300 2>/dev/null", boxapi.ExecOptions{Timeout: time.Minute})
	res, err := sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID) })
	mustExec(t, sb, "echo changed > /sandbox/f", boxapi.ExecOptions{})
	done := make(chan error, 1)
	go func() { _, err := sb.Restore(ctx, res.Checkpoint.ID); done <- err }()
	listed := false
	for !listed {
		select {
		case err := <-done:
			t.Fatalf("the restore ended (%v) before a copying container was seen", err)
		default:
		}
		list, err := cli.ContainerList(ctx, container.ListOptions{All: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			if c.Labels[labelCheckpointCopier] == cfg.Container && c.State == "running" {
				if _, err := sb.Checkpoints(ctx); err != nil {
					t.Fatal(err)
				}
				listed = true
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatalf("a restore with a listing under way: %v", err)
	}
	if r := mustExec(t, sb, "cat /sandbox/f; ls -a /sandbox", boxapi.ExecOptions{}); r.Stdout != "saved\n.\n..\nblob\nf\n" {
		t.Errorf("after the restore: %q", r.Stdout)
	}
}

// TestRestoreCopyBounded: a restore whose copy runs past copierTimeout fails before
// anything of /sandbox is replaced, and the sandbox is as it was.
func TestRestoreCopyBounded(t *testing.T) {
	cli, _, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	mustExec(t, sb, "echo saved > /sandbox/f && mkdir /sandbox/many && cd /sandbox/many && seq 1 50000 | xargs touch", boxapi.ExecOptions{Timeout: 2 * time.Minute})
	res, err := sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, res.Checkpoint.ID) })
	mustExec(t, sb, "echo changed > /sandbox/f && rm -r /sandbox/many", boxapi.ExecOptions{})
	defer func(d time.Duration) { copierTimeout = d }(copierTimeout)
	copierTimeout = 300 * time.Millisecond
	if _, err := sb.Restore(ctx, res.Checkpoint.ID); err == nil || !strings.Contains(err.Error(), "took over") || !strings.Contains(err.Error(), "it is as it was") {
		t.Fatalf("a restore whose copy runs past its bound: %v", err)
	}
	if r := mustExec(t, sb, "cat /sandbox/f; ls -a /sandbox", boxapi.ExecOptions{}); r.Stdout != "changed\n.\n..\nf\n" {
		t.Errorf("after the failed restore: %q", r.Stdout)
	}
}

// TestStopDuringCheckpoint: the operator's stop (or an idle stop) that comes while a
// checkpoint holds the container paused waits for the checkpoint, which saves one
// moment of the sandbox, and then stops it.
func TestStopDuringCheckpoint(t *testing.T) {
	cli, cfg, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	saved := checkpointPaused(t, ctx, cli, cfg, sb)
	if err := sb.Stop(ctx, "operator"); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	end := <-saved
	if stopped.Before(end) {
		t.Errorf("the stop ended at %v, before the checkpoint ended at %v", stopped, end)
	}
	if info, err := cli.ContainerInspect(ctx, cfg.Container); err != nil || info.State.Running {
		t.Errorf("after the stop: %v %+v", err, info.State)
	}
}

// TestRestoreWithoutItsCopy: a checkpoint whose copy of /sandbox is gone (deleted by
// the console while a restore began, or by hand) is not restored: Docker would make
// an empty volume under the name for the copy, and /sandbox would come back empty.
func TestRestoreWithoutItsCopy(t *testing.T) {
	cli, cfg, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	mustExec(t, sb, "echo saved > /sandbox/f", boxapi.ExecOptions{})
	res, err := sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	id := res.Checkpoint.ID
	t.Cleanup(func() { _ = DeleteCheckpoint(context.Background(), cli, id) })
	if err := cli.VolumeRemove(ctx, checkpointVolume(cfg.Container, id), true); err != nil {
		t.Fatal(err)
	}
	mustExec(t, sb, "echo changed > /sandbox/f", boxapi.ExecOptions{})
	_, err = sb.Restore(ctx, id)
	if err == nil || !strings.Contains(err.Error(), "lost its copy") {
		t.Errorf("restoring a checkpoint without its copy of /sandbox: %v", err)
	}
	if r := mustExec(t, sb, "cat /sandbox/f; ls -a /sandbox", boxapi.ExecOptions{}); r.Stdout != "changed\n.\n..\nf\n" {
		t.Errorf("after the restore: %q", r.Stdout)
	}
	if v, err := cli.VolumeInspect(ctx, checkpointVolume(cfg.Container, id)); err == nil {
		t.Errorf("an empty volume stays under the checkpoint's name: %v", v.Name)
	}
}

// TestPausedLeftIsResumed: a container a checkpoint left paused (Caddy stopped or
// crashed mid-copy) runs again at the next command of a new process's Sandbox.
func TestPausedLeftIsResumed(t *testing.T) {
	cli, cfg, sb, ctx := noAgentSandbox(t, 2*time.Minute)
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	if err := cli.ContainerPause(ctx, cfg.Container); err != nil {
		t.Fatal(err)
	}
	again, err := New(cli, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := mustExec(t, again, "echo ran", boxapi.ExecOptions{}); r.Stdout != "ran\n" {
		t.Errorf("a command on the paused sandbox: %q", r.Stdout)
	}
	if info, err := cli.ContainerInspect(ctx, cfg.Container); err != nil || info.State.Paused || !info.State.Running {
		t.Errorf("after the command: %v %+v", err, info.State)
	}
}

// TestSweepLeftovers: what a checkpoint cut short by Caddy's end left (a copy volume
// without its image, a copying container) is removed by the site's sweep without the
// sandbox listing its checkpoints; another sandbox's is left alone.
func TestSweepLeftovers(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, other, legacy := newCheckpointID(), newCheckpointID(), newCheckpointID()
	for _, v := range []struct{ id, of, name string }{{id, cfg.Container, checkpointVolume(cfg.Container, id)},
		{other, cfg.Container + "-other", checkpointVolume(cfg.Container+"-other", other)},
		{legacy, cfg.Container, checkpointRepo + "-" + legacy}} {
		if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: v.name,
			Labels: map[string]string{labelCheckpoint: v.id, labelCheckpointOf: v.of}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.VolumeRemove(context.Background(), v.name, true) })
	}
	if _, err := cli.ContainerCreate(ctx, &container.Config{Image: cfg.Image, Entrypoint: []string{"true"},
		Labels: map[string]string{labelCheckpointCopier: cfg.Container, labelCheckpoint: id}},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, copierName(cfg.Container, id)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), copierName(cfg.Container, id), container.RemoveOptions{Force: true})
	})
	if err := SweepLeftovers(ctx, cli, func(c string) bool { return c == cfg.Container }, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.VolumeInspect(ctx, checkpointVolume(cfg.Container, id)); err == nil {
		t.Error("the copy volume without its image stays")
	}
	if _, err := cli.VolumeInspect(ctx, checkpointRepo+"-"+legacy); err == nil {
		t.Error("the copy volume of before checkpoints were named after their sandbox stays")
	}
	if _, err := cli.ContainerInspect(ctx, copierName(cfg.Container, id)); err == nil {
		t.Error("the copying container stays")
	}
	if _, err := cli.VolumeInspect(ctx, checkpointVolume(cfg.Container+"-other", other)); err != nil {
		t.Errorf("another sandbox's volume went: %v", err)
	}
}

// TestHandCommitOfRestoredKept: a container restored from a checkpoint carries the
// checkpoint's labels, and so does an image someone commits from it by hand; the
// sweep of deleted checkpoints' images must leave that image alone.
func TestHandCommitOfRestoredKept(t *testing.T) {
	cli, cfg, sb, ctx := noAgentSandbox(t, 3*time.Minute)
	mustExec(t, sb, "echo sys > /etc/marker", boxapi.ExecOptions{})
	res, err := sb.Checkpoint(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	id := res.Checkpoint.ID
	t.Cleanup(func() {
		for _, im := range checkpointImages(t, cli, id) {
			_, _ = cli.ImageRemove(context.Background(), im, image.RemoveOptions{Force: true})
		}
		_ = DeleteCheckpoint(context.Background(), cli, id)
	})
	if _, err := sb.Restore(ctx, id); err != nil {
		t.Fatal(err)
	}
	// Committed without a name: untagged, as a deleted checkpoint's image is, so only
	// its comment tells them apart.
	made, err := cli.ContainerCommit(ctx, cfg.Container, container.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), made.ID, image.RemoveOptions{Force: true})
	})
	if info, err := cli.ImageInspect(ctx, made.ID); err != nil || info.Config == nil || info.Config.Labels[labelCheckpoint] != id {
		t.Fatalf("the hand-made image does not carry the checkpoint's label, so this test proves nothing: %v", err)
	}
	if _, err := sb.Checkpoints(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ImageInspect(ctx, made.ID); err != nil {
		t.Fatalf("the sweep removed an image committed by hand: %v", err)
	}
}
