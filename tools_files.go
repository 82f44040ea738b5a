package mcpsandbox

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // registers GIF decoding for image.Decode
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"go.uber.org/zap"
	"golang.org/x/image/draw"
	_ "golang.org/x/image/webp" // registers WebP decoding for image.Decode

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Limits of read_file.
const (
	defaultReadLines = 2000
	maxReadLines     = 20000
	maxLineBytes     = 2000    // a longer line is cut, with a note
	maxReadBytes     = 100_000 // text returned by one call
	sniffBytes       = 8192    // read to tell text from binary

	// Models accept images up to about 1568 px on the long edge and a few MB.
	maxImageEdge  = 1568
	maxImageBytes = 3_500_000 // of the image data sent, before base64
	// Images beyond these are refused rather than decoded.
	maxImageFile    = 48 << 20  // bytes of the file
	maxImageDecoded = 256 << 20 // bytes of the decoded pixels
)

// imageDecodes lets one image be decoded at a time, so a few large images cannot add
// their decoded sizes up in Caddy's memory.
var imageDecodes = make(chan struct{}, 1)

func (h *Handler) readFileTool() mcp.Tool {
	return mcp.NewTool("read_file",
		mcp.WithDescription(fmt.Sprintf(`Read a file in the sandbox. Text comes back as numbered lines (%d by default; page through a large file with offset and limit). Images (PNG, JPEG, GIF, WebP) come back as an image you can see, scaled to at most %d px. For other binary files you get their type and size: use share_file to give them to the user, or execute with a suitable tool. Cheaper and clearer than cat or sed through execute.`, defaultReadLines, maxImageEdge)),
		mcp.WithTitleAnnotation("Read a sandbox file"),
		mcp.WithString("path", mcp.Required(), mcp.MinLength(1),
			mcp.Description("Absolute path of the file, e.g. /sandbox/notes.txt.")),
		mcp.WithNumber("offset", mcp.Min(1),
			mcp.Description("Number of the first line to return, counting from 1. Default 1.")),
		mcp.WithNumber("limit", mcp.Min(1), mcp.Max(maxReadLines),
			mcp.Description(fmt.Sprintf("How many lines to return at most. Default %d.", defaultReadLines))),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	)
}

func (h *Handler) writeFileTool() mcp.Tool {
	return mcp.NewTool("write_file",
		mcp.WithDescription(`Create or replace a text file in the sandbox with exactly the given content (no shell, so no quoting or heredocs; missing parent directories are created; an existing file keeps its permissions). To change part of an existing file, use edit_file.`),
		mcp.WithTitleAnnotation("Write a sandbox file"),
		mcp.WithString("path", mcp.Required(), mcp.MinLength(1),
			mcp.Description("Absolute path of the file, e.g. /sandbox/app/main.py.")),
		mcp.WithString("content", mcp.Required(),
			mcp.Description("The whole new content of the file, byte for byte (add a final newline if you want one).")),
		mcp.WithReadOnlyHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	)
}

func (h *Handler) editFileTool() mcp.Tool {
	return mcp.NewTool("edit_file",
		mcp.WithDescription(`Replace one exact piece of text in a file in the sandbox. old_text must occur exactly once, including whitespace and line breaks; otherwise nothing changes and the error says how many matches there are and on which lines (then add surrounding lines to old_text to make it unique). The file keeps its permissions.`),
		mcp.WithTitleAnnotation("Edit a sandbox file"),
		mcp.WithString("path", mcp.Required(), mcp.MinLength(1),
			mcp.Description("Absolute path of the file, e.g. /sandbox/app/main.py.")),
		mcp.WithString("old_text", mcp.Required(), mcp.MinLength(1),
			mcp.Description("The exact text to replace, as it is in the file (copy it from read_file without the line numbers).")),
		mcp.WithString("new_text", mcp.Required(),
			mcp.Description("The text to put in its place; empty deletes old_text.")),
		mcp.WithReadOnlyHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(false),
		mcp.WithOpenWorldHintAnnotation(false),
	)
}

// filePath reads the "path" argument of the file tools: required, absolute, cleaned.
func filePath(a args) (string, *mcp.CallToolResult) {
	p, bad := a.str("path")
	if bad != nil {
		return "", bad.result()
	}
	if !strings.HasPrefix(p, "/") {
		return "", argError(`%s needs "path": an absolute path such as /sandbox/notes.txt, got %q`, a.tool, p)
	}
	return cleanPath(p), nil
}

