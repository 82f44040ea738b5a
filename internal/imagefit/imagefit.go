// Package imagefit makes images fit what models accept (a long edge of at most so many
// pixels, at most so many bytes), within a memory budget that every caller shares.
//
// Go cannot scale an image while decoding it, and its decoders allocate far more than
// the pixels for some files: a 0.5 MB progressive JPEG declaring 9400x9400 pixels makes
// image/jpeg allocate 1.3 GB. So before anything is decoded, the file's own headers
// (a JPEG's frame header, PNG's IHDR, GIF's screen, WebP's chunks) give what the
// decoder will allocate, read from the decoders' sources, plus the scaling and encoding;
// an image that would need more than the whole budget is refused, and the others wait
// for their share of it.
//
//	f := imagefit.New(imagefit.Options{MaxEdge: 1568, MaxBytes: 3_500_000, MaxFile: 48 << 20, Budget: 160 << 20})
//	img, err := f.Fit(ctx, size, read)
package imagefit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"runtime"
	"strings"

	"golang.org/x/image/webp"
	"golang.org/x/sync/semaphore"
)

// Options are a Fitter's limits.
type Options struct {
	MaxEdge  int   // the long edge of an image returned, in pixels
	MaxBytes int   // the data of an image returned, in bytes
	MaxFile  int64 // the largest file read at all, in bytes
	Budget   int64 // the memory all fits at once may take, in bytes
}

// Fitter fits images within one memory budget shared by all its calls.
type Fitter struct {
	opts   Options
	budget *semaphore.Weighted
}

// New returns a Fitter with the given limits.
func New(o Options) *Fitter {
	return &Fitter{opts: o, budget: semaphore.NewWeighted(o.Budget)}
}

// ReadFunc reads length bytes of the image's file from offset. Reading fewer means the
// file shrank meanwhile.
type ReadFunc func(ctx context.Context, offset, length int64) (io.ReadCloser, error)

// Image is an image that fits.
type Image struct {
	Data []byte
	MIME string // image/png, image/jpeg, image/gif or image/webp
	// Desc says what the file is and how it was changed, e.g. "PNG 4000x3000, shown
	// scaled to 1568x1176".
	Desc string
}

// TooLargeError refuses an image whose decoding would take more memory than allowed.
type TooLargeError struct {
	Width, Height int
	Kind          string // e.g. "progressive JPEG", "interlaced PNG"
	Need, Budget  int64  // bytes
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%dx%d (%s) would need about %s to decode, more than the %s allowed",
		e.Width, e.Height, e.Kind, bytesText(e.Need), bytesText(e.Budget))
}

// FileTooLargeError refuses a file larger than Options.MaxFile, before reading it.
type FileTooLargeError struct{ Size, Max int64 }

func (e *FileTooLargeError) Error() string {
	return fmt.Sprintf("the file has %s, more than the %s read at most", bytesText(e.Size), bytesText(e.Max))
}

// ReadError is a failure of the ReadFunc, as it returned it.
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }

// bytesText writes a number of bytes for people, in binary units as 48 MB means 48 MiB.
func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d MB", (n+1<<20-1)>>20)
	}
	return fmt.Sprintf("%d KB", (n+1<<10-1)>>10)
}

// Fit returns the image in a file of size bytes: as it is when it already fits, else
// scaled so that its long edge is at most MaxEdge and its data at most MaxBytes. It
// waits, as long as ctx allows, until the memory the image needs is free in the budget,
// and refuses with a [*TooLargeError] an image that would need more than all of it.
func (f *Fitter) Fit(ctx context.Context, size int64, read ReadFunc) (Image, error) {
	if size > f.opts.MaxFile {
		return Image{}, &FileTooLargeError{size, f.opts.MaxFile}
	}
	// The headers are read first, outside the budget: they are small and say how much
	// of it to wait for.
	head, err := readAt(ctx, read, 0, min(size, headerLimit))
	if err != nil {
		return Image{}, err
	}
	a := hopeful
	for {
		p, err := planImage(head, int64(len(head)) >= size, a)
		if err != nil {
			return Image{}, err
		}
		need := f.need(p, size)
		if need > f.opts.Budget {
			return Image{}, &TooLargeError{p.width, p.height, p.kind, need, f.opts.Budget}
		}
		img, again, err := f.fitWithin(ctx, head, size, read, need)
		if need-size >= f.opts.Budget/4 {
			// The decode left its buffers as garbage, and Go's GC lets the heap grow
			// to twice what was alive at its last cycle, which the decode inflated:
			// collect now, so that the next decode reuses this memory, not adds to it.
			runtime.GC()
		}
		if !again {
			return img, err
		}
		if a == cautious {
			return Image{}, errors.New("the file changed while it was read; try again")
		}
		a = cautious // the whole file needs more than its header said; ask for the most it may
	}
}

