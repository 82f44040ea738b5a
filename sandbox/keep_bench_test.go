package sandbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/docker/docker/api/types/checkpoint"
	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
)

// BenchmarkKeepProcesses: a stop that keeps the processes (save) and the start that
// restores them, with 64 MB and 512 MB resident in the sandbox and with nothing but its
// idle processes (small), each against Docker's own checkpoint create and start from
// it on the same container in the same iteration: the ratios say what the sandbox adds
// (closing the agent's channel and waiting for the engine to reap its exec, the
// engine's questions, the restart policy turned off and on). resume-ms is the start
// plus the first command after it (a new agent).
func BenchmarkKeepProcesses(b *testing.B) {
	cli := dockerClient(b)
	rt := testengine.GVisorMemory(b, cli)
	for _, mb := range []int{0, 64, 512} {
		name := "small"
		if mb > 0 {
			name = fmt.Sprintf("%dMB", mb)
		}
		b.Run(name, func(b *testing.B) {
			cfg := testConfig(b)
			cfg.Runtime, cfg.KeepProcesses, cfg.Memory = rt, true, 4<<30
			sb, err := New(cli, cfg, zap.Must(zap.NewDevelopment(zap.IncreaseLevel(zap.WarnLevel))))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { sb.CloseTransfers(); removeSandbox(b, cli, cfg) })
			ctx := context.Background()
			if mb > 0 {
				// tail keeps the last mb MiB it read, random, while sleep never reads.
				hold := fmt.Sprintf("head -c %dm /dev/urandom | tail -c %dm | sleep 100000", mb, mb)
				if res, err := sb.Exec(ctx, hold, boxapi.ExecOptions{Wait: 100 * time.Millisecond}); err != nil || !res.Running {
					b.Fatalf("holder: %+v %v", res, err)
				}
				time.Sleep(time.Duration(mb/32+2) * time.Second)
			} else if _, err := sb.Exec(ctx, "true", boxapi.ExecOptions{}); err != nil {
				b.Fatal(err)
			}
			held := func(after string) {
				if mb == 0 {
					return
				}
				if res, err := sb.Exec(ctx, "ps -o args | grep -c '^tail -c'", boxapi.ExecOptions{}); err != nil || res.Stdout != "1\n" {
					b.Fatalf("the holder after %s: %+v %v", after, res, err)
				}
			}
			held("its start")
			mem := sb.saves.memoryInUse(ctx)
			var save, restore, resume, rawSave, rawRestore time.Duration
			b.ResetTimer()
			for b.Loop() {
				begin := time.Now()
				if err := sb.Stop(ctx, "idle_stop"); err != nil {
					b.Fatal(err)
				}
				if saved, _ := sb.Kept(); !saved {
					b.Fatal("the stop did not save the processes")
				}
				save += time.Since(begin)
				begin = time.Now()
				if err := sb.Start(ctx); err != nil {
					b.Fatal(err)
				}
				restore += time.Since(begin)
				if res, err := sb.Exec(ctx, "true", boxapi.ExecOptions{}); err != nil || res.ExitCode != 0 {
					b.Fatalf("after the restore: %+v %v", res, err)
				}
				resume += time.Since(begin)
				held("the sandbox's restore")

				// By hand, on the same container quiet as the sandbox's stop leaves it:
				// its agent gone, and no exec left for the engine to reap.
				// The restart policy off, or the engine starts it again at once.
				sb.CloseAgent()
				sb.saves.awaitExecs(ctx)
				if err := sb.saves.restartPolicy(ctx, container.RestartPolicyDisabled); err != nil {
					b.Fatal(err)
				}
				begin = time.Now()
				if err := cli.CheckpointCreate(ctx, cfg.Container, checkpoint.CreateOptions{CheckpointID: "bench", Exit: true}); err != nil {
					b.Fatal(err)
				}
				rawSave += time.Since(begin)
				begin = time.Now()
				if err := cli.ContainerStart(ctx, cfg.Container, container.StartOptions{CheckpointID: "bench"}); err != nil {
					b.Fatal(err)
				}
				rawRestore += time.Since(begin)
				if err := cli.CheckpointDelete(ctx, cfg.Container, checkpoint.DeleteOptions{CheckpointID: "bench"}); err != nil {
					b.Fatal(err)
				}
				sb.saves.keepRestarting(ctx)
				sb.life.invalidate()
				held("a restore by hand")
			}
			n := float64(b.N)
			ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / n }
			b.ReportMetric(ms(save), "save-ms")
			b.ReportMetric(ms(restore), "restore-ms")
			b.ReportMetric(ms(resume), "resume-ms")
			b.ReportMetric(ms(rawSave), "docker-save-ms")
			b.ReportMetric(ms(rawRestore), "docker-restore-ms")
			b.ReportMetric(float64(save)/float64(rawSave), "save-ratio")
			b.ReportMetric(float64(restore)/float64(rawRestore), "restore-ratio")
			b.ReportMetric(float64(mem)/(1<<20), "resident-MiB")
		})
	}
}