// fileErrorResult turns a sandbox error into a result the model can act on.
func (h *Handler) fileErrorResult(tool, p string, err error) *mcp.CallToolResult {
	var match *sandbox.MatchError
	switch {
	case errors.Is(err, sandbox.ErrImageMissing):
		return mcp.NewToolResultError(h.imageMissing(h.docker, h.host))
	case errors.As(err, &match) && match.Count == 0:
		return argError("old_text was not found in %s, so nothing changed. Whitespace, indentation and line breaks must match exactly: read the lines with read_file and copy them without the line numbers.", p)
	case errors.As(err, &match):
		more := ""
		if match.Count > len(match.Lines) {
			more = ", ..."
		}
		return argError("old_text occurs %d times in %s (starting on lines %s%s), so nothing changed. Add surrounding lines to old_text so that it matches exactly once.", match.Count, p, joinLines(match.Lines), more)
	case errors.Is(err, sandbox.ErrTooLarge):
		return argError("%s is too large to edit here (over 16 MiB); change it with execute, e.g. sed -i or a small script.", p)
	case errors.Is(err, sandbox.ErrIsDir):
		return argError("%s is a directory; %s works on files. List it with execute (ls -la %s).", p, tool, p)
	case errors.Is(err, sandbox.ErrNotFound):
		if tool == "write_file" {
			return argError("%s could not be created: a parent is missing and could not be made.", p)
		}
		return argError("%s does not exist in the sandbox; check the path with ls.", p)
	case errors.Is(err, sandbox.ErrNotRegular):
		return argError("%s is not a regular file (a device, a FIFO, or a symbolic link that leads nowhere); check it with ls -l.", p)
	}
	h.logger.Warn(tool+" failed", zap.String("path", p), zap.Error(err))
	return mcp.NewToolResultError(fmt.Sprintf("%s could not reach %s in the sandbox right now; try again in a moment.", tool, p))
}

func joinLines(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// readFile returns text as numbered lines, images as image content, and a short
// description for other files.
func (h *Handler) readFile(ctx context.Context, a args) (*mcp.CallToolResult, error) {
	p, errRes := filePath(a)
	if errRes != nil {
		return errRes, nil
	}
	offset, _, bad := a.integer("offset", "a line number", 1, 1<<53)
	if bad != nil {
		return bad.result(), nil
	}
	limit, ok, bad := a.integer("limit", "a number of lines", 1, maxReadLines)
	if bad != nil {
		return bad.result(), nil
	}
	if !ok {
		limit = defaultReadLines
	}
	offset = max(offset, 1)

	f, err := h.box.OpenRange(ctx, p, 0, sniffBytes)
	if err != nil {
		return h.fileErrorResult("read_file", p, err), nil
	}
	head, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return h.fileErrorResult("read_file", p, err), nil
	}
	info := f.FileInfo
	if info.Size == 0 {
		return mcp.NewToolResultText(fmt.Sprintf("%s is empty (0 bytes).", p)), nil
	}
	sniffed, _, _ := strings.Cut(http.DetectContentType(head), ";")
	switch {
	case sniffed == "image/png" || sniffed == "image/jpeg" || sniffed == "image/gif" || sniffed == "image/webp":
		return h.readImage(ctx, p, info, sniffed), nil
	case bytes.IndexByte(head, 0) >= 0 || !strings.HasPrefix(sniffed, "text/"):
		kind := sniffed
		if kind == "application/octet-stream" {
			kind = "binary data of no type recognised"
		}
		return mcp.NewToolResultText(fmt.Sprintf("%s is a binary file (%s, %s), not text, so read_file does not show it. Use share_file to give it to the user, or execute with a tool that understands it (for example file, xxd | head, pdftotext, or python).",
			p, kind, humanSize(info.Size))), nil
	}

	lines, err := h.box.ReadLines(ctx, p, offset, limit, maxLineBytes, maxReadBytes)
	if err != nil {
		return h.fileErrorResult("read_file", p, err), nil
	}
	return mcp.NewToolResultText(formatLines(p, lines)), nil
}

