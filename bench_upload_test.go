package mcpsandbox

import (
	"archive/tar"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
)

// BenchmarkUpload measures a 300 MB upload through an upload link (PUT with curl -T
// through Caddy into the sandbox, temporary file and rename included) next to Docker's archive upload
// API alone (CopyToContainer with the same file streamed as a tar), alternating the two
// (and their order) so both see the same machine load. It reports both throughputs and their ratio (the
// target is at least 0.8).
func BenchmarkUpload(b *testing.B) {
	// The client is curl when installed, a separate process as real clients are; else
	// Go's http.Client in this process.
	curl, curlErr := exec.LookPath("curl")
	useCurl := curlErr == nil
	const size = 300 << 20
	file := filepath.Join(b.TempDir(), "bench.bin")
	writeRandomFile(b, file, size)
	s := startSite(b, siteOptions{})
	ctx := context.Background()
	link := uploadLinkFor(ctx, b, s, map[string]any{"directory": "/sandbox/bench"})["url"].(string)

	raw := func() {
		f, err := os.Open(file)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "raw.bin", Size: size, Mode: 0o644, ModTime: time.Now()})
			if err == nil {
				_, err = io.Copy(tw, f)
			}
			if err == nil {
				err = tw.Close()
			}
			pw.CloseWithError(err)
		}()
		if err := s.docker.CopyToContainer(ctx, s.container, "/sandbox/bench", pr, container.CopyToContainerOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	viaCaddy := func() {
		if useCurl {
			out, err := runCmd(curl, "-sS", "--fail-with-body", "-T", file, link+"up.bin")
			if err != nil {
				b.Fatalf("curl: %v %s", err, out)
			}
			return
		}
		f, err := os.Open(file)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		req, err := http.NewRequest(http.MethodPut, link+"up.bin", f)
		if err != nil {
			b.Fatal(err)
		}
		req.ContentLength = size
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("PUT: %d %s", resp.StatusCode, msg)
		}
	}
	raw() // warm up both paths
	viaCaddy()
	s.containerExec("rm -f /sandbox/bench/*")

	var rawD, fullD time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	timed := func(f func()) time.Duration {
		t0 := time.Now()
		f()
		return time.Since(t0)
	}
	for i := 0; i < b.N; i++ {
		// The order alternates too: the second upload of a pair runs while the
		// kernel writes the first one back to disk.
		if i%2 == 0 {
			rawD += timed(raw)
			fullD += timed(viaCaddy)
		} else {
			fullD += timed(viaCaddy)
			rawD += timed(raw)
		}
		b.StopTimer()
		if got := s.containerExec("stat -c %s /sandbox/bench/raw.bin /sandbox/bench/up.bin && rm -f /sandbox/bench/*"); got != "314572800\n314572800\n" {
			b.Fatalf("sizes in the sandbox: %q", got)
		}
		b.StartTimer()
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(rawD), "raw-MB/s")
	b.ReportMetric(mbps(fullD), "link-MB/s")
	b.ReportMetric(mbps(fullD)/mbps(rawD), "ratio")
}
