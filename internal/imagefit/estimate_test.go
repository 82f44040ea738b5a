package imagefit

import (
	"bytes"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"runtime"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testimage"
)

// allocated returns the bytes decoding data with the decoder of format allocates.
func allocated(t *testing.T, format string, data []byte) int64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := decode(format, data)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("decoding: %v", err)
	}
	return int64(after.TotalAlloc - before.TotalAlloc)
}

// checkEstimate says whether the plan's decoding cost covers what the decoder really
// allocates, and is not far above it.
func checkEstimate(t *testing.T, name string, data []byte, wantKind string) plan {
	t.Helper()
	p, err := planImage(data, true, hopeful)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	got := allocated(t, p.format, data)
	t.Logf("%-34s %-17s %5dx%-5d estimate %9d B, decoder allocated %9d B (%.2f)", name, p.kind, p.width, p.height, p.decode, got, float64(p.decode)/float64(got))
	if p.kind != wantKind {
		t.Errorf("%s: kind %q, want %q", name, p.kind, wantKind)
	}
	if p.decode < got {
		t.Errorf("%s: estimate %d B is below the %d B the decoder allocated", name, p.decode, got)
	}
	if p.decode > got+got/8+decoderOverhead {
		t.Errorf("%s: estimate %d B is far above the %d B the decoder allocated", name, p.decode, got)
	}
	return p
}

func TestJPEGEstimates(t *testing.T) {
	samplings := map[string][]byte{
		"gray":  {0x11},
		"4:4:4": {0x11, 0x11, 0x11},
		"4:4:0": {0x12, 0x11, 0x11},
		"4:2:2": {0x21, 0x11, 0x11},
		"4:2:0": {0x22, 0x11, 0x11},
		"4:1:1": {0x41, 0x11, 0x11},
		"4:1:0": {0x42, 0x11, 0x11},
		"CMYK":  {0x11, 0x11, 0x11, 0x11},
		"YCCK":  {0x22, 0x11, 0x11, 0x22},
	}
	for name, s := range samplings {
		for _, progressive := range []bool{false, true} {
			j := testimage.JPEG{Width: 401, Height: 303, Sampling: s, Progressive: progressive, Adobe: -1}
			kind := "baseline JPEG"
			if progressive {
				kind = "progressive JPEG"
			}
			if len(s) == 4 {
				j.Adobe = 0 // image/jpeg needs it to decode four components
				if name == "YCCK" {
					j.Adobe = 2
				}
			}
			checkEstimate(t, kind+" "+name, j.Bytes(), kind)
		}
	}

	// Go's own encoder: 4:2:0 with nothing to convert.
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 480, 360)), nil); err != nil {
		t.Fatal(err)
	}
	checkEstimate(t, "image/jpeg's own", buf.Bytes(), "baseline JPEG")

	// Converted to RGB: by the Adobe transform, by the component ids, or by an APP14
	// after the frame header, which the whole file shows.
	for name, j := range map[string]testimage.JPEG{
		"Adobe RGB":      {Width: 400, Height: 300, Sampling: []byte{0x11, 0x11, 0x11}, Adobe: 0},
		"ids R G B":      {Width: 400, Height: 300, Sampling: []byte{0x11, 0x11, 0x11}, IDs: []byte("RGB"), Adobe: -1, Progressive: true},
		"JFIF, no Adobe": {Width: 400, Height: 300, Sampling: []byte{0x22, 0x11, 0x11}, JFIF: true, Adobe: -1},
	} {
		p := checkEstimate(t, name, j.Bytes(), map[bool]string{false: "baseline JPEG", true: "progressive JPEG"}[j.Progressive])
		if converts := p.decode > 4*400*300+decoderOverhead; converts == (name == "JFIF, no Adobe") {
			t.Errorf("%s: estimate %d: conversion to RGB counted %v", name, p.decode, converts)
		}
	}
	late := insertAfterFrame(testimage.JPEG{Width: 400, Height: 300, Sampling: []byte{0x22, 0x11, 0x11}, Adobe: -1}.Bytes(),
		[]byte{0xff, 0xee, 0, 14, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 0})
	p := checkEstimate(t, "Adobe RGB after the frame header", late, "baseline JPEG")
	head, _ := planImage(late[:len(late)/2], false, hopeful)
	worst, _ := planImage(late[:len(late)/2], false, cautious)
	if head.decode >= p.decode || worst.decode < p.decode {
		t.Errorf("half the file: hopeful %d, cautious %d, whole file %d", head.decode, worst.decode, p.decode)
	}
}

// insertAfterFrame puts seg right after the frame header of a JPEG.
func insertAfterFrame(data, seg []byte) []byte {
	f, err := parseJPEGFrame(data)
	if err != nil {
		panic(err)
	}
	return append(append(append([]byte(nil), data[:f.end]...), seg...), data[f.end:]...)
}

