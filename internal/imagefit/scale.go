package imagefit

import (
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"

	"golang.org/x/image/draw"
)

// scaleCost is what scaleDown allocates turning the decoded image of p into nw x nh.
func scaleCost(p plan, nw, nh int) int64 {
	w, h, tw, th := int64(p.width), int64(p.height), int64(nw), int64(nh)
	cost := 4 * tw * th // the result
	if p.gifFrame {
		// The first frame may be any size up to the screen's. For a frame of a x b
		// averaged in f x f blocks (f >= 2 at most b/th), the strip takes 4af <= 4w(h/th)
		// and the averaged copy 4(a/f)(b/f) <= ab <= wh.
		if h/th >= 2 || w/tw >= 2 {
			cost += 4*w*max(1, h/th) + w*h
		}
		return cost
	}
	if f := max(1, min(w/tw, h/th)); f > 1 {
		cost += 4*w*f + 4*(w/f)*(h/f) // the strip of rows, the averaged copy
	}
	return cost
}

// scaleDown scales src to nw x nh. It first averages f x f blocks (f the whole factor
// by which src is larger), one strip of rows at a time, and then interpolates
// bilinearly to the exact size: as sharp as a windowed filter for charts and photos,
// and it needs no scratch space of the source's size (x/image/draw's kernels keep a
// float64 buffer of destination width times source height, 150 MB for 4000x3000).
func scaleDown(src image.Image, nw, nh int) *image.RGBA {
	sb := src.Bounds()
	f := max(1, min(sb.Dx()/nw, sb.Dy()/nh))
	mid := src
	if f > 1 {
		mw, mh := sb.Dx()/f, sb.Dy()/f
		m := image.NewRGBA(image.Rect(0, 0, mw, mh))
		strip := image.NewRGBA(image.Rect(0, 0, sb.Dx(), f))
		n := uint32(f * f)
		for my := range mh {
			draw.Draw(strip, strip.Bounds(), src, image.Pt(sb.Min.X, sb.Min.Y+my*f), draw.Src)
			out := m.Pix[my*m.Stride:]
			for mx := range mw {
				var r, g, b, a uint32
				for y := range f {
					row := strip.Pix[y*strip.Stride+mx*f*4:]
					for x := range f {
						px := row[x*4 : x*4+4]
						r += uint32(px[0])
						g += uint32(px[1])
						b += uint32(px[2])
						a += uint32(px[3])
					}
				}
				o := out[mx*4 : mx*4+4]
				o[0], o[1], o[2], o[3] = uint8(r/n), uint8(g/n), uint8(b/n), uint8(a/n)
			}
		}
		mid = m
	}
	dst := image.NewRGBA(image.Rect(0, 0, nw, nh))
	draw.ApproxBiLinear.Scale(dst, dst.Bounds(), mid, mid.Bounds(), draw.Src, nil)
	return dst
}

// encode encodes the scaled image in at most maxBytes. Photographs stay JPEG; drawings
// and screenshots stay PNG (sharp edges, text) unless that is too large. The encoders
// write into one buffer of maxBytes, so an encoding that does not fit stops there.
func encode(m *image.RGBA, format string, maxBytes int) ([]byte, string, error) {
	w := &cappedWriter{buf: make([]byte, 0, maxBytes)}
	if format != "jpeg" {
		if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(w, m); err == nil {
			return w.buf, "image/png", nil
		}
	}
	flattenOnWhite(m) // JPEG has no alpha
	for _, q := range []int{85, 70, 50} {
		w.buf = w.buf[:0]
		err := jpeg.Encode(w, m, &jpeg.Options{Quality: q})
		if err == nil {
			return w.buf, "image/jpeg", nil
		}
		if !errors.Is(err, errFull) {
			return nil, "", fmt.Errorf("encoding: %w", err)
		}
	}
	return nil, "", fmt.Errorf("encoding: even as a JPEG of quality 50 it takes more than %s", bytesText(int64(maxBytes)))
}

// flattenOnWhite puts the premultiplied pixels of m on a white background, in place.
func flattenOnWhite(m *image.RGBA) {
	for i := 0; i+3 < len(m.Pix); i += 4 {
		p := m.Pix[i : i+4 : i+4]
		if t := 255 - p[3]; t != 0 {
			p[0], p[1], p[2], p[3] = p[0]+t, p[1]+t, p[2]+t, 255
		}
	}
}

var errFull = errors.New("the encoded image is over the size limit")

// cappedWriter keeps what is written up to its buffer's capacity and fails beyond.
type cappedWriter struct{ buf []byte }

func (w *cappedWriter) Write(p []byte) (int, error) {
	if len(p) > cap(w.buf)-len(w.buf) {
		return 0, errFull
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}
