package imagefit

import (
	"bytes"
	"errors"
)

// headerLimit is how far into a file the headers are looked for: a JPEG's frame header
// must start within it. Markers before the frame header (Exif, ICC profiles, XMP) take
// a few hundred KB at most in real files.
const headerLimit = 1 << 20

// The parser's errors are fixed values, so that parsing allocates nothing.
var (
	errNotJPEG       = errors.New("it has no JPEG start-of-image marker")
	errJPEGNoFrame   = errors.New("no JPEG frame header within its first 1 MB")
	errJPEGSegment   = errors.New("a JPEG segment before the frame header is malformed")
	errJPEGMarker    = errors.New("a JPEG marker before the frame header is not one of baseline or progressive JPEG")
	errJPEGFrame     = errors.New("its JPEG frame header is malformed")
	errJPEGPrecision = errors.New("it is a JPEG with more than 8 bits per sample, which is not supported")
	errJPEGSampling  = errors.New("its JPEG chroma subsampling is not supported")
)

// jpegFrame is what a JPEG's frame header (SOF0, SOF1 or SOF2) says, with the two
// markers before it that decide whether Go's decoder converts the pixels to RGB.
type jpegFrame struct {
	width, height  int
	progressive    bool
	nComp          int    // 1 (gray), 3 (YCbCr or RGB) or 4 (CMYK or YCCK)
	h, v           [4]int // sampling factors, as image/jpeg uses them (1x1 for gray)
	ids            [4]byte
	jfif           bool // the last APP0 before the frame header was a JFIF one
	adobe          bool // an Adobe APP14 came before the frame header
	adobeTransform byte
	end            int // offset just past the frame header
}

// parseJPEGFrame reads the markers of a JPEG up to its first frame header, looking at
// no more than the first headerLimit bytes of data, and allocates nothing. It is
// stricter than image/jpeg: only the segments that may come before a frame header in a
// baseline or progressive JPEG are accepted (APPn, COM, DQT, DHT, DRI), each exactly
// where the previous one ends, so that both read the same frame header: image/jpeg
// refuses a second one.
func parseJPEGFrame(data []byte) (jpegFrame, error) {
	b := data[:min(len(data), headerLimit)]
	if len(b) < 2 || b[0] != 0xff || b[1] != 0xd8 {
		return jpegFrame{}, errNotJPEG
	}
	var f jpegFrame
	pos := 2
	for {
		if pos >= len(b) {
			return jpegFrame{}, errJPEGNoFrame
		}
		if b[pos] != 0xff {
			return jpegFrame{}, errJPEGSegment
		}
		for pos < len(b) && b[pos] == 0xff { // fill bytes may precede a marker
			pos++
		}
		if pos+3 > len(b) {
			return jpegFrame{}, errJPEGNoFrame
		}
		marker := b[pos]
		n := int(b[pos+1])<<8 | int(b[pos+2]) // the length counts its own two bytes
		pos += 3
		if n < 2 {
			return jpegFrame{}, errJPEGSegment
		}
		if pos+n-2 > len(b) {
			return jpegFrame{}, errJPEGNoFrame
		}
		seg := b[pos : pos+n-2]
		pos += n - 2
		switch {
		case marker == 0xc0 || marker == 0xc1 || marker == 0xc2: // SOF0, SOF1, SOF2
			f.progressive = marker == 0xc2
			f.end = pos
			return f, f.readSOF(seg)
		case marker == 0xe0: // APP0: image/jpeg looks for JFIF in every one, the last wins
			if len(seg) >= 5 {
				f.jfif = string(seg[:5]) == "JFIF\x00"
			}
		case marker == 0xee: // APP14
			if len(seg) >= 12 && string(seg[:5]) == "Adobe" {
				f.adobe, f.adobeTransform = true, seg[11]
			}
		case marker >= 0xe1 && marker <= 0xef, marker == 0xfe, // APPn, COM
			marker == 0xc4, marker == 0xdb, marker == 0xdd: // DHT, DQT, DRI
		default:
			return jpegFrame{}, errJPEGMarker
		}
	}
}

