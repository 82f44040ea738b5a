package imagefit

import (
	"encoding/binary"
	"errors"
)

// decoderOverhead covers what a decoder allocates whatever the image's size: its own
// state, Huffman or LZW tables, a zlib window, a read buffer.
const decoderOverhead = 256 << 10

// encodeOverhead covers the PNG and JPEG encoders' state (zlib's tables, row buffers).
const encodeOverhead = 2 << 20

// plan is what decoding and fitting one image takes, read from its headers.
type plan struct {
	format        string // "jpeg", "png", "gif" or "webp", as image.Decode names them
	width, height int
	kind          string // for people: "progressive JPEG", "interlaced PNG", ...
	decode        int64  // bytes the decoder allocates
	// gifFrame: the decoded image may be smaller than width x height (a GIF's first
	// frame inside its logical screen), which changes the scaling's scratch space.
	gifFrame bool
}

// assumption says how to fill in what the bytes at hand do not tell.
type assumption int

const (
	// hopeful takes the cheaper case where a header read only in part leaves a
	// choice open; the plan is made again from the whole file before decoding.
	hopeful assumption = iota
	// cautious takes the dearer case: the plan is then an upper bound for whatever
	// the rest of the file holds.
	cautious
)

// planImage reads the headers at the start of data, which is the whole file when
// complete, and says what decoding it would take. It allocates nothing.
func planImage(data []byte, complete bool, a assumption) (plan, error) {
	switch {
	case len(data) >= 2 && data[0] == 0xff && data[1] == 0xd8:
		return planJPEG(data, complete, a)
	case len(data) >= 8 && string(data[:8]) == "\x89PNG\r\n\x1a\n":
		return planPNG(data, complete)
	case len(data) >= 6 && (string(data[:6]) == "GIF87a" || string(data[:6]) == "GIF89a"):
		return planGIF(data)
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP":
		return planWebP(data, complete, a)
	}
	return plan{}, errUnknownFormat
}

var errUnknownFormat = errors.New("it is not a PNG, JPEG, GIF or WebP file")

func planJPEG(data []byte, complete bool, a assumption) (plan, error) {
	f, err := parseJPEGFrame(data)
	if err != nil {
		return plan{}, err
	}
	convert := f.rgbAtFrame()
	if !convert && f.nComp == 3 {
		if complete {
			convert = f.laterColourMarkers(data)
		} else {
			convert = a == cautious
		}
	}
	kind := "baseline JPEG"
	if f.progressive {
		kind = "progressive JPEG"
	}
	return plan{format: "jpeg", width: f.width, height: f.height, kind: kind, decode: jpegDecodeCost(f, convert)}, nil
}

var (
	errPNGHeader = errors.New("its PNG header (IHDR) is malformed or not first")
	errPNGChunk  = errors.New("a PNG chunk before the image data is malformed")
)

