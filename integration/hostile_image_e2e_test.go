package integration

import (
	"bytes"
	"context"
	"image"
	"image/jpeg"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testimage"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestReadFileHostileImage: a 0.5 MB progressive JPEG declaring 9400x9400 pixels, which
// image/jpeg would take 1.3 GB to decode (its coefficients on top of the pixels), is
// refused from its header with a message that says what to do instead, and Caddy's
// peak RSS barely moves. A 4000x3000 photo still comes back scaled.
func TestReadFileHostileImage(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker: reads images from a sandbox container through Caddy")
	}
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"}) // the container exists from the first call

	hostile := testimage.JPEG{Width: 9400, Height: 9400, Sampling: []byte{0x11, 0x11, 0x11}, Progressive: true, Adobe: -1}.Bytes()
	s.PutFile("/sandbox/photos/hostile.jpg", hostile)
	// The file is a real JPEG, as the sandbox's tools see it too.
	if got := s.ContainerExec("head -c 3 /sandbox/photos/hostile.jpg | od -An -tx1"); !strings.Contains(got, "ff d8 ff") {
		t.Fatalf("start of the file: %q", got)
	}

	runtime.GC()
	before := procStatus(t)
	resetPeakRSS(t)
	stop, samples := sampleRSS()
	start := time.Now()
	res := testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/photos/hostile.jpg"})
	d := time.Since(start)
	sampled := stop()
	after := procStatus(t)
	grown := after["VmHWM"] - before["VmRSS"]
	txt := testsite.ResultText(res)
	t.Logf("%d KB progressive JPEG declaring 9400x9400: answered in %v; VmRSS before %d MB, VmHWM after %d MB (%+d MB), highest sampled VmRSS %d MB over %d samples (race detector: %v)\n%s",
		len(hostile)>>10, d.Round(time.Millisecond), before["VmRSS"]>>10, after["VmHWM"]>>10, grown>>10, sampled>>10, *samples, raceEnabled, txt)
	if grown >= 340<<10 {
		t.Errorf("Caddy's peak RSS grew by %d MB reading a 0.5 MB image, want under 340 MB", grown>>10)
	}
	for _, want := range []string{"/sandbox/photos/hostile.jpg is too large", "9400x9400 (progressive JPEG)", "about 1.3 GB", "160 MB allowed", "convert /sandbox/photos/hostile.jpg -resize 1568x1568 /sandbox/photos/hostile-small.jpg", "share_file"} {
		if !res.IsError || !strings.Contains(txt, want) {
			t.Errorf("answer does not say %q: %v %q", want, res.IsError, txt)
		}
	}

	// A 4000x3000 baseline JPEG, as a camera writes them, still comes back scaled.
	photo := image.NewRGBA(image.Rect(0, 0, 4000, 3000))
	for i := range photo.Pix {
		photo.Pix[i] = uint8(i/4%4000/16 + i/16000%3000/12)
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, photo, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	photo = nil
	s.PutFile("/sandbox/photos/camera.jpg", buf.Bytes())
	runtime.GC()
	before = procStatus(t)
	resetPeakRSS(t)
	heapPeak := filesHeapPeak()
	start = time.Now()
	res = testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/photos/camera.jpg"})
	d = time.Since(start)
	peak := heapPeak()
	after = procStatus(t)
	img, format, mimeType := imageOf(t, res)
	t.Logf("4000x3000 baseline JPEG of %d KB -> %v %s in %v; heap peak +%d MB, VmHWM %+d MB; %q",
		buf.Len()>>10, img.Bounds().Size(), mimeType, d.Round(time.Millisecond), peak>>20, (after["VmHWM"]-before["VmRSS"])>>10, testsite.ResultText(res))
	if img.Bounds().Dx() != 1568 || img.Bounds().Dy() != 1176 || format != "jpeg" || mimeType != "image/jpeg" {
		t.Errorf("camera photo came back %v %s %s", img.Bounds(), format, mimeType)
	}
	if peak > mcptools.ImageBudget {
		t.Errorf("the heap grew by %d MB reading a 4000x3000 photo, over the %d MB images may take", peak>>20, mcptools.ImageBudget>>20)
	}
}
