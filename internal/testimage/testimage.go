// Package testimage writes small, valid image files that declare large images, for
// tests of what decoding them costs: JPEGs of any subsampling, baseline or progressive,
// whose every 8x8 block is flat (one or two bits each), and PNGs of zeros, interlaced
// or not. Go's encoders write neither progressive JPEGs nor interlaced PNGs. Only tests
// import it.
package testimage

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
)

// JPEG describes a JPEG to write.
type JPEG struct {
	Width, Height int
	// Sampling is each component's sampling factors, h<<4 | v: one component is gray,
	// three YCbCr (0x22, 0x11, 0x11 is 4:2:0), four CMYK or YCCK.
	Sampling    []byte
	Progressive bool
	IDs         []byte // component ids; default 1, 2, 3, 4
	JFIF        bool   // write a JFIF APP0 first
	Adobe       int    // write an Adobe APP14 with this transform; -1 for none
}

// Bytes writes the file. Its scans code every block's DC difference as 0 (and, in a
// baseline JPEG, an end of block right after): one bit per block and per scan for a
// progressive JPEG, whose single scan is the interleaved DC one; two for a baseline.
func (j JPEG) Bytes() []byte {
	var b bytes.Buffer
	seg := func(marker byte, body ...byte) {
		b.Write([]byte{0xff, marker, byte((len(body) + 2) >> 8), byte(len(body) + 2)})
		b.Write(body)
	}
	b.Write([]byte{0xff, 0xd8})
	if j.JFIF {
		seg(0xe0, 'J', 'F', 'I', 'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0)
	}
	if j.Adobe >= 0 {
		seg(0xee, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, byte(j.Adobe))
	}
	dqt := make([]byte, 65)
	for i := 1; i < 65; i++ {
		dqt[i] = 1
	}
	seg(0xdb, dqt...)
	n := len(j.Sampling)
	sof := []byte{8, byte(j.Height >> 8), byte(j.Height), byte(j.Width >> 8), byte(j.Width), byte(n)}
	for i, s := range j.Sampling {
		id := byte(i + 1)
		if i < len(j.IDs) {
			id = j.IDs[i]
		}
		sof = append(sof, id, s, 0)
	}
	marker := byte(0xc0)
	if j.Progressive {
		marker = 0xc2
	}
	seg(marker, sof...)
	// One code of one bit in each table: DC difference category 0, and end of block.
	seg(0xc4, append([]byte{0x00, 1}, append(make([]byte, 15), 0x00)...)...)
	seg(0xc4, append([]byte{0x10, 1}, append(make([]byte, 15), 0x00)...)...)
	sos := []byte{byte(n)}
	for i := range j.Sampling {
		sos = append(sos, sof[6+3*i], 0x00)
	}
	bitsPerBlock := 2
	if j.Progressive {
		sos = append(sos, 0, 0, 0) // DC only, no successive approximation
		bitsPerBlock = 1
	} else {
		sos = append(sos, 0, 63, 0)
	}
	seg(0xda, sos...)
	bits := j.blocks() * bitsPerBlock
	data := make([]byte, (bits+7)/8)
	if r := bits % 8; r != 0 {
		data[len(data)-1] = 0xff >> r // pad with ones
	}
	b.Write(data)
	b.Write([]byte{0xff, 0xd9})
	return b.Bytes()
}

// blocks counts the blocks of the scan as image/jpeg reads them: whole MCUs when it
// interleaves components, else only the blocks inside the image.
func (j JPEG) blocks() int {
	if len(j.Sampling) == 1 {
		return (j.Width + 7) / 8 * ((j.Height + 7) / 8)
	}
	h0, v0 := int(j.Sampling[0]>>4), int(j.Sampling[0]&15)
	mcus := (j.Width + 8*h0 - 1) / (8 * h0) * ((j.Height + 8*v0 - 1) / (8 * v0))
	per := 0
	for _, s := range j.Sampling {
		per += int(s>>4) * int(s&15)
	}
	return mcus * per
}

// PNG writes a PNG of zeros (black, transparent or palette entry 0) with the given
// colour type and bit depth, with a tRNS chunk if trns.
func PNG(width, height int, colour, depth byte, interlaced, trns bool) []byte {
	channels := map[byte]int{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
	rowBytes := func(w int) int { return 1 + (w*channels*int(depth)+7)/8 }
	var raw bytes.Buffer
	zw := zlib.NewWriter(&raw)
	if !interlaced {
		writeZeros(zw, height*rowBytes(width))
	} else {
		for _, p := range [7][4]int{{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}} {
			pw, ph := (width-p[0]+p[2]-1)/p[2], (height-p[1]+p[3]-1)/p[3]
			if pw > 0 && ph > 0 {
				writeZeros(zw, ph*rowBytes(pw))
			}
		}
	}
	zw.Close()
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := binary.BigEndian.AppendUint32(nil, uint32(width))
	ihdr = binary.BigEndian.AppendUint32(ihdr, uint32(height))
	il := byte(0)
	if interlaced {
		il = 1
	}
	ihdr = append(ihdr, depth, colour, 0, 0, il)
	chunk(&b, "IHDR", ihdr)
	if colour == 3 {
		chunk(&b, "PLTE", []byte{0, 0, 0})
	}
	if trns {
		chunk(&b, "tRNS", map[byte][]byte{0: {0, 0}, 2: {0, 0, 0, 0, 0, 0}, 3: {0}}[colour])
	}
	chunk(&b, "IDAT", raw.Bytes())
	chunk(&b, "IEND", nil)
	return b.Bytes()
}

func writeZeros(w interface{ Write([]byte) (int, error) }, n int) {
	zeros := make([]byte, 64<<10)
	for n > 0 {
		k := min(n, len(zeros))
		w.Write(zeros[:k])
		n -= k
	}
}

func chunk(b *bytes.Buffer, typ string, data []byte) {
	b.Write(binary.BigEndian.AppendUint32(nil, uint32(len(data))))
	b.WriteString(typ)
	b.Write(data)
	crc := crc32.NewIEEE()
	crc.Write([]byte(typ))
	crc.Write(data)
	b.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32()))
}