// planPNG reads the IHDR chunk, which must come first, and the chunks up to the first
// IDAT, where a tRNS chunk makes image/png decode gray and truecolor images with alpha.
func planPNG(data []byte, complete bool) (plan, error) {
	if len(data) < 33 || binary.BigEndian.Uint32(data[8:]) != 13 || string(data[12:16]) != "IHDR" {
		return plan{}, errPNGHeader
	}
	ihdr := data[16:29]
	w, h := binary.BigEndian.Uint32(ihdr[0:]), binary.BigEndian.Uint32(ihdr[4:])
	depth, colour, interlace := ihdr[8], ihdr[9], ihdr[12]
	if w == 0 || h == 0 || w > 1<<31-1 || h > 1<<31-1 || ihdr[10] != 0 || ihdr[11] != 0 || interlace > 1 {
		return plan{}, errPNGHeader
	}
	if !pngDepthOK(colour, depth) {
		return plan{}, errPNGHeader
	}
	channels := [7]int64{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
	// Whether a tRNS chunk comes before the image data: taken to be there until the
	// first IDAT shows otherwise.
	trns, sawTRNS := true, false
	for pos := 33; pos+8 <= len(data); {
		n := int64(binary.BigEndian.Uint32(data[pos:]))
		typ := string(data[pos+4 : pos+8])
		if typ == "IDAT" {
			trns = sawTRNS
			break
		}
		sawTRNS = sawTRNS || typ == "tRNS"
		if n > 1<<31-1 || int64(pos)+12+n > int64(len(data)) {
			if complete {
				return plan{}, errPNGChunk
			}
			break
		}
		pos += 12 + int(n)
	}
	p := plan{format: "png", width: int(w), height: int(h), kind: "PNG"}
	if interlace == 1 {
		p.kind = "interlaced PNG"
	}
	if int64(w)*int64(h) > 1<<40 { // a terapixel: no need to count, and no overflow
		p.decode = 1 << 62
		return p, nil
	}
	pixel := pngPixelBytes(colour, depth, trns)
	bits := int64(depth) * channels
	row := func(w int64) int64 { return 1 + (bits*w+7)/8 } // a filter byte, then the row
	W, H := int64(w), int64(h)
	cost := W*H*pixel + 2*row(W)
	if interlace == 1 {
		// image/png decodes each Adam7 pass into an image of its own, then copies it
		// into the full one: twice the pixels in all.
		for _, p := range adam7 {
			pw, ph := (W-p[0]+p[2]-1)/p[2], (H-p[1]+p[3]-1)/p[3]
			if pw > 0 && ph > 0 {
				cost += pw*ph*pixel + 2*row(pw)
			}
		}
	}
	p.decode = cost + decoderOverhead
	return p, nil
}

// adam7 is each interlacing pass's x and y offset and x and y step.
var adam7 = [7][4]int64{{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}}

func pngDepthOK(colour, depth byte) bool {
	switch colour {
	case 0:
		return depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16
	case 3:
		return depth == 1 || depth == 2 || depth == 4 || depth == 8
	case 2, 4, 6:
		return depth == 8 || depth == 16
	}
	return false
}

// pngPixelBytes is the size of a pixel of the image image/png returns.
func pngPixelBytes(colour, depth byte, trns bool) int64 {
	switch {
	case colour == 3: // paletted
		return 1
	case colour == 0 && !trns: // Gray or Gray16
		return int64(max(depth, 8)) / 8
	case depth == 16: // NRGBA64 or RGBA64
		return 8
	}
	return 4 // RGBA or NRGBA
}

var errGIFHeader = errors.New("its GIF header is malformed")

// planGIF reads the logical screen's size. image/gif decodes only the first frame, which
// lies inside the screen, and undoing interlacing copies it once.
func planGIF(data []byte) (plan, error) {
	if len(data) < 10 {
		return plan{}, errGIFHeader
	}
	w, h := int64(binary.LittleEndian.Uint16(data[6:])), int64(binary.LittleEndian.Uint16(data[8:]))
	if w == 0 || h == 0 {
		return plan{}, errGIFHeader
	}
	return plan{format: "gif", width: int(w), height: int(h), kind: "GIF", decode: 2*w*h + decoderOverhead, gifFrame: true}, nil
}

var (
	errWebPChunk   = errors.New("a WebP chunk is malformed or out of place")
	errWebPNoImage = errors.New("no WebP image data within its first 1 MB")
)

// planWebP walks the RIFF chunks as golang.org/x/image/webp does, up to the first
// VP8 (lossy) or VP8L (lossless) chunk, where its decoder stops.
func planWebP(data []byte, complete bool, a assumption) (plan, error) {
	left := int64(binary.LittleEndian.Uint32(data[4:])) - 4 // bytes of chunks the RIFF header declares
	if left < 0 {
		return plan{}, errWebPChunk
	}
	var (
		seenVP8X, wantAlpha bool
		w, h                int64
		alpha               int64 = -1 // bytes the ALPH chunk takes; -1: none
	)
	for pos := 12; ; {
		if left == 0 {
			return plan{}, errWebPNoImage
		}
		if left < 8 {
			return plan{}, errWebPChunk
		}
		if pos+8 > len(data) {
			break // the header read ends here
		}
		id := string(data[pos : pos+4])
		n := int64(binary.LittleEndian.Uint32(data[pos+4:]))
		left -= 8
		if n > left {
			return plan{}, errWebPChunk
		}
		body := data[pos+8 : pos+8+int(min(n, int64(len(data)-pos-8)))]
		switch id {
		case "VP8X":
			if seenVP8X || n != 10 || len(body) < 10 {
				return plan{}, errWebPChunk
			}
			seenVP8X, wantAlpha = true, body[0]&0x10 != 0
			w = int64(body[4]) | int64(body[5])<<8 | int64(body[6])<<16 + 1
			h = int64(body[7]) | int64(body[8])<<8 | int64(body[9])<<16 + 1
			if w*h > 1<<31-1 {
				return plan{}, errWebPChunk
			}
		case "ALPH":
			if !wantAlpha || len(body) < 1 {
				return plan{}, errWebPChunk
			}
			wantAlpha = false
			switch body[0] & 3 {
			case 0: // raw alpha
				alpha = w * h
			case 1: // alpha coded as a lossless image's green
				if w > 1<<14 || h > 1<<14 {
					return plan{}, errWebPChunk
				}
				alpha = vp8lDecodeCost(w, h) + w*h
			default:
				return plan{}, errWebPChunk
			}
		case "VP8 ":
			if wantAlpha || len(body) < 10 || body[0]&1 != 0 || string(body[3:6]) != "\x9d\x01\x2a" {
				return plan{}, errWebPChunk // ALPH missing, not a key frame, no start code
			}
			fw := int64(binary.LittleEndian.Uint16(body[6:]) & 0x3fff)
			fh := int64(binary.LittleEndian.Uint16(body[8:]) & 0x3fff)
			if fw == 0 || fh == 0 || seenVP8X && (fw != w || fh != h) {
				return plan{}, errWebPChunk
			}
			return plan{format: "webp", width: int(fw), height: int(fh), kind: "lossy WebP",
				decode: vp8DecodeCost(fw, fh, n) + max(alpha, 0) + decoderOverhead}, nil
		case "VP8L":
			if alpha >= 0 || len(body) < 5 || body[0] != 0x2f || body[4]>>5 != 0 {
				return plan{}, errWebPChunk
			}
			bits := binary.LittleEndian.Uint32(body[1:])
			fw, fh := int64(bits&0x3fff)+1, int64(bits>>14&0x3fff)+1
			if seenVP8X && (fw != w || fh != h) {
				return plan{}, errWebPChunk
			}
			return plan{format: "webp", width: int(fw), height: int(fh), kind: "lossless WebP",
				decode: vp8lDecodeCost(fw, fh) + decoderOverhead}, nil
		}
		left -= n
		pos += 8 + int(n)
		if n%2 == 1 { // chunks are padded to an even length
			if left == 0 {
				return plan{}, errWebPChunk
			}
			left--
			pos++
		}
	}
	// The header read ended before the image data.
	if complete || !seenVP8X {
		return plan{}, errWebPNoImage
	}
	p := plan{format: "webp", width: int(w), height: int(h), kind: "WebP"}
	p.decode = max(alpha, 0) + decoderOverhead
	if a == cautious {
		p.decode += max(vp8lDecodeCost(w, h), vp8DecodeCost(w, h, left))
	} else {
		p.decode += vp8DecodeCost(w, h, 0)
	}
	return p, nil
}

// vp8DecodeCost is what golang.org/x/image/vp8 allocates for a w x h frame coded in n
// bytes: a 4:2:0 image of whole 16x16 macroblocks, per-macroblock filter settings and
// a copy of the coded data (the first partition up to 512 KB, and the rest).
func vp8DecodeCost(w, h, n int64) int64 {
	mbw, mbh := ceilDiv(w, 16), ceilDiv(h, 16)
	return 256*mbw*mbh + 2*64*mbw*mbh + 4*mbw*mbh + 6*mbw + 512<<10 + n
}

// Sizes in golang.org/x/image/vp8l's decoder (decode.go, huffman.go).
const (
	vp8lMaxGroups = 2600 // it refuses images with more Huffman groups
	// The five alphabets of a group, the first with the largest colour cache (2^11).
	vp8lAlphabets = (256 + 24 + 2048) + 256 + 256 + 256 + 40
	// A group kept: five trees of 536 bytes (nodes' slice header and a 128-entry
	// table) and their nodes, 2n-1 of 8 bytes for an alphabet of n.
	vp8lGroupKept = 5*536 + (2*vp8lAlphabets-5)*8
	// A group read: the code lengths and codes of each alphabet (4 bytes a symbol
	// each), and the small tree that codes the code lengths. Groups that no tile uses
	// are read too, and freed.
	vp8lGroupRead = 2*4*vp8lAlphabets + 5*37*8
)

// vp8lDecodeCost is what golang.org/x/image/vp8l allocates for a w x h lossless image
// at worst: the ARGB pixels, the wider copy the colour-indexing transform makes of a
// narrower bundled image, the transforms' and Huffman meta image's tiles (at least 4x4
// pixels each), and up to 2600 Huffman groups, which a file of ~100 KB can ask for
// with every tree at its largest (a tree whose code lengths are coded with 0 bits).
func vp8lDecodeCost(w, h int64) int64 {
	tiles := ceilDiv(w, 4) * ceilDiv(h, 4)
	pixels := 4*w*h + 4*ceilDiv(w, 2)*h
	subImages := 3*4*tiles + 4*256 // predictor, cross-colour, meta image; palette
	kept := min(vp8lMaxGroups, tiles)
	const colourCaches = 5 * 4 << 11 // one per decoded image, 2^11 entries at most
	return pixels + subImages + kept*vp8lGroupKept + vp8lMaxGroups*vp8lGroupRead +
		4*(vp8lGroupKept+vp8lGroupRead) + colourCaches + 2*vp8lMaxGroups
}