// readSOF reads the frame header's fields and checks them as image/jpeg does, so that
// a frame accepted here is laid out in memory exactly as jpegDecodeCost assumes.
func (f *jpegFrame) readSOF(seg []byte) error {
	switch len(seg) {
	case 6 + 3*1:
		f.nComp = 1
	case 6 + 3*3:
		f.nComp = 3
	case 6 + 3*4:
		f.nComp = 4
	default:
		return errJPEGFrame
	}
	if seg[0] != 8 {
		return errJPEGPrecision
	}
	f.height = int(seg[1])<<8 | int(seg[2])
	f.width = int(seg[3])<<8 | int(seg[4])
	if f.width == 0 || f.height == 0 || int(seg[5]) != f.nComp {
		return errJPEGFrame
	}
	for i := range f.nComp {
		c := seg[6+3*i:]
		f.ids[i] = c[0]
		if bytes.IndexByte(f.ids[:i], c[0]) >= 0 || c[2] > 3 { // repeated id, bad table
			return errJPEGFrame
		}
		hv := c[1]
		h, v := int(hv>>4), int(hv&0x0f)
		if h < 1 || h > 4 || v < 1 || v > 4 || h == 3 || v == 3 {
			return errJPEGSampling
		}
		switch f.nComp {
		case 1: // one component is never interleaved: image/jpeg takes it as 1x1
			h, v = 1, 1
		case 3: // 4:4:4, 4:4:0, 4:2:2, 4:2:0, 4:1:1 or 4:1:0, both chroma alike
			switch {
			case i == 0 && v == 4,
				i == 1 && (f.h[0]%h != 0 || f.v[0]%v != 0),
				i == 2 && (h != f.h[1] || v != f.v[1]):
				return errJPEGSampling
			}
		case 4: // only 11 11 11 11 and 22 11 11 22
			switch {
			case i == 0 && hv != 0x11 && hv != 0x22,
				(i == 1 || i == 2) && hv != 0x11,
				i == 3 && (h != f.h[0] || v != f.v[0]):
				return errJPEGSampling
			}
		}
		f.h[i], f.v[i] = h, v
	}
	return nil
}

// rgbAtFrame reports whether image/jpeg, had the file ended its markers at the frame
// header, would convert a three-component image to RGB (isRGB in its reader.go).
func (f *jpegFrame) rgbAtFrame() bool {
	if f.nComp != 3 || f.jfif {
		return false
	}
	return f.adobe && f.adobeTransform == 0 || f.ids[0] == 'R' && f.ids[1] == 'G' && f.ids[2] == 'B'
}

// laterColourMarkers reports whether an APP0 or APP14 marker may follow the frame
// header in data: image/jpeg reads them anywhere, and they change whether it converts
// to RGB. Entropy-coded data escapes 0xff, so the byte pairs cannot hide in a scan;
// finding them inside another segment only makes the estimate cautious.
func (f *jpegFrame) laterColourMarkers(data []byte) bool {
	rest := data[f.end:]
	return bytes.Contains(rest, []byte{0xff, 0xe0}) || bytes.Contains(rest, []byte{0xff, 0xee})
}

// jpegDecodeCost is what image/jpeg allocates decoding the frame f (its scan.go and
// reader.go): the image in MCU-aligned planes, a progressive JPEG's coefficients (a
// block of 64 int32 per 8x8 block of every component, kept until the last scan), and
// the RGBA or CMYK copy it makes of a CMYK, YCCK or RGB image. convert says whether a
// three-component image may be converted.
func jpegDecodeCost(f jpegFrame, convert bool) int64 {
	w, h := int64(f.width), int64(f.height)
	h0, v0 := int64(f.h[0]), int64(f.v[0])
	mxx, myy := ceilDiv(w, 8*h0), ceilDiv(h, 8*v0) // MCUs across and down
	var img int64
	if f.nComp == 1 {
		img = 64 * mxx * myy
	} else {
		pw, ph := 8*h0*mxx, 8*v0*myy
		cw, ch := ceilDiv(pw, h0/int64(f.h[1])), ceilDiv(ph, v0/int64(f.v[1]))
		img = pw*ph + 2*cw*ch
		if f.nComp == 4 {
			img += 64 * int64(f.h[3]*f.v[3]) * mxx * myy
		}
	}
	var coeffs int64
	if f.progressive {
		for i := range f.nComp {
			coeffs += mxx * myy * int64(f.h[i]*f.v[i]) * 64 * 4
		}
	}
	var conversion int64
	if f.nComp == 4 || f.nComp == 3 && convert {
		conversion = 4 * w * h
	}
	return img + coeffs + conversion + decoderOverhead
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