// HuffmanWebP writes a lossless WebP of width x height whose Huffman meta image points
// every tile at group groups-1 (groups < 1000, and fewer than the image's 4x4 tiles), so
// that golang.org/x/image/vp8l builds that many groups of five Huffman trees, each as
// large as its alphabet allows (the 2^11-entry colour cache's included), in about 320
// bytes a group. The pixel data is left out: decoding fails once everything is allocated.
func HuffmanWebP(width, height, groups int) []byte {
	var w bitWriter
	w.bits(0x2f, 8)
	w.bits(uint32(width-1), 14)
	w.bits(uint32(height-1), 14)
	w.bits(0, 1+3) // no alpha hint, version 0
	w.bits(0, 1)   // no transforms
	w.bits(1, 1)   // colour cache ...
	w.bits(11, 4)  // ... of 2^11 entries
	w.bits(1, 1)   // a meta image ...
	w.bits(0, 3)   // ... of 4x4 tiles, itself coded with:
	w.bits(0, 1)   // no colour cache, and one group of one-symbol trees, 0 bits a pixel
	simple := func(symbol uint32) { w.bits(1, 1); w.bits(0, 1); w.bits(1, 1); w.bits(symbol, 8) }
	simple(uint32(groups-1) & 0xff) // green and red: the group's index
	simple(uint32(groups-1) >> 8)
	simple(0)
	simple(0)
	simple(0)
	// A normal tree whose code lengths are coded with 1 bit each (two lengths) or 0
	// (one length). order is where each code length sits in the code-length code.
	order := map[int]int{5: 7, 6: 9, 8: 11, 11: 14, 12: 15}
	tree := func(lengths []int) {
		w.bits(0, 1)
		used := map[int]bool{}
		last := 0
		for _, l := range lengths {
			used[l] = true
			last = max(last, order[l])
		}
		w.bits(uint32(last+1-4), 4)
		for i := 0; i <= last; i++ {
			v := uint32(0)
			for l := range used {
				if order[l] == i {
					v = 1
				}
			}
			w.bits(v, 3)
		}
		w.bits(0, 1) // every symbol
		if len(used) > 1 {
			lo := lengths[0]
			for l := range used {
				lo = min(lo, l)
			}
			for _, l := range lengths {
				w.bits(map[bool]uint32{true: 0, false: 1}[l == lo], 1)
			}
		}
	}
	repeat := func(n, l int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = l
		}
		return s
	}
	green := append(repeat(1768, 11), repeat(560, 12)...) // complete: 1768/2^11 + 560/2^12 = 1
	for range groups {
		tree(green)
		tree(repeat(256, 8))
		tree(repeat(256, 8))
		tree(repeat(256, 8))
		tree(append(repeat(24, 5), repeat(16, 6)...))
	}
	data := w.flush()
	var b bytes.Buffer
	b.WriteString("RIFF")
	b.Write(binary.LittleEndian.AppendUint32(nil, uint32(4+8+len(data)+len(data)%2)))
	b.WriteString("WEBPVP8L")
	b.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(data))))
	b.Write(data)
	if len(data)%2 == 1 {
		b.WriteByte(0)
	}
	return b.Bytes()
}

// bitWriter writes bits least significant first, as VP8L reads them.
type bitWriter struct {
	out  []byte
	acc  uint64
	nacc uint
}

func (w *bitWriter) bits(v uint32, n uint) {
	w.acc |= uint64(v&(1<<n-1)) << w.nacc
	w.nacc += n
	for w.nacc >= 8 {
		w.out = append(w.out, byte(w.acc))
		w.acc >>= 8
		w.nacc -= 8
	}
}

func (w *bitWriter) flush() []byte {
	if w.nacc > 0 {
		w.out = append(w.out, byte(w.acc))
	}
	return w.out
}
