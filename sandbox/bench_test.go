package sandbox

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

// benchSandbox returns a running sandbox for benchmarks.
func benchSandbox(b *testing.B) (*Sandbox, *client.Client) {
	b.Helper()
	cli := dockerClient(b)
	sb := newTestSandbox(b, cli, testConfig(b))
	if _, err := sb.Exec(context.Background(), "true", ExecOptions{}); err != nil {
		b.Fatal(err)
	}
	return sb, cli
}

// rawExec is the baseline: the bare Docker calls for `bash -c true`, nothing else.
func rawExec(ctx context.Context, cli client.APIClient, name string) error {
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
	res, err := sb.Exec(ctx, "true", ExecOptions{})
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
		res, err := sb.Exec(ctx, fmt.Sprintf("head -c %d /dev/zero", size), ExecOptions{})
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
	res, err := sb.Exec(ctx, "sleep 3600", ExecOptions{Wait: NoWait})
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
