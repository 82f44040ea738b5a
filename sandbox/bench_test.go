package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// benchSandbox returns a running sandbox for benchmarks.
func benchSandbox(b *testing.B) (*Sandbox, dockerEngine) {
	b.Helper()
	cli := dockerClient(b)
	sb := newTestSandbox(b, cli, testConfig(b))
	if _, err := sb.Exec(context.Background(), "true", boxapi.ExecOptions{}); err != nil {
		b.Fatal(err)
	}
	return sb, cli
}

// rawExec is the baseline: the bare Docker calls for `bash -c true`, nothing else.
func rawExec(ctx context.Context, cli dockerOnly, name string) error {
	resp, err := cli.ContainerExecCreate(ctx, name, container.ExecOptions{
		AttachStdout: true, AttachStderr: true, Cmd: []string{"bash", "-c", "true"},
	})
	if err != nil {
		return err
	}
	hj, err := cli.ContainerExecAttach(ctx, resp.ID, container.ExecAttachOptions{})
	if err != nil {
		return err
	}
	_, err = stdcopy.StdCopy(io.Discard, io.Discard, hj.Reader)
	hj.Close()
	if err != nil {
		return err
	}
	ins, err := cli.ContainerExecInspect(ctx, resp.ID)
	if err != nil {
		return err
	}
	if ins.ExitCode != 0 {
		return fmt.Errorf("exit code %d", ins.ExitCode)
	}
	return nil
}

func sandboxExecTrue(ctx context.Context, sb *Sandbox) error {
	res, err := sb.Exec(ctx, "true", boxapi.ExecOptions{})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("exit code %d", res.ExitCode)
	}
	return nil
}

func BenchmarkExecTrue(b *testing.B) {
	sb, _ := benchSandbox(b)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if err := sandboxExecTrue(ctx, sb); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawDockerExecTrue(b *testing.B) {
	sb, cli := benchSandbox(b)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if err := rawExec(ctx, cli, sb.cfg.Container); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecVsRaw runs Sandbox.Exec and the raw Docker calls alternately in the same
// container, so both see the same machine load, and reports their ratio (target: at most
// 1.10).
func BenchmarkExecVsRaw(b *testing.B) {
	sb, cli := benchSandbox(b)
	ctx := context.Background()
	var execTime, rawTime time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if err := sandboxExecTrue(ctx, sb); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if err := rawExec(ctx, cli, sb.cfg.Container); err != nil {
			b.Fatal(err)
		}
		execTime += mid.Sub(start)
		rawTime += time.Since(mid)
	}
	n := float64(b.N)
	b.ReportMetric(float64(execTime.Nanoseconds())/n, "exec-ns/op")
	b.ReportMetric(float64(rawTime.Nanoseconds())/n, "raw-ns/op")
	b.ReportMetric(float64(execTime)/float64(rawTime), "ratio")
}

func BenchmarkExecOutputThroughput(b *testing.B) {
	sb, _ := benchSandbox(b)
	ctx := context.Background()
	const size = 100_000_000
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		res, err := sb.Exec(ctx, fmt.Sprintf("head -c %d /dev/zero", size), boxapi.ExecOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if res.StdoutBytes != size {
			b.Fatalf("got %d bytes", res.StdoutBytes)
		}
	}
}

// BenchmarkRawDockerOutputThroughput is the baseline for BenchmarkExecOutputThroughput:
// the same command through the bare Docker calls, output demultiplexed into io.Discard.
func BenchmarkRawDockerOutputThroughput(b *testing.B) {
	sb, cli := benchSandbox(b)
	ctx := context.Background()
	const size = 100_000_000
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		resp, err := cli.ContainerExecCreate(ctx, sb.cfg.Container, container.ExecOptions{
			AttachStdout: true, AttachStderr: true, Cmd: []string{"head", "-c", fmt.Sprint(size), "/dev/zero"},
		})
		if err != nil {
			b.Fatal(err)
		}
		hj, err := cli.ContainerExecAttach(ctx, resp.ID, container.ExecAttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		n, err := stdcopy.StdCopy(io.Discard, io.Discard, hj.Reader)
		hj.Close()
		if err != nil || n != size {
			b.Fatalf("got %d bytes, %v", n, err)
		}
	}
}

// BenchmarkJobOutputVsRaw polls a running job (JobOutput, wait 0) and runs the raw
// Docker calls alternately, and reports their ratio (target: at most 1).
func BenchmarkJobOutputVsRaw(b *testing.B) {
	sb, cli := benchSandbox(b)
	ctx := context.Background()
	res, err := sb.Exec(ctx, "sleep 3600", boxapi.ExecOptions{Wait: boxapi.NoWait})
	if err != nil || !res.Running {
		b.Fatal(err, res)
	}
	defer func() { _, _ = sb.KillJob(ctx, res.JobID, 0) }()
	var pollTime, rawTime time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		r, err := sb.JobOutput(ctx, res.JobID, 0, nil, 0, nil)
		if err != nil || !r.Running {
			b.Fatal(err, r)
		}
		mid := time.Now()
		if err := rawExec(ctx, cli, sb.cfg.Container); err != nil {
			b.Fatal(err)
		}
		pollTime += mid.Sub(start)
		rawTime += time.Since(mid)
	}
	n := float64(b.N)
	b.ReportMetric(float64(pollTime.Nanoseconds())/n, "poll-ns/op")
	b.ReportMetric(float64(rawTime.Nanoseconds())/n, "raw-ns/op")
	b.ReportMetric(float64(pollTime)/float64(rawTime), "ratio")
}

// BenchmarkAgentChannels20 opens the agent's channel in 20 sandboxes (20 containers)
// and reports this process's resident memory with all of them open, and while each runs
// a command at once (the target: under 256 MB).
func BenchmarkAgentChannels20(b *testing.B) {
	cli := dockerClient(b)
	var sbs []*Sandbox
	for i := 0; i < 20; i++ {
		sb := newTestSandbox(b, cli, testConfig(b))
		sbs = append(sbs, sb)
	}
	ctx := context.Background()
	parallelDo(b, sbs, func(sb *Sandbox) error { return sandboxExecTrue(ctx, sb) })
	for _, sb := range sbs {
		if ok, why := sb.AgentStatus(); !ok && !sb.cfg.NoAgent {
			b.Fatalf("agent not running: %s", why)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		parallelDo(b, sbs, func(sb *Sandbox) error {
			res, err := sb.Exec(ctx, "head -c 1000000 /dev/zero | tr '\\0' x; echo", boxapi.ExecOptions{})
			if err == nil && res.StdoutBytes != 1000001 {
				err = fmt.Errorf("got %d bytes", res.StdoutBytes)
			}
			return err
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(rssBytes(b))/(1<<20), "rss-MiB")
}

func parallelDo(b *testing.B, sbs []*Sandbox, f func(*Sandbox) error) {
	errs := make(chan error, len(sbs))
	for _, sb := range sbs {
		go func() { errs <- f(sb) }()
	}
	for range sbs {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

// rssBytes is this process's resident memory.
func rssBytes(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}
