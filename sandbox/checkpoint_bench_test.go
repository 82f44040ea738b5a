package sandbox

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// BenchmarkCheckpoint: a checkpoint and a restore of a sandbox with new data in /opt
// and in /sandbox (400 MB each; MCP_SANDBOX_CHECKPOINT_MB sets each), against Docker
// doing the same work by hand in the same run: `docker commit` plus a volume copy,
// and a container from that image plus the copy back.
func BenchmarkCheckpoint(b *testing.B) {
	mb := 400
	if v, err := strconv.Atoi(os.Getenv("MCP_SANDBOX_CHECKPOINT_MB")); err == nil && v > 0 {
		mb = v
	}
	cli := dockerClient(b)
	cfg := testConfig(b)
	cfg.Memory = 1 << 30
	sb := newTestSandbox(b, cli, cfg)
	ctx := context.Background()
	fill := fmt.Sprintf("mkdir -p /opt/data && dd if=/dev/urandom of=/opt/data/blob bs=1M count=%d 2>/dev/null && dd if=/dev/urandom of=/sandbox/blob bs=1M count=%d 2>/dev/null && sync", mb, mb)
	if res := mustExec(b, sb, fill, boxapi.ExecOptions{Timeout: 5 * time.Minute}); res.ExitCode != 0 {
		b.Fatalf("filling: %s", res.Stderr)
	}
	b.Cleanup(func() {
		list, _ := Checkpoints(context.Background(), cli)
		for _, c := range list {
			if c.Container == cfg.Container {
				_ = DeleteCheckpoint(context.Background(), cli, c.ID)
			}
		}
	})
	var ours, hand, ourRestore, handRestore time.Duration
	b.ResetTimer()
	// Each phase starts with the page cache's dirty pages written out, so none pays
	// for the writes of the one before; ours and by hand take turns going first.
	timed := func(d *time.Duration, f func()) {
		b.StopTimer()
		syscall.Sync()
		b.StartTimer()
		t0 := time.Now()
		f()
		*d += time.Since(t0)
	}
	for i := 0; i < b.N; i++ {
		var id, ref, vol string
		ourSave := func() {
			res, err := sb.Checkpoint(ctx, "bench", 0)
			if err != nil {
				b.Fatal(err)
			}
			id = res.Checkpoint.ID
		}
		handSave := func() { ref, vol = handCheckpoint(b, cli, cfg) }
		ourLoad := func() {
			if _, err := sb.Restore(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
		handLoad := func() { handRestoreRun(b, cli, cfg, ref, vol) }
		if i%2 == 0 {
			timed(&ours, ourSave)
			timed(&hand, handSave)
			timed(&ourRestore, ourLoad)
			timed(&handRestore, handLoad)
		} else {
			timed(&hand, handSave)
			timed(&ours, ourSave)
			timed(&handRestore, handLoad)
			timed(&ourRestore, ourLoad)
		}
		b.StopTimer()
		_, _ = cli.ImageRemove(ctx, ref, image.RemoveOptions{Force: true})
		_ = cli.VolumeRemove(ctx, vol, true)
		_ = DeleteCheckpoint(ctx, cli, id)
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(ours.Seconds()/n, "checkpoint-s")
	b.ReportMetric(hand.Seconds()/n, "by-hand-commit-copy-s")
	b.ReportMetric(ours.Seconds()/hand.Seconds(), "checkpoint-ratio")
	b.ReportMetric(ourRestore.Seconds()/n, "restore-s")
	b.ReportMetric(handRestore.Seconds()/n, "by-hand-restore-s")
	b.ReportMetric(ourRestore.Seconds()/handRestore.Seconds(), "restore-ratio")
}

// handRun runs script in a container from the configured image with mounts, as one
// would by hand (docker run --rm -v ... image sh -c ...).
func handRun(b *testing.B, cli dockerEngine, cfg Config, script string, mounts []mount.Mount) {
	b.Helper()
	ctx := context.Background()
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: cfg.Image, Entrypoint: []string{"bash", "-c", script}},
		&container.HostConfig{Mounts: mounts, NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	defer cli.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true})
	waitC, errC := cli.ContainerWait(ctx, resp.ID, container.WaitConditionNextExit)
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		b.Fatal(err)
	}
	select {
	case w := <-waitC:
		if w.StatusCode != 0 {
			b.Fatalf("%s: exit %d", script, w.StatusCode)
		}
	case err := <-errC:
		b.Fatal(err)
	}
}

// handCheckpoint is `docker commit` and a copy of the volume, by hand.
func handCheckpoint(b *testing.B, cli dockerEngine, cfg Config) (ref, vol string) {
	ctx := context.Background()
	ref = "mcp-sandbox-bench:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := cli.ContainerCommit(ctx, cfg.Container, container.CommitOptions{Reference: ref, Pause: true}); err != nil {
		b.Fatal(err)
	}
	vol = cfg.Volume + "-bench-copy"
	if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: vol}); err != nil {
		b.Fatal(err)
	}
	handRun(b, cli, cfg, "cp -a /from/. /to/", []mount.Mount{
		{Type: mount.TypeVolume, Source: cfg.Volume, Target: "/from", ReadOnly: true},
		{Type: mount.TypeVolume, Source: vol, Target: "/to"},
	})
	return ref, vol
}

// handRestoreRun is a container from the committed image in place of the sandbox's,
// and the copy back, by hand. The sandbox's own container is put back after.
func handRestoreRun(b *testing.B, cli dockerEngine, cfg Config, ref, vol string) {
	ctx := context.Background()
	name := cfg.Container + "-bench-restore"
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: ref, Entrypoint: []string{"bash", "-c", keepAlive}},
		&container.HostConfig{NetworkMode: "none", Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: cfg.Volume, Target: boxapi.WorkDir}}},
		nil, nil, name)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true})
	handRun(b, cli, cfg, "rm -rf /to/* && cp -a /from/. /to/", []mount.Mount{
		{Type: mount.TypeVolume, Source: vol, Target: "/from", ReadOnly: true},
		{Type: mount.TypeVolume, Source: cfg.Volume, Target: "/to"},
	})
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		b.Fatal(err)
	}
}
