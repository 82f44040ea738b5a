package imagefit

import (
	"bytes"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"os"
	"runtime"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testimage"
)

// seeds are small files of every format and shape the planner knows.
func seeds(f *testing.F) {
	for _, s := range [][]byte{{0x11}, {0x11, 0x11, 0x11}, {0x12, 0x11, 0x11}, {0x21, 0x11, 0x11}, {0x22, 0x11, 0x11},
		{0x41, 0x11, 0x11}, {0x42, 0x11, 0x11}, {0x11, 0x11, 0x11, 0x11}, {0x22, 0x11, 0x11, 0x22}} {
		for _, progressive := range []bool{false, true} {
			j := testimage.JPEG{Width: 33, Height: 17, Sampling: s, Progressive: progressive, Adobe: -1}
			if len(s) == 4 {
				j.Adobe = 2
			}
			f.Add(j.Bytes())
		}
	}
	f.Add(testimage.JPEG{Width: 40, Height: 30, Sampling: []byte{0x11, 0x11, 0x11}, IDs: []byte("RGB"), JFIF: true, Adobe: 0}.Bytes())
	f.Add(insertAfterFrame(testimage.JPEG{Width: 16, Height: 16, Sampling: []byte{0x22, 0x11, 0x11}, Adobe: -1}.Bytes(),
		[]byte{0xff, 0xee, 0, 14, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 0}))
	var buf bytes.Buffer
	jpeg.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 20, 10)), nil)
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:len(buf.Bytes())/2])
	f.Add([]byte("\xff\xd8\xff\xff\xff\xe1\x00\x04ab\xff\xc2\x00\x0b\x08\x00\x10\x00\x10\x01\x01\x11\x00"))
	for _, c := range [][2]byte{{0, 1}, {0, 16}, {2, 8}, {3, 2}, {4, 8}, {6, 16}} {
		f.Add(testimage.PNG(13, 7, c[0], c[1], false, c[0] != 4 && c[0] != 6 && c[1] != 16))
		f.Add(testimage.PNG(13, 7, c[0], c[1], true, false))
	}
	buf.Reset()
	gif.Encode(&buf, image.NewPaletted(image.Rect(0, 0, 9, 5), color.Palette{color.Black, color.White}), nil)
	f.Add(buf.Bytes())
	f.Add(testimage.HuffmanWebP(8, 8, 2))
	for _, p := range []string{"testdata/gopher-doc.2bpp.lossless.webp", "testdata/yellow_rose.lossy-with-alpha.webp"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// FuzzJPEGFrame: the frame-header parser never panics, allocates nothing, looks no
// further than headerLimit, and reads the same size and components as image/jpeg.
func FuzzJPEGFrame(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := parseJPEGFrame(data)
		if allocs := testing.AllocsPerRun(1, func() { parseJPEGFrame(data) }); allocs != 0 {
			t.Fatalf("parsing allocated %v times", allocs)
		}
		if err != nil {
			return
		}
		if fr.end > headerLimit || fr.end > len(data) || fr.width <= 0 || fr.height <= 0 {
			t.Fatalf("frame %+v from %d bytes", fr, len(data))
		}
		cfg, err := jpeg.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			return // image/jpeg may refuse later segments that the parser does not read
		}
		comps := map[color.Model]int{color.GrayModel: 1, color.YCbCrModel: 3, color.RGBAModel: 3, color.CMYKModel: 4}[cfg.ColorModel]
		if cfg.Width != fr.width || cfg.Height != fr.height || comps != fr.nComp {
			t.Fatalf("image/jpeg reads %dx%d with %d components, the parser %dx%d with %d", cfg.Width, cfg.Height, comps, fr.width, fr.height, fr.nComp)
		}
	})
}

// FuzzPlanImage: planning any file never panics and allocates nothing, and for an
// image small enough to decode quickly, the decoder allocates no more than planned.
// The planner's loops are bounded by the data: each step moves forward by a chunk or
// segment header at least.
func FuzzPlanImage(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := planImage(data, true, hopeful)
		if allocs := testing.AllocsPerRun(1, func() { planImage(data, true, hopeful) }); allocs != 0 {
			t.Fatalf("planning allocated %v times", allocs)
		}
		if err != nil {
			return
		}
		if p.width <= 0 || p.height <= 0 || p.decode <= 0 {
			t.Fatalf("plan %+v", p)
		}
		// The header alone, hoping or not, and the whole file agree on the size.
		for _, a := range []assumption{hopeful, cautious} {
			if h, err := planImage(data[:min(len(data), 64)], len(data) <= 64, a); err == nil && (h.width != p.width || h.height != p.height) {
				t.Fatalf("from 64 bytes %dx%d, from all %dx%d", h.width, h.height, p.width, p.height)
			}
		}
		if int64(p.width)*int64(p.height) > 1<<20 || p.decode > 256<<20 {
			return
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		decode(p.format, data)
		runtime.ReadMemStats(&after)
		if got := int64(after.TotalAlloc - before.TotalAlloc); got > p.decode {
			t.Fatalf("%s %dx%d: the decoder allocated %d B, planned %d B", p.kind, p.width, p.height, got, p.decode)
		}
	})
}
