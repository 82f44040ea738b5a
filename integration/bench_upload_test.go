package integration

import (
	"archive/tar"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
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
	s := testsite.Start(b, testsite.Options{})
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
		if err := s.Docker.CopyToContainer(ctx, s.Container, "/sandbox/bench", pr, container.CopyToContainerOptions{}); err != nil {
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
	s.ContainerExec("rm -f /sandbox/bench/*")

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
		if got := s.ContainerExec("stat -c %s /sandbox/bench/raw.bin /sandbox/bench/up.bin && rm -f /sandbox/bench/*"); got != "314572800\n314572800\n" {
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

// BenchmarkTransfers measures from outside, with curl on both sides and the same 300 MB,
// an upload through an upload link next to an archive PUT into the volume through
// Docker's API, and a share-link download next to an archive GET of the same file,
// alternating the order of each pair. It reports the four throughputs and the two
// ratios (the targets: at least 0.9 each), through the agent and on the fallback
// (transfer containers).
func BenchmarkTransfers(b *testing.B) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		b.Skip("needs curl")
	}
	const size = 300 << 20
	dir := b.TempDir()
	file := filepath.Join(dir, "bench.bin")
	writeRandomFile(b, file, size)
	archive := filepath.Join(dir, "bench.tar")
	writeTarOf(b, archive, file, "raw.bin")
	b.Run("agent", func(b *testing.B) { benchTransfers(b, testsite.Options{CPUs: "2"}, curl, file, archive) })
	b.Run("fallback", func(b *testing.B) {
		benchTransfers(b, testsite.Options{Directive: []string{"agent off"}}, curl, file, archive)
	})
}

func benchTransfers(b *testing.B, opts testsite.Options, curl, file, archive string) {
	const size = 300 << 20
	host := engineSocket(b)
	s := testsite.Start(b, opts)
	ctx := context.Background()
	c := s.Client(ctx)
	link := uploadLinkFor(ctx, b, s, map[string]any{"directory": "/sandbox/bench"})["url"].(string)
	api := "http://docker/containers/" + s.Container + "/archive?path="
	run := func(args ...string) {
		if out, err := runCmd(curl, append([]string{"-sS", "--fail"}, args...)...); err != nil {
			b.Fatalf("curl %v: %v %s", args, err, out)
		}
	}
	putRaw := func() {
		run("--unix-socket", host, "-T", archive, "-H", "Content-Type: application/x-tar", api+"/sandbox/bench")
	}
	putLink := func() { run("-T", file, link+"up.bin") }
	putRaw()
	putLink()
	s.ContainerExec("rm -f /sandbox/bench/up.bin")
	share := testsite.Structured(b, testsite.Call(ctx, b, c, "share_file", map[string]any{"path": "/sandbox/bench/raw.bin"}))["url"].(string)
	getRaw := func() { run("--unix-socket", host, "-o", "/dev/null", api+"/sandbox/bench/raw.bin") }
	getLink := func() { run("-o", "/dev/null", share) }
	getRaw()
	getLink()

	timed := func(f func()) time.Duration {
		t0 := time.Now()
		f()
		return time.Since(t0)
	}
	var d [4]time.Duration // raw PUT, link PUT, raw GET, link GET
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			d[0] += timed(putRaw)
			d[1] += timed(putLink)
			d[2] += timed(getRaw)
			d[3] += timed(getLink)
		} else {
			d[1] += timed(putLink)
			d[0] += timed(putRaw)
			d[3] += timed(getLink)
			d[2] += timed(getRaw)
		}
		b.StopTimer()
		if got := s.ContainerExec("stat -c %s /sandbox/bench/raw.bin /sandbox/bench/up.bin && rm -f /sandbox/bench/up.bin"); got != "314572800\n314572800\n" {
			b.Fatalf("sizes in the sandbox: %q", got)
		}
		b.StartTimer()
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(d[0]), "put-raw-MB/s")
	b.ReportMetric(mbps(d[1]), "put-link-MB/s")
	b.ReportMetric(mbps(d[1])/mbps(d[0]), "put-ratio")
	b.ReportMetric(mbps(d[2]), "get-raw-MB/s")
	b.ReportMetric(mbps(d[3]), "get-link-MB/s")
	b.ReportMetric(mbps(d[3])/mbps(d[2]), "get-ratio")
}

// engineSocket returns the path of the local engine's socket, for curl.
func engineSocket(b *testing.B) string {
	h := os.Getenv("DOCKER_HOST")
	if h == "" {
		h = "unix:///var/run/docker.sock"
	}
	p, ok := strings.CutPrefix(h, "unix://")
	if !ok {
		b.Skip("needs a local engine on a Unix socket")
	}
	return p
}

// writeTarOf writes a one-file archive of file, named name, to path.
func writeTarOf(t testing.TB, path, file, name string) {
	t.Helper()
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	in, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	fi, _ := in.Stat()
	tw := tar.NewWriter(out)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: fi.Size(), Mode: 0o644, ModTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(tw, in); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}
