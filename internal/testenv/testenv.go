// Package testenv holds what the tests of this module that run against Docker share:
// the test image, a client for the local engine that tells the two test tiers apart,
// a second engine on TCP loopback ([SecondEngine]), a proxy that counts connections
// ([CountingProxy]), and small measuring and reading helpers. Only tests import it.
//
// The tiers: under -short, the tier that needs no engine, a test that needs Docker is
// skipped when no engine answers; in a full run it fails, so a full run never passes
// by skipping.
package testenv

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// Image is the image tests run their sandboxes from: $SANDBOX_TEST_IMAGE, or the
// small busybox+bash image that containers/build-test-image.sh builds.
func Image() string {
	if img := os.Getenv("SANDBOX_TEST_IMAGE"); img != "" {
		return img
	}
	return "code-sandbox-test:latest"
}

// DockerClient returns a client for the local engine (configured from the
// environment, as the docker CLI is), closed when the test ends. Under -short it
// skips the test (go test -short stays free of Docker, engine or not); otherwise a
// missing engine or [Image] fails it.
func DockerClient(tb testing.TB) *client.Client {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: needs a Docker engine")
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		tb.Fatalf("creating Docker client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		cli.Close()
		tb.Fatalf("no Docker engine answers (%v): run scripts/docker-up.sh, or make test, which starts one", err)
	}
	tb.Cleanup(func() { cli.Close() })
	if _, err := cli.ImageInspect(ctx, Image()); err != nil {
		tb.Fatalf("test image %s is missing (%v): run containers/build-test-image.sh", Image(), err)
	}
	return cli
}

// RandomHex returns n random bytes in hex, for names no other test run uses.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// HeapPeak samples the heap in use every interval until stop is called, and stop
// returns the largest growth seen over what was in use at the start (after a GC).
func HeapPeak(every time.Duration) (stop func() uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak uint64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > base && ms.HeapInuse-base > peak {
				peak = ms.HeapInuse - base
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(done); <-finished; return peak }
}

// ZipEntry is an entry of a zip archive with its content.
type ZipEntry struct {
	*zip.File
	Data []byte
}

// ReadZip reads every entry of the zip archive data, in the archive's order, and
// fails the test when data is not a zip archive or an entry does not read.
func ReadZip(tb testing.TB, data []byte) []ZipEntry {
	tb.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		tb.Fatalf("not a zip archive: %v", err)
	}
	out := make([]ZipEntry, 0, len(zr.File))
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			tb.Fatalf("%s: %v", f.Name, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			tb.Fatalf("%s: %v", f.Name, err)
		}
		out = append(out, ZipEntry{File: f, Data: b})
	}
	return out
}