// formatLines numbers lines like cat -n and says which part of the file they are.
func formatLines(p string, l *sandbox.Lines) string {
	var b strings.Builder
	if len(l.Lines) == 0 {
		return fmt.Sprintf("%s (%s) has no line %d: it ends before that. Read from offset 1, or count its lines with execute (wc -l %s).", p, humanSize(l.Size), l.First, p)
	}
	last := l.First + int64(len(l.Lines)) - 1
	for i, line := range l.Lines {
		fmt.Fprintf(&b, "%6d\t%s\n", l.First+int64(i), line)
	}
	fmt.Fprintf(&b, "[%s, %s: lines %d-%d", p, humanSize(l.Size), l.First, last)
	switch {
	case l.Capped:
		fmt.Fprintf(&b, "; stopped at %d KB of text, more follows: continue with offset=%d", maxReadBytes/1000, last+1)
	case l.More:
		fmt.Fprintf(&b, "; more follows: continue with offset=%d", last+1)
	default:
		b.WriteString(", the end of the file")
	}
	if l.Cut > 0 {
		fmt.Fprintf(&b, "; %d line(s) longer than %d bytes were cut, see them with execute (e.g. cut -c or fold)", l.Cut, maxLineBytes)
	}
	b.WriteString("]")
	return b.String()
}

// readImage returns an image the model can see: the file itself when it is small
// enough, else a scaled copy.
func (h *Handler) readImage(ctx context.Context, p string, info sandbox.FileInfo, mimeType string) *mcp.CallToolResult {
	if info.Size > maxImageFile {
		return argError("%s is an image of %s, too large to view here (at most %s). Make a smaller copy with execute (e.g. python with PIL, or ImageMagick) and read that, or share_file it.", p, humanSize(info.Size), humanSize(maxImageFile))
	}
	select {
	case imageDecodes <- struct{}{}:
		defer func() { <-imageDecodes }()
	case <-ctx.Done():
		return mcp.NewToolResultError("read_file was cancelled")
	}
	f, err := h.box.OpenRange(ctx, p, 0, maxImageFile)
	if err != nil {
		return h.fileErrorResult("read_file", p, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxImageFile))
	f.Close()
	if err != nil {
		return h.fileErrorResult("read_file", p, err)
	}
	out, desc, err := fitImage(data, mimeType)
	if err != nil {
		return argError("%s looks like an image (%s, %s) but cannot be shown: %v. Check it with execute (file %s), or share_file it.", p, mimeType, humanSize(info.Size), err, p)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{
		mcp.NewTextContent(fmt.Sprintf("%s (%s, %s)", p, humanSize(info.Size), desc)),
		mcp.NewImageContent(base64.StdEncoding.EncodeToString(out.data), out.mime),
	}}
}

type encodedImage struct {
	data []byte
	mime string
}

