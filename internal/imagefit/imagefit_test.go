package imagefit

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testimage"
)

var (
	testOptions = Options{MaxEdge: 1568, MaxBytes: 3_500_000, MaxFile: 48 << 20, Budget: 160 << 20}
	// smallOptions scale to 400 px within 10 MB: small images then test the budget
	// quickly, also under the race detector.
	smallOptions = Options{MaxEdge: 400, MaxBytes: 500_000, MaxFile: 48 << 20, Budget: 10 << 20}
)

// fromMemory reads a file held in memory, counting the reads.
func fromMemory(data []byte, reads *atomic.Int32) ReadFunc {
	return func(ctx context.Context, offset, length int64) (io.ReadCloser, error) {
		if reads != nil {
			reads.Add(1)
		}
		end := min(int64(len(data)), offset+length)
		return io.NopCloser(bytes.NewReader(data[offset:end])), nil
	}
}

// hostileJPEG is 0.5 MB and declares 9400x9400 progressive 4:4:4: image/jpeg would
// allocate 265 MB of pixels and 1.06 GB of coefficients for it.
func hostileJPEG() []byte {
	return testimage.JPEG{Width: 9400, Height: 9400, Sampling: []byte{0x11, 0x11, 0x11}, Progressive: true, Adobe: -1}.Bytes()
}

func TestFitRefusesWhatWouldNotFitTheBudget(t *testing.T) {
	data := hostileJPEG()
	f := New(testOptions)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := f.Fit(context.Background(), int64(len(data)), fromMemory(data, nil))
	runtime.ReadMemStats(&after)
	var tooLarge *TooLargeError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("Fit = %v, want a TooLargeError", err)
	}
	msg := err.Error()
	t.Logf("%d KB file: %s (allocated %d KB)", len(data)>>10, msg, (after.TotalAlloc-before.TotalAlloc)>>10)
	if tooLarge.Need < 1350e6 || tooLarge.Need > 1400e6 || tooLarge.Kind != "progressive JPEG" ||
		msg != "9400x9400 (progressive JPEG) would need about 1.3 GB to decode, more than the 160 MB allowed" {
		t.Errorf("refusal: %+v %q", tooLarge, msg)
	}
	// Refused from its header: nothing near the image's size was allocated.
	if a := after.TotalAlloc - before.TotalAlloc; a > 4<<20 {
		t.Errorf("refusing allocated %d KB", a>>10)
	}

	// Scaled to 400 px within 10 MB: the same 1200x1200 image fits as a baseline 4:2:0
	// JPEG (2 MB of pixels), not as a progressive 4:4:4 one (4 MB, and 17 MB of
	// coefficients); nor does an interlaced 900x900 RGBA PNG (two copies of 3 MB).
	small := New(smallOptions)
	for _, c := range []struct {
		name   string
		data   []byte
		refuse bool
	}{
		{"baseline 4:2:0", testimage.JPEG{Width: 1200, Height: 1200, Sampling: []byte{0x22, 0x11, 0x11}, Adobe: -1}.Bytes(), false},
		{"progressive 4:4:4", testimage.JPEG{Width: 1200, Height: 1200, Sampling: []byte{0x11, 0x11, 0x11}, Adobe: -1, Progressive: true}.Bytes(), true},
		{"PNG", testimage.PNG(900, 900, 6, 8, false, false), false},
		{"interlaced PNG", testimage.PNG(900, 900, 6, 8, true, false), true},
	} {
		img, err := small.Fit(context.Background(), int64(len(c.data)), fromMemory(c.data, nil))
		t.Logf("%s: %q %v", c.name, img.Desc, err)
		if refused := errors.As(err, &tooLarge); refused != c.refuse || !c.refuse && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}

	// A lossless WebP that must be scaled is priced at its decoder's worst.
	lossless := testimage.HuffmanWebP(2000, 1000, 1)
	if _, err := f.Fit(context.Background(), int64(len(lossless)), fromMemory(lossless, nil)); !errors.As(err, &tooLarge) || tooLarge.Kind != "lossless WebP" {
		t.Errorf("2000x1000 lossless WebP: %v", err)
	}

	// A file over MaxFile is refused before it is read.
	var reads atomic.Int32
	if _, err := f.Fit(context.Background(), 49<<20, fromMemory(nil, &reads)); !errors.As(err, new(*FileTooLargeError)) || reads.Load() != 0 {
		t.Errorf("49 MB file: %v, %d reads", err, reads.Load())
	}
}

