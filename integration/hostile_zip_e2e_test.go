package integration

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestHostileTarZipBounded: a sandbox that replaces tar with a program printing tar
// entries forever cannot grow Caddy's memory through a directory download. The plugin
// runs "tar" by name, found on the container's PATH, where /usr/local/bin comes before
// the real one; the fake repeats a chunk of entries with cat. For each kind of endless
// stream the download ends by itself, cut short, and the peak RSS of this process
// (Caddy runs in it) grows by less than 240 MB. A download that goes on past 400 MB of
// growth is stopped, so that a failure does not take the machine. This is the fallback's
// tar; the agent's own tar stream goes through the same limits (sandbox's
// TestAgentTarBounded feeds them an endless one).
func TestHostileTarZipBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and the test image")
	}
	s := testsite.Start(t, testsite.Options{Directive: []string{"agent off"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "mkdir -p /sandbox/hostile /usr/local/bin && echo x > /sandbox/hostile/f"})
	s.ContainerExec(`printf '#!/bin/sh\nwhile cat /tmp/hostile-chunk; do :; done\n' > /usr/local/bin/tar && chmod 755 /usr/local/bin/tar`)
	if got := strings.TrimSpace(s.ContainerExec("command -v tar")); got != "/usr/local/bin/tar" {
		t.Fatalf("tar in the container is %q, not the fake", got)
	}
	res := testsite.Call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/hostile"})
	link, _ := testsite.Structured(t, res)["url"].(string)
	if res.IsError || link == "" {
		t.Fatalf("share_file: %s", testsite.ResultText(res))
	}

	long := strings.Repeat("n", 60_000)
	for _, tc := range []struct {
		name  string
		entry tar.Header
	}{
		// The attack as reported: every hard link waits, name and all, for the end.
		{"hard links with long PAX names", tar.Header{Typeflag: tar.TypeLink, Name: "hostile/" + long, Linkname: "hostile/" + long, Format: tar.FormatPAX}},
		// No data at all: the zip's directory grows by one header per entry.
		{"empty directories", tar.Header{Typeflag: tar.TypeDir, Name: "hostile/d/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var chunk bytes.Buffer
			tw := tar.NewWriter(&chunk)
			// 2 MiB at least, so that starting cat costs little next to the bytes.
			for chunk.Len() < 2<<20 {
				h := tc.entry
				h.ModTime = time.Unix(1_700_000_000, 0)
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
			}
			_ = tw.Flush() // no end marker: the fake prints the chunk again and again
			s.CopyInto(t, "/tmp", "hostile-chunk", chunk.Bytes())

			runtime.GC()
			debug.FreeOSMemory()
			before := procStatus(t)["VmRSS"]
			resetPeakRSS(t)
			dctx, stop := context.WithTimeout(ctx, 90*time.Second)
			defer stop()
			blewUp := make(chan int64, 1)
			go watchRSS(dctx, before+400<<10, blewUp, stop)

			t0 := time.Now()
			req, _ := http.NewRequestWithContext(dctx, http.MethodGet, link, nil)
			resp, err := http.DefaultClient.Do(req)
			var body []byte
			status := 0
			if err == nil {
				status = resp.StatusCode
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			elapsed := time.Since(t0)
			peak := procStatus(t)["VmHWM"]
			stop()
			t.Logf("download ended after %v with status %d, %d bytes, error %v; VmRSS before %d MB, peak (VmHWM) %d MB, grown %d MB (race detector: %v)",
				elapsed.Round(time.Millisecond), status, len(body), err, before>>10, peak>>10, (peak-before)>>10, raceEnabled)
			select {
			case rss := <-blewUp:
				t.Fatalf("RSS reached %d MB (%d MB more than before) and the download was stopped: memory grows with the stream", rss>>10, (rss-before)>>10)
			default:
			}
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				t.Fatalf("the download did not end by itself within %v", elapsed.Round(time.Second))
			}
			if grown := peak - before; grown >= 240<<10 {
				t.Errorf("peak RSS grew by %d MB during the download, want under 240 MB", grown>>10)
			}
			// Cut short: an error page, a broken transfer, or a zip with no directory.
			if status == http.StatusOK && err == nil {
				if _, zerr := zip.NewReader(bytes.NewReader(body), int64(len(body))); zerr == nil {
					t.Errorf("an endless stream made a whole zip of %d bytes", len(body))
				}
			}
		})
	}
}

// watchRSS stops the download (stop) and reports the RSS on blewUp once it passes max
// kB, until ctx ends.
func watchRSS(ctx context.Context, max int64, blewUp chan<- int64, stop func()) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if v, ok := vmRSS(); ok && v > max {
			blewUp <- v
			stop()
			return
		}
	}
}