// fitImage returns the image as it is when it already fits what models accept, else a
// copy scaled so that its long edge is at most maxImageEdge and its data at most
// maxImageBytes. It refuses images whose pixels would take more than maxImageDecoded,
// checked from the header before anything is decoded.
func fitImage(data []byte, mimeType string) (encodedImage, string, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return encodedImage{}, "", fmt.Errorf("reading its header: %w", err)
	}
	w, hgt := cfg.Width, cfg.Height
	if w <= 0 || hgt <= 0 {
		return encodedImage{}, "", fmt.Errorf("it says it is %dx%d", w, hgt)
	}
	if int64(w)*int64(hgt)*bytesPerPixel(cfg.ColorModel) > maxImageDecoded {
		return encodedImage{}, "", fmt.Errorf("%dx%d pixels is too large to decode here; make a smaller copy first", w, hgt)
	}
	desc := fmt.Sprintf("%s %dx%d", strings.ToUpper(format), w, hgt)
	if max(w, hgt) <= maxImageEdge && len(data) <= maxImageBytes {
		return encodedImage{data, mimeType}, desc, nil
	}
	src, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return encodedImage{}, "", fmt.Errorf("decoding: %w", err)
	}
	nw, nh := w, hgt
	if max(w, hgt) > maxImageEdge {
		if w >= hgt {
			nw, nh = maxImageEdge, max(1, int(int64(hgt)*maxImageEdge/int64(w)))
		} else {
			nw, nh = max(1, int(int64(w)*maxImageEdge/int64(hgt))), maxImageEdge
		}
	}
	dst := scaleDown(src, nw, nh)
	src = nil // let the full-size pixels go before encoding

	// Photographs stay JPEG; drawings and screenshots stay PNG (sharp edges, text)
	// unless that is too large.
	if format != "jpeg" {
		var buf bytes.Buffer
		enc := png.Encoder{CompressionLevel: png.BestSpeed}
		if err := enc.Encode(&buf, dst); err == nil && buf.Len() <= maxImageBytes {
			return encodedImage{buf.Bytes(), "image/png"}, fmt.Sprintf("%s, shown scaled to %dx%d", desc, nw, nh), nil
		}
	}
	flat := image.NewRGBA(dst.Bounds()) // JPEG has no alpha: put the image on white
	draw.Draw(flat, flat.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	draw.Draw(flat, flat.Bounds(), dst, image.Point{}, draw.Over)
	for _, q := range []int{85, 70, 50} {
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, flat, &jpeg.Options{Quality: q}); err != nil {
			return encodedImage{}, "", fmt.Errorf("encoding: %w", err)
		}
		if buf.Len() <= maxImageBytes || q == 50 {
			return encodedImage{buf.Bytes(), "image/jpeg"}, fmt.Sprintf("%s, shown scaled to %dx%d", desc, nw, nh), nil
		}
	}
	panic("unreachable")
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

// bytesPerPixel estimates what one pixel takes once decoded.
func bytesPerPixel(m color.Model) int64 {
	switch m {
	case color.Gray16Model:
		return 2
	case color.GrayModel, color.AlphaModel:
		return 1
	case color.RGBA64Model, color.NRGBA64Model:
		return 8
	case color.YCbCrModel:
		return 3
	}
	return 4 // RGBA, NRGBA, paletted (with room for conversions)
}

// writeFile creates or replaces a file with the given content.
func (h *Handler) writeFile(ctx context.Context, a args) (*mcp.CallToolResult, error) {
	p, errRes := filePath(a)
	if errRes != nil {
		return errRes, nil
	}
	if !a.has("content") {
		return argError(`write_file needs "content": the whole text of the file (an empty string makes an empty file)`), nil
	}
	content, bad := a.str("content")
	if bad != nil {
		return bad.result(), nil
	}
	fi, created, err := h.box.WriteFile(ctx, p, []byte(content))
	if err != nil {
		return h.fileErrorResult("write_file", p, err), nil
	}
	verb := "Replaced"
	if created {
		verb = "Created"
	}
	return mcp.NewToolResultText(fmt.Sprintf("%s %s: %d bytes, %d lines, mode %04o.", verb, p, fi.Size, countLines(content), fi.Mode.Perm())), nil
}

// editFile replaces one exact, unique piece of text.
func (h *Handler) editFile(ctx context.Context, a args) (*mcp.CallToolResult, error) {
	p, errRes := filePath(a)
	if errRes != nil {
		return errRes, nil
	}
	oldText, bad := a.str("old_text")
	if bad != nil {
		return bad.result(), nil
	}
	if oldText == "" {
		return argError(`edit_file needs "old_text": the exact text to replace, copied from the file. To write a whole file, use write_file.`), nil
	}
	if !a.has("new_text") {
		return argError(`edit_file needs "new_text": the text to put in place of old_text (an empty string deletes it)`), nil
	}
	newText, bad := a.str("new_text")
	if bad != nil {
		return bad.result(), nil
	}
	if oldText == newText {
		return argError("old_text and new_text are the same, so there is nothing to change."), nil
	}
	res, err := h.box.EditFile(ctx, p, oldText, newText)
	if err != nil {
		return h.fileErrorResult("edit_file", p, err), nil
	}
	return mcp.NewToolResultText(fmt.Sprintf("Edited %s: replaced %d line(s) starting at line %d with %d line(s); the file now has %d bytes.",
		p, countLines(oldText), res.Line, countLines(newText), res.Size)), nil
}

// countLines counts lines the way an editor shows them: a last line without a newline
// counts too.
func countLines(s string) int {
	if s == "" {
		return 0
	}
	n := strings.Count(s, "\n")
	if !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}
