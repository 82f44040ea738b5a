package integration

import (
	"archive/tar"
	"context"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// rawExec is the baseline: one `bash -c true` through the Docker API, nothing else.
func rawExec(ctx context.Context, b *testing.B, cli *client.Client, name string) {
	id, err := cli.ContainerExecCreate(ctx, name, container.ExecOptions{
		Cmd: []string{"bash", "-c", "true"}, AttachStdout: true, AttachStderr: true, WorkingDir: "/sandbox",
	})
	if err != nil {
		b.Fatal(err)
	}
	resp, err := cli.ContainerExecAttach(ctx, id.ID, container.ExecAttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Reader)
	resp.Close()
	if _, err := cli.ContainerExecInspect(ctx, id.ID); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkExecuteRoundTrip measures one execute("true") through Caddy, the bearer
// check, MCP and the sandbox, next to the raw Docker API exec in the same run,
// alternating the two so that both see the same machine load. It reports both means
// and the ratio of their medians (the target is at most 0.2, with the agent).
func BenchmarkExecuteRoundTrip(b *testing.B) {
	s := testsite.Start(b, testsite.Options{})
	ctx := context.Background()
	c := s.Client(ctx)
	testsite.Call(ctx, b, c, "execute", map[string]any{"command": "true"}) // creates the container
	rawExec(ctx, b, s.Docker, s.Container)

	var raw, full samples
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		rawExec(ctx, b, s.Docker, s.Container)
		t1 := time.Now()
		res := testsite.Call(ctx, b, c, "execute", map[string]any{"command": "true"})
		t2 := time.Now()
		if res.IsError {
			b.Fatal(testsite.ResultText(res))
		}
		raw = append(raw, t1.Sub(t0))
		full = append(full, t2.Sub(t1))
	}
	b.StopTimer()
	b.ReportMetric(float64(raw.median()), "raw-p50-ns")
	b.ReportMetric(float64(full.median()), "caddy-p50-ns")
	b.ReportMetric(float64(full.median())/float64(raw.median()), "ratio-p50")
}

// samples are durations measured one by one, for medians: on a shared machine a few
// slow runs move a mean far more than the median.
type samples []time.Duration

func (s samples) median() time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	return c[len(c)/2]
}

// BenchmarkDownload measures a 64 MB download through a share_file link next to
// reading the same file with Docker's copy API, alternating the two. It reports both
// throughputs and their ratio (the target is at least 0.8).
func BenchmarkDownload(b *testing.B) {
	const size = 64 << 20
	s := testsite.Start(b, testsite.Options{})
	ctx := context.Background()
	c := s.Client(ctx)
	testsite.Call(ctx, b, c, "execute", map[string]any{"command": "head -c 67108864 /dev/urandom > /sandbox/bench.bin"})
	link := testsite.Structured(b, testsite.Call(ctx, b, c, "share_file", map[string]any{"path": "/sandbox/bench.bin"}))["url"].(string)

	var raw, full time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		rc, _, err := s.Docker.CopyFromContainer(ctx, s.Container, "/sandbox/bench.bin")
		if err != nil {
			b.Fatal(err)
		}
		tr := tar.NewReader(rc)
		if _, err := tr.Next(); err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, tr)
		rc.Close()
		t1 := time.Now()
		resp, err := http.Get(link)
		if err != nil {
			b.Fatal(err)
		}
		m, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t2 := time.Now()
		if n != size || m != size {
			b.Fatalf("read %d and %d bytes, want %d", n, m, size)
		}
		raw += t1.Sub(t0)
		full += t2.Sub(t1)
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(raw), "raw-MB/s")
	b.ReportMetric(mbps(full), "link-MB/s")
	b.ReportMetric(mbps(full)/mbps(raw), "ratio")
}

// BenchmarkJobOutputPoll measures one job_output(wait 0) poll of a running job through
// Caddy next to a raw Docker API exec, alternating the two. It reports both means and
// the ratio of their medians (the target: at most 0.2).
func BenchmarkJobOutputPoll(b *testing.B) {
	s := testsite.Start(b, testsite.Options{})
	ctx := context.Background()
	c := s.Client(ctx)
	st := testsite.Structured(b, testsite.Call(ctx, b, c, "execute", map[string]any{"command": "sleep 3600", "wait": 0}))
	id := st["job_id"]
	defer testsite.Call(ctx, b, c, "job_kill", map[string]any{"job_id": id})
	rawExec(ctx, b, s.Docker, s.Container)

	var raw, full samples
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		rawExec(ctx, b, s.Docker, s.Container)
		t1 := time.Now()
		res := testsite.Call(ctx, b, c, "job_output", map[string]any{"job_id": id, "wait": 0})
		t2 := time.Now()
		if res.IsError || testsite.Structured(b, res)["running"] != true {
			b.Fatal(testsite.ResultText(res))
		}
		raw = append(raw, t1.Sub(t0))
		full = append(full, t2.Sub(t1))
	}
	b.StopTimer()
	b.ReportMetric(float64(raw.median()), "raw-p50-ns")
	b.ReportMetric(float64(full.median()), "poll-p50-ns")
	b.ReportMetric(float64(full.median())/float64(raw.median()), "ratio-p50")
}
