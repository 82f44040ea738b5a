package sandbox

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/api/types/volume"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// warmConfigs are a warm sandbox's configuration and that of the person who takes it
// (on the warm one's volume), with the agent's direct channel as Caddy gives it.
func warmConfigs(tb testing.TB) (warm, person Config) {
	person = testConfig(tb)
	person.AgentSocketDir = tb.TempDir()
	warm = person
	warm.Container += "_warm_1"
	warm.Volume += "_warm_1"
	warm.Warm = true
	person.Volume, person.Person = warm.Volume, "alice"
	return warm, person
}

// makeWarm makes and warms the sandbox of cfg, removed with its volume after the test.
func makeWarm(tb testing.TB, cli dockerEngine, cfg Config) *Sandbox {
	tb.Helper()
	w := newTestSandbox(tb, cli, cfg)
	if err := w.Warm(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return w
}

// TestTakeOver: a person's sandbox takes a warm one's running container: renamed to
// the person's, on the warm volume, with its direct channel, its marks and files
// kept when the container is made again.
func TestTakeOver(t *testing.T) {
	cli := dockerClient(t)
	ctx := context.Background()
	wcfg, pcfg := warmConfigs(t)
	w := makeWarm(t, cli, wcfg)
	if running, why := w.AgentStatus(); !running && !wcfg.NoAgent {
		t.Fatalf("the warm sandbox's agent does not run: %s", why)
	}
	before, err := cli.ContainerInspect(ctx, wcfg.Container)
	if err != nil {
		t.Fatal(err)
	}
	p := newTestSandbox(t, cli, pcfg)
	if err := p.TakeOver(ctx, w); err != nil {
		t.Fatal(err)
	}
	mustExec(t, p, "echo kept > /sandbox/f", boxapi.ExecOptions{})
	after, err := cli.ContainerInspect(ctx, pcfg.Container)
	if err != nil {
		t.Fatal(err)
	}
	if after.ID != before.ID || !after.State.Running {
		t.Fatalf("the person's container is %s (running %v), want the warm one %s", after.ID, after.State.Running, before.ID)
	}
	if direct, why := p.AgentDirect(); !pcfg.NoAgent && !direct {
		t.Errorf("the taken sandbox's agent has no direct channel: %s", why)
	}
	c, ok, err := Inspect(ctx, cli, pcfg.Container)
	if err != nil || !ok || !c.Warm || c.Volume != wcfg.Volume {
		t.Errorf("Inspect = %+v %v %v, want a warm-marked container on %s", c, ok, err, wcfg.Volume)
	}
	if err := w.Ensure(ctx); err != ErrClosed {
		t.Errorf("the taken warm sandbox's Ensure = %v, want ErrClosed", err)
	}
	if err := p.Recreate(ctx); err != nil {
		t.Fatal(err)
	}
	if res := mustExec(t, p, "cat /sandbox/f", boxapi.ExecOptions{}); res.Stdout != "kept\n" {
		t.Errorf("after recreating: %q", res.Stdout)
	}
	c, _, _ = Inspect(ctx, cli, pcfg.Container)
	if c.Warm || c.Person != "alice" || c.Volume != wcfg.Volume {
		t.Errorf("the recreated container is %+v, want alice's, unmarked, on %s", c, wcfg.Volume)
	}
}

// TestDiscardWarm: discarding a warm sandbox removes its container and volume.
func TestDiscardWarm(t *testing.T) {
	cli := dockerClient(t)
	ctx := context.Background()
	wcfg, _ := warmConfigs(t)
	w := makeWarm(t, cli, wcfg)
	if err := w.Discard(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _ := Exists(ctx, cli, wcfg.Container); ok {
		t.Error("the container is still there")
	}
	if ok, _ := VolumeExists(ctx, cli, wcfg.Volume); ok {
		t.Error("the volume is still there")
	}
}

// BenchmarkWarmFirstCall times a new person's first command (`true`) in three ways,
// each reporting its median: cold (the container made, started and its agent started
// for the call), rename (a warm container renamed to the person's and taken over on
// its own volume, which storage then records as the person's: what the fleet does),
// and bind (the same rename, plus a volume named as the person's bound to the warm
// volume's directory, the other way to give the person a volume of their name).
func BenchmarkWarmFirstCall(b *testing.B) {
	cli := dockerClient(b)
	ctx := context.Background()
	run := func(b *testing.B, first func(b *testing.B, i int) time.Duration) {
		var took []time.Duration
		for i := 0; b.Loop(); i++ {
			took = append(took, first(b, i))
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "median-ms")
	}
	b.Run("cold", func(b *testing.B) {
		run(b, func(b *testing.B, i int) time.Duration {
			b.StopTimer()
			_, pcfg := warmConfigs(b)
			pcfg.Volume = pcfg.Container
			p := newTestSandbox(b, cli, pcfg)
			b.StartTimer()
			t0 := time.Now()
			if err := sandboxExecTrue(ctx, p); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		})
	})
	b.Run("rename", func(b *testing.B) {
		run(b, func(b *testing.B, i int) time.Duration {
			b.StopTimer()
			wcfg, pcfg := warmConfigs(b)
			w := makeWarm(b, cli, wcfg)
			p := newTestSandbox(b, cli, pcfg)
			b.StartTimer()
			t0 := time.Now()
			if err := p.TakeOver(ctx, w); err != nil {
				b.Fatal(err)
			}
			if err := sandboxExecTrue(ctx, p); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		})
	})
	b.Run("bind", func(b *testing.B) {
		run(b, func(b *testing.B, i int) time.Duration {
			b.StopTimer()
			wcfg, pcfg := warmConfigs(b)
			w := makeWarm(b, cli, wcfg)
			pcfg.Volume = pcfg.Container
			p := newTestSandbox(b, cli, pcfg)
			b.Cleanup(func() { _ = cli.VolumeRemove(context.Background(), wcfg.Volume, true) })
			b.StartTimer()
			t0 := time.Now()
			v, err := cli.VolumeInspect(ctx, wcfg.Volume)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: pcfg.Volume, Driver: "local",
				DriverOpts: map[string]string{"type": "none", "o": "bind", "device": v.Mountpoint}}); err != nil {
				b.Fatal(err)
			}
			w.Close()
			w.CloseAgent()
			if err := cli.ContainerRename(ctx, wcfg.Container, pcfg.Container); err != nil {
				b.Fatal(err)
			}
			p.takeDirectDir(w)
			if err := sandboxExecTrue(ctx, p); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		})
	})
}