func TestFitScalesOrPassesThrough(t *testing.T) {
	f := New(smallOptions)
	encode := func(m image.Image, format string) []byte {
		var buf bytes.Buffer
		if format == "png" {
			png.Encode(&buf, m)
		} else {
			jpeg.Encode(&buf, m, nil)
		}
		return buf.Bytes()
	}
	photo := image.NewRGBA(image.Rect(0, 0, 1200, 900))
	for i := range photo.Pix {
		photo.Pix[i] = uint8(i * 7 / 3)
	}
	chart := image.NewNRGBA(image.Rect(0, 0, 1000, 160))
	for y := range 160 {
		for x := range 1000 {
			chart.Set(x, y, color.NRGBA{uint8(x), uint8(y), 0, uint8(x / 4)})
		}
	}
	for _, c := range []struct {
		name, mime, desc string
		data             []byte
		w, h             int
	}{
		{"photo", "image/jpeg", "JPEG 1200x900, shown scaled to 400x300", encode(photo, "jpeg"), 400, 300},
		{"chart", "image/png", "PNG 1000x160, shown scaled to 400x64", encode(chart, "png"), 400, 64},
		{"small", "image/png", "PNG 300x200", encode(image.NewGray(image.Rect(0, 0, 300, 200)), "png"), 300, 200},
	} {
		var reads atomic.Int32
		img, err := f.Fit(context.Background(), int64(len(c.data)), fromMemory(c.data, &reads))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		m, _, err := image.Decode(bytes.NewReader(img.Data))
		if err != nil || img.MIME != c.mime || img.Desc != c.desc || m.Bounds().Dx() != c.w || m.Bounds().Dy() != c.h || len(img.Data) > smallOptions.MaxBytes {
			t.Errorf("%s: %s %q %v, %d bytes (%v)", c.name, img.MIME, img.Desc, m.Bounds(), len(img.Data), err)
		}
		// A file within the header's size is read once.
		if reads.Load() != 1 {
			t.Errorf("%s: %d KB read in %d reads", c.name, len(c.data)>>10, reads.Load())
		}
	}
	// Transparent pixels put on white when the result must be a JPEG.
	m := image.NewRGBA(image.Rect(0, 0, 2, 1))
	m.Pix = []uint8{0, 0, 0, 0, 100, 0, 0, 255}
	flattenOnWhite(m)
	if !bytes.Equal(m.Pix, []uint8{255, 255, 255, 255, 100, 0, 0, 255}) {
		t.Errorf("flattened: %v", m.Pix)
	}
}

// TestFitSharesTheBudget: a fit waits for its share of the budget, as long as its
// context allows.
func TestFitSharesTheBudget(t *testing.T) {
	f := New(smallOptions)
	data := testimage.PNG(1000, 600, 2, 8, false, false) // 2.4 MB decoded
	p, _ := planImage(data, true, hopeful)
	need := f.need(p, int64(len(data)))
	t.Logf("1000x600 PNG needs %d KB of the budget", need>>10)
	if need <= smallOptions.Budget-6<<20 || need > smallOptions.Budget {
		t.Fatalf("need %d: it would not wait for 6 MB taken from %d MB", need, smallOptions.Budget>>20)
	}
	// Another fit holds most of the budget: this one waits, then gives up.
	if err := f.budget.Acquire(context.Background(), 6<<20); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.Fit(ctx, int64(len(data)), fromMemory(data, nil))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 150*time.Millisecond {
		t.Errorf("while the budget is taken: %v after %v", err, time.Since(start))
	}
	// Once it is given back, the waiting fit goes on.
	done := make(chan error, 1)
	go func() {
		_, err := f.Fit(context.Background(), int64(len(data)), fromMemory(data, nil))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("fit ran while the budget was taken: %v", err)
	default:
	}
	f.budget.Release(6 << 20)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// All of it is free again.
	if !f.budget.TryAcquire(smallOptions.Budget) {
		t.Error("the budget was not given back")
	}
}

// TestFitHeaderThenWholeFile: a JPEG whose first MB leaves its colour conversion open
// is planned hopefully from the header, then again from the whole file, which turns
// out to need more: the fit asks for the larger share and succeeds.
func TestFitHeaderThenWholeFile(t *testing.T) {
	j := testimage.JPEG{Width: 1000, Height: 700, Sampling: []byte{0x22, 0x11, 0x11}, Adobe: -1}.Bytes()
	// Pad the scan to over 1 MB (image/jpeg ignores bytes between segments), then an
	// Adobe APP14 that makes it convert to RGB: 2.8 MB more.
	eoi := len(j) - 2
	data := append(append(append([]byte(nil), j[:eoi]...), make([]byte, 2<<20)...),
		append([]byte{0xff, 0xee, 0, 14, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 0}, j[eoi:]...)...)
	f := New(smallOptions)
	head, _ := planImage(data[:headerLimit], false, hopeful)
	whole, _ := planImage(data, true, hopeful)
	if whole.decode-head.decode != 4*1000*700 {
		t.Fatalf("header %d, whole file %d", head.decode, whole.decode)
	}
	var reads atomic.Int32
	img, err := f.Fit(context.Background(), int64(len(data)), fromMemory(data, &reads))
	if err != nil || img.MIME != "image/jpeg" || reads.Load() != 3 {
		t.Fatalf("Fit: %q %v, %d reads", img.Desc, err, reads.Load())
	}
	if !strings.Contains(img.Desc, "1000x700") || !f.budget.TryAcquire(smallOptions.Budget) {
		t.Errorf("%q, or the budget was not given back", img.Desc)
	}
}