// fitWithin waits for held bytes of the budget, then reads the whole file, unless head
// already is, and fits it. It reports again when the whole file needs more than held:
// its header alone left a choice open that the rest closed the dear way, or it changed.
func (f *Fitter) fitWithin(ctx context.Context, head []byte, size int64, read ReadFunc, held int64) (Image, bool, error) {
	if err := f.budget.Acquire(ctx, held); err != nil {
		return Image{}, false, fmt.Errorf("waiting for other images to be decoded: %w", err)
	}
	defer f.budget.Release(held) // also if a decoder panics
	data := head
	if int64(len(head)) < size {
		var err error
		if data, err = readAt(ctx, read, 0, size); err != nil {
			return Image{}, false, err
		}
	}
	p, err := planImage(data, true, hopeful)
	if err != nil {
		return Image{}, false, err
	}
	need := f.need(p, int64(len(data)))
	if need > held {
		return Image{}, true, nil
	}
	desc := fmt.Sprintf("%s %dx%d", strings.ToUpper(p.format), p.width, p.height)
	if !f.mustDecode(p, int64(len(data))) {
		return Image{data, "image/" + p.format, desc}, false, nil
	}
	src, err := decode(p.format, data)
	if err != nil {
		return Image{}, false, fmt.Errorf("decoding: %w", err)
	}
	if b := src.Bounds(); b.Dx() > p.width || b.Dy() > p.height || !p.gifFrame && (b.Dx() != p.width || b.Dy() != p.height) {
		return Image{}, false, fmt.Errorf("decoding: it came out %dx%d, not the %dx%d its header says", b.Dx(), b.Dy(), p.width, p.height)
	}
	nw, nh := f.target(p)
	out, mime, err := encode(scaleDown(src, nw, nh), p.format, f.opts.MaxBytes)
	if err != nil {
		return Image{}, false, err
	}
	return Image{out, mime, fmt.Sprintf("%s, shown scaled to %dx%d", desc, nw, nh)}, false, nil
}

// mustDecode says whether the image must be decoded and scaled, not sent as it is.
func (f *Fitter) mustDecode(p plan, size int64) bool {
	return max(p.width, p.height) > f.opts.MaxEdge || size > int64(f.opts.MaxBytes)
}

// target is the size the image is scaled to: its long edge at most MaxEdge.
func (f *Fitter) target(p plan) (int, int) {
	w, h, m := int64(p.width), int64(p.height), int64(f.opts.MaxEdge)
	switch {
	case max(w, h) <= m:
		return p.width, p.height
	case w >= h:
		return int(m), int(max(1, h*m/w))
	}
	return int(max(1, w*m/h)), int(m)
}

// need is the memory fitting the image takes at most: the file's bytes and, when it is
// decoded, the decoder's allocations, the scaling's and the encoding's. All are counted
// as if alive at once: what a step leaves behind is garbage only after the next GC.
func (f *Fitter) need(p plan, size int64) int64 {
	if !f.mustDecode(p, size) {
		return size
	}
	nw, nh := f.target(p)
	return size + p.decode + scaleCost(p, nw, nh) + int64(f.opts.MaxBytes) + encodeOverhead
}

// decode decodes data with the decoder of the format its headers were read as, never
// one that image.Decode might pick from other magic bytes.
func decode(format string, data []byte) (image.Image, error) {
	r := bytes.NewReader(data)
	switch format {
	case "jpeg":
		return jpeg.Decode(r)
	case "png":
		return png.Decode(r)
	case "gif":
		return gif.Decode(r)
	case "webp":
		return webp.Decode(r)
	}
	return nil, errUnknownFormat
}

// readAt reads length bytes from offset, into a buffer of exactly that size.
func readAt(ctx context.Context, read ReadFunc, offset, length int64) ([]byte, error) {
	rc, err := read(ctx, offset, length)
	if err != nil {
		return nil, &ReadError{err}
	}
	defer rc.Close()
	buf := make([]byte, length)
	n, err := io.ReadFull(rc, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, &ReadError{err}
	}
	return buf[:n], nil
}