func TestPNGEstimates(t *testing.T) {
	for _, c := range []struct {
		colour, depth byte
		trns          bool
	}{{0, 1, false}, {0, 8, false}, {0, 8, true}, {0, 16, false}, {0, 16, true}, {2, 8, false}, {2, 8, true},
		{2, 16, false}, {3, 4, false}, {3, 8, true}, {4, 8, false}, {4, 16, false}, {6, 8, false}, {6, 16, false}} {
		for _, interlaced := range []bool{false, true} {
			kind := "PNG"
			if interlaced {
				kind = "interlaced PNG"
			}
			name := kind + " colour " + string('0'+c.colour) + " depth " + map[byte]string{1: "1", 4: "4", 8: "8", 16: "16"}[c.depth]
			if c.trns {
				name += " tRNS"
			}
			checkEstimate(t, name, testimage.PNG(401, 303, c.colour, c.depth, interlaced, c.trns), kind)
		}
	}
	// image/png's own encoder, and an interlaced PNG read only in part: tRNS may
	// still come, so the header alone counts it.
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, 600, 400))); err != nil {
		t.Fatal(err)
	}
	p := checkEstimate(t, "image/png's own gray", buf.Bytes(), "PNG")
	if head, _ := planImage(buf.Bytes()[:33], false, hopeful); head.decode < 4*600*400 || p.decode > 2*600*400+decoderOverhead {
		t.Errorf("gray PNG: from IHDR alone %d, from the whole file %d", head.decode, p.decode)
	}
}

func TestGIFAndWebPEstimates(t *testing.T) {
	pal := image.NewPaletted(image.Rect(0, 0, 600, 400), color.Palette{color.White, color.Black})
	var buf bytes.Buffer
	if err := gif.Encode(&buf, pal, nil); err != nil {
		t.Fatal(err)
	}
	// image/gif copies the first frame once more if it is interlaced, which only the
	// frame's own descriptor says: the estimate counts the copy.
	p, err := planImage(buf.Bytes(), true, hopeful)
	if err != nil {
		t.Fatal(err)
	}
	if got := allocated(t, "gif", buf.Bytes()); p.kind != "GIF" || p.decode < got || p.decode > 2*got+decoderOverhead {
		t.Errorf("GIF: %s, estimate %d B, allocated %d B", p.kind, p.decode, got)
	}

	for _, f := range []struct {
		path, kind string
		exact      bool // no lossless part, priced at its worst
	}{
		{"../../integration/testdata/images/large-lossy.webp", "lossy WebP", true},
		{"testdata/yellow_rose.lossy-with-alpha.webp", "lossy WebP", false},
		{"testdata/tux.lossless.webp", "lossless WebP", false},
		{"testdata/gopher-doc.2bpp.lossless.webp", "lossless WebP", false},
	} {
		data, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		// Lossless WebP, and the lossless alpha of lossy WebP, are priced at their
		// worst (up to 2600 Huffman groups of the largest trees), far above what a
		// real file needs: only the bound is checked.
		p, err := planImage(data, true, hopeful)
		if err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
		got := allocated(t, p.format, data)
		t.Logf("%-42s %-13s %dx%d estimate %d B, decoder allocated %d B", f.path, p.kind, p.width, p.height, p.decode, got)
		if p.kind != f.kind || p.decode < got {
			t.Errorf("%s: %s, estimate %d B, allocated %d B", f.path, p.kind, p.decode, got)
		}
		if f.exact && p.decode > 2*got+decoderOverhead+512<<10+int64(len(data)) {
			t.Errorf("%s: estimate %d B far above the %d B allocated", f.path, p.decode, got)
		}
	}
}

// TestLosslessWebPWorstCase: a 128x128 lossless WebP of 50 KB whose Huffman groups are
// as large as image data can ask for, 150 of them, allocates some 12 MB (80 MB with
// 999, 200 MB with 2600), within the estimate.
func TestLosslessWebPWorstCase(t *testing.T) {
	data := testimage.HuffmanWebP(128, 128, 150)
	p, err := planImage(data, true, hopeful)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = decode("webp", data)
	runtime.ReadMemStats(&after)
	got := int64(after.TotalAlloc - before.TotalAlloc)
	t.Logf("%d KB file, %s %dx%d: decoder allocated %d MB (%v), estimate %d MB", len(data)>>10, p.kind, p.width, p.height, got>>20, err, p.decode>>20)
	if err == nil || got < 150*vp8lGroupKept {
		t.Fatalf("the crafted file did not make the decoder build its groups: %d B, %v", got, err)
	}
	if p.decode < got {
		t.Errorf("estimate %d B is below the %d B the decoder allocated", p.decode, got)
	}
}
