package mcptools

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/imagefit"
	"go.uber.org/zap"
)

// Limits of read_file.
const (
	DefaultReadLines = 2000
	MaxLineBytes     = 2000    // a longer line is cut, with a note
	MaxReadBytes     = 100_000 // text returned by one call
	sniffBytes       = 8192    // read to tell text from binary

	// Models accept images up to about 1568 px on the long edge and a few MB.
	MaxImageEdge  = 1568
	MaxImageBytes = 3_500_000 // of the image data sent, before base64
	maxImageFile  = 48 << 20  // bytes of an image file read at all
	// What all image reads at once may take in Caddy's memory: the files, the
	// decoders' allocations, scaling and encoding. An image that would need more is
	// refused before it is decoded.
	ImageBudget = 160 << 20
)

// imageFitter is shared by every handler of the process, so that its budget bounds
// the memory of all image reads at once, across config reloads.
var imageFitter = imagefit.New(imagefit.Options{
	MaxEdge: MaxImageEdge, MaxBytes: MaxImageBytes, MaxFile: maxImageFile, Budget: ImageBudget,
})

// fileArg is the path of the file tools.
type fileArg struct {
	Path string `json:"path" arg:"required,minLength=1" needs:"the file's path, such as notes.txt or /sandbox/notes.txt"`
}

// path is the file's path, absolute and cleaned.
func (f fileArg) path() string { return boxapi.CleanPath(inSandbox(f.Path)) }

// readFileArgs are read_file's arguments.
type readFileArgs struct {
	fileArg
	Offset *int64 `json:"offset" arg:"min=1" unit:"a line number"`
	Limit  *int64 `json:"limit" arg:"min=1,max=20000" unit:"a number of lines"`
}

func (s *Tools) readFileTool() toolDef[readFileArgs] {
	return define[readFileArgs](mcp.NewTool("read_file",
		mcp.WithDescription(fmt.Sprintf(`Read a file in the sandbox: text as numbered lines (%d by default; page with offset and limit), images (PNG, JPEG, GIF, WebP) as an image you can see, scaled to at most %d px; other files only by type and size. Clearer than cat through execute.`, DefaultReadLines, MaxImageEdge)),
		title("Read a sandbox file"),
		hints(true, false, true, false),
	), map[string]about{
		"path":   {desc: pathDesc("The file", "notes.txt")},
		"offset": {desc: "Number of the first line to return, counting from 1. Default 1."},
		"limit":  {desc: fmt.Sprintf("How many lines to return at most. Default %d.", DefaultReadLines)},
	})
}

// writeFileArgs are write_file's arguments.
type writeFileArgs struct {
	fileArg
	Content string `json:"content" arg:"required" needs:"the whole text of the file (an empty string makes an empty file)"`
}

func (s *Tools) writeFileTool() toolDef[writeFileArgs] {
	return define[writeFileArgs](mcp.NewTool("write_file",
		mcp.WithDescription(`Create or replace a text file in the sandbox with exactly content (no shell quoting; missing parent directories are created; an existing file keeps its mode). To change part of a file, use edit_file.`),
		title("Write a sandbox file"),
		hints(false, true, true, false),
	), map[string]about{
		"path":    {desc: pathDesc("The file", "app/main.py")},
		"content": {desc: "The whole new content of the file, byte for byte (add a final newline if you want one)."},
	})
}

// editFileArgs are edit_file's arguments.
type editFileArgs struct {
	fileArg
	OldText string `json:"old_text" arg:"required,minLength=1" needs:"the exact text to replace, copied from the file. To write a whole file, use write_file."`
	NewText string `json:"new_text" arg:"required" needs:"the text to put in place of old_text (an empty string deletes it)"`
}

func (s *Tools) editFileTool() toolDef[editFileArgs] {
	return define[editFileArgs](mcp.NewTool("edit_file",
		mcp.WithDescription(`Replace one exact piece of text in a sandbox file. old_text must occur exactly once, whitespace included; otherwise nothing changes and the error says where it matches.`),
		title("Edit a sandbox file"),
		hints(false, true, false, false),
	), map[string]about{
		"path":     {desc: pathDesc("The file", "app/main.py")},
		"old_text": {desc: "The exact text to replace, as it is in the file (copy it from read_file without the line numbers)."},
		"new_text": {desc: "The text to put in its place; empty deletes old_text."},
	})
}

// pathDesc describes a path argument; what is one is the tool's own text.
func pathDesc(what, example string) string {
	return what + ", absolute or relative to /sandbox, e.g. " + example + "."
}

// inSandbox makes a path given relative to /sandbox absolute, as the shell of execute
// would find it.
func inSandbox(p string) string {
	if strings.HasPrefix(p, "/") {
		return p
	}
	return boxapi.WorkDir + "/" + p
}

// fileErrorResult turns a sandbox error into a result the model can act on.
func (s *Tools) fileErrorResult(box Box, tool, p string, err error) *mcp.CallToolResult {
	var match *boxapi.MatchError
	switch {
	case errors.Is(err, boxapi.ErrImageMissing):
		return mcp.NewToolResultError(box.ImageMissing())
	case errors.As(err, &match) && match.Count == 0:
		return argError("old_text was not found in %s, so nothing changed.%s Whitespace, indentation and line breaks must match exactly: read the lines with read_file and copy them without the line numbers.", p, nearText(match.Near))
	case errors.As(err, &match):
		more := ""
		if match.Count > len(match.Lines) {
			more = ", ..."
		}
		return argError("old_text occurs %d times in %s (starting on lines %s%s), so nothing changed. Add surrounding lines to old_text so that it matches exactly once.", match.Count, p, joinLines(match.Lines), more)
	case errors.Is(err, boxapi.ErrTooLarge):
		return argError("%s is too large to edit here (over 16 MiB); change it with execute, e.g. sed -i or a small script.", p)
	case errors.Is(err, boxapi.ErrIsDir):
		return argError("%s is a directory; %s works on files. List it with execute (ls -la %s).", p, tool, p)
	case errors.Is(err, boxapi.ErrNotFound):
		if tool == "write_file" {
			return argError("%s could not be created: a parent is missing and could not be made.", p)
		}
		return argError("%s does not exist in the sandbox; check the path with ls.", p)
	case errors.Is(err, boxapi.ErrNotRegular):
		return argError("%s is not a regular file (a device, a FIFO, or a symbolic link that leads nowhere); check it with ls -l.", p)
	}
	s.opts.Logger.Warn(tool+" failed", zap.String("path", p), zap.Error(err))
	if box.EngineDown(err) {
		return mcp.NewToolResultError(engineText(box))
	}
	return mcp.NewToolResultError(fmt.Sprintf("%s could not reach %s in the sandbox right now; try again in a moment.", tool, p))
}

// nearText says where old_text comes closest to the file and what differs there; the
// lines are the file's and the model's own, quoted.
func nearText(n *boxapi.Near) string {
	if n == nil {
		return ""
	}
	what := "they differ"
	switch {
	case n.Whitespace:
		what = "they differ only in whitespace (indentation, tabs or spaces, trailing blanks)"
	default:
		a, b := strings.TrimLeft(n.FileLine, " \t"), strings.TrimLeft(n.TextLine, " \t")
		if i := commonPrefix(a, b); i > 0 {
			what = fmt.Sprintf("they agree up to %q, then differ", human.Clip(a[:i], 80))
		}
	}
	start := ""
	if n.Matched > 0 {
		start = fmt.Sprintf("Its first %d line(s) match the file from line %d; then ", n.Matched, n.Line-n.Matched)
	} else {
		start = "The closest line: "
	}
	return fmt.Sprintf(" %sline %d of the file is %q where old_text has %q: %s.", start, n.Line, human.Clip(n.FileLine, 200), human.Clip(n.TextLine, 200), what)
}

// commonPrefix is the length of the start a and b share.
func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
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
func (s *Tools) readFile(ctx context.Context, box Box, _ call, in readFileArgs) (*mcp.CallToolResult, error) {
	p := in.path()
	offset, limit := int64(1), int64(DefaultReadLines)
	if in.Offset != nil {
		offset = *in.Offset
	}
	if in.Limit != nil {
		limit = *in.Limit
	}

	f, err := box.OpenRange(ctx, p, 0, sniffBytes)
	if err != nil {
		return s.fileErrorResult(box, "read_file", p, err), nil
	}
	head, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return s.fileErrorResult(box, "read_file", p, err), nil
	}
	info := f.FileInfo
	if info.Size == 0 {
		return mcp.NewToolResultText(fmt.Sprintf("%s is empty (0 bytes).", p)), nil
	}
	sniffed, _, _ := strings.Cut(http.DetectContentType(head), ";")
	switch {
	case sniffed == "image/png" || sniffed == "image/jpeg" || sniffed == "image/gif" || sniffed == "image/webp":
		return s.readImage(ctx, box, p, info, sniffed), nil
	case bytes.IndexByte(head, 0) >= 0 || !strings.HasPrefix(sniffed, "text/"):
		kind, how := binaryKind(head, sniffed)
		switch {
		case how == "":
			how = "execute with a tool that understands it (for example file, xxd | head, or python)"
		case plainPath(p):
			how = "execute, e.g. " + strings.ReplaceAll(how, "{f}", p)
		default:
			how = "execute, e.g. " + strings.ReplaceAll(how, "{f}", "FILE") + " (FILE: the path, quoted)"
		}
		return mcp.NewToolResultText(fmt.Sprintf("%s is a binary file (%s, %s), not text, so read_file does not show it. Read it with %s; share_file gives it to the user.",
			p, kind, human.Size(info.Size), how)), nil
	}

	lines, err := box.ReadLines(ctx, p, offset, limit, MaxLineBytes, MaxReadBytes)
	if err != nil {
		return s.fileErrorResult(box, "read_file", p, err), nil
	}
	return mcp.NewToolResultText(formatLines(p, lines)), nil
}

// formatLines numbers lines like cat -n and says which part of the file they are.
func formatLines(p string, l *boxapi.Lines) string {
	var b strings.Builder
	if len(l.Lines) == 0 {
		return fmt.Sprintf("%s (%s) has no line %d: it ends before that. Read from offset 1, or count its lines with execute (wc -l %s).", p, human.Size(l.Size), l.First, p)
	}
	last := l.First + int64(len(l.Lines)) - 1
	for i, line := range l.Lines {
		fmt.Fprintf(&b, "%6d\t%s\n", l.First+int64(i), line)
	}
	fmt.Fprintf(&b, "[%s, %s: lines %d-%d", p, human.Size(l.Size), l.First, last)
	if !l.Capped && !l.More {
		fmt.Fprintf(&b, " of %d", last) // the whole count, known at the end
	}
	switch {
	case l.Capped:
		fmt.Fprintf(&b, "; stopped at %d KB of text, more follows: continue with offset=%d", MaxReadBytes/1000, last+1)
	case l.More:
		fmt.Fprintf(&b, "; more follows: continue with offset=%d", last+1)
	default:
		b.WriteString(", the end of the file")
	}
	if l.Cut > 0 {
		fmt.Fprintf(&b, "; %d line(s) longer than %d bytes were cut, see them with execute (e.g. cut -c or fold)", l.Cut, MaxLineBytes)
	}
	b.WriteString("]")
	return b.String()
}

// readImage returns an image the model can see: the file itself when it is small
// enough, else a scaled copy, within the memory budget all image reads share.
func (s *Tools) readImage(ctx context.Context, box Box, p string, info boxapi.FileInfo, mimeType string) *mcp.CallToolResult {
	img, err := imageFitter.Fit(ctx, info.Size, func(ctx context.Context, offset, length int64) (io.ReadCloser, error) {
		return box.OpenRange(ctx, p, offset, length)
	})
	var (
		readErr  *imagefit.ReadError
		tooLarge *imagefit.TooLargeError
		fileSize *imagefit.FileTooLargeError
	)
	switch {
	case errors.As(err, &readErr):
		return s.fileErrorResult(box, "read_file", p, readErr.Err)
	case errors.As(err, &fileSize):
		return argError("%s is an image of %s, too large to view here (at most %s). %s", p, human.Size(info.Size), human.Size(maxImageFile), smallerCopyHint(p, mimeType))
	case errors.As(err, &tooLarge):
		return argError("%s is too large to view here: %v. %s", p, tooLarge, smallerCopyHint(p, mimeType))
	case err != nil && ctx.Err() != nil:
		return mcp.NewToolResultError("read_file was cancelled")
	case err != nil:
		return argError("%s looks like an image (%s, %s) but cannot be shown: %v. Check it with execute (file %s), or share_file it.", p, mimeType, human.Size(info.Size), err, p)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{
		mcp.NewTextContent(fmt.Sprintf("%s (%s, %s)", p, human.Size(info.Size), img.Desc)),
		mcp.NewImageContent(base64.StdEncoding.EncodeToString(img.Data), img.MIME),
	}}
}

// smallerCopyHint says how to see an image too large to read: a scaled copy made in the
// sandbox, or a link for the person.
func smallerCopyHint(p, mimeType string) string {
	ext := ".png"
	if mimeType == "image/jpeg" {
		ext = ".jpg"
	}
	small := strings.TrimSuffix(p, path.Ext(p)) + "-small" + ext
	return fmt.Sprintf("Make a smaller copy with execute (e.g. convert %s -resize %dx%d %s, or python3 with PIL) and read that, or use share_file to give the person a link.", p, MaxImageEdge, MaxImageEdge, small)
}

// writeFile creates or replaces a file with the given content.
func (s *Tools) writeFile(ctx context.Context, box Box, _ call, in writeFileArgs) (*mcp.CallToolResult, error) {
	p, content := in.path(), in.Content
	fi, created, err := box.WriteFile(ctx, p, []byte(content))
	if err != nil {
		return s.fileErrorResult(box, "write_file", p, err), nil
	}
	verb := "Replaced"
	if created {
		verb = "Created"
	}
	return mcp.NewToolResultText(fmt.Sprintf("%s %s: %d bytes, %d lines, mode %04o.", verb, p, fi.Size, countLines(content), fi.Mode.Perm())), nil
}

// editFile replaces one exact, unique piece of text.
func (s *Tools) editFile(ctx context.Context, box Box, _ call, in editFileArgs) (*mcp.CallToolResult, error) {
	p, oldText, newText := in.path(), in.OldText, in.NewText
	if oldText == newText {
		return argError("old_text and new_text are the same, so there is nothing to change."), nil
	}
	res, err := box.EditFile(ctx, p, oldText, newText)
	if err != nil {
		return s.fileErrorResult(box, "edit_file", p, err), nil
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

// binaryMagic names common binary formats by their first bytes (and tar by its
// header's magic at 257), with a command that reads each; {f} stands for the file.
var binaryMagic = []struct {
	at          int
	magic, kind string
	how         string
}{
	{0, "SQLite format 3\x00", "an SQLite 3 database", `sqlite3 {f} .tables, or python3 -c "import sqlite3; print(sqlite3.connect('{f}').execute('select name from sqlite_master').fetchall())"`},
	{0, "PAR1", "an Apache Parquet file", `python3 -c "import pandas as pd; print(pd.read_parquet('{f}').head())"`},
	{0, "ARROW1", "an Apache Arrow (Feather) file", `python3 -c "import pyarrow.feather as f; print(f.read_table('{f}').schema)"`},
	{0, "\x89HDF\r\n\x1a\n", "an HDF5 file", `python3 -c "import h5py; h5py.File('{f}').visit(print)"`},
	{0, "\x93NUMPY", "a NumPy array (.npy)", `python3 -c "import numpy as np; a = np.load('{f}'); print(a.shape, a.dtype)"`},
	{0, "PK\x03\x04", "a zip archive (also .docx, .xlsx, .jar, .whl)", `unzip -l {f}, or python3 -m zipfile -l {f}`},
	{0, "\x1f\x8b", "gzip-compressed data", `zcat {f} | head, or tar tzf {f} for a .tar.gz`},
	{0, "\xfd7zXZ\x00", "xz-compressed data", `xz -dc {f} | head, or tar tJf {f} for a .tar.xz`},
	{0, "BZh", "bzip2-compressed data", `bzcat {f} | head, or tar tjf {f} for a .tar.bz2`},
	{0, "\x28\xb5\x2f\xfd", "zstd-compressed data", `zstd -dc {f} | head`},
	{0, "7z\xbc\xaf\x27\x1c", "a 7-Zip archive", `7z l {f}`},
	{257, "ustar", "a tar archive", `tar tvf {f} | head`},
	{0, "%PDF-", "a PDF document", `pdftotext {f} - | head -100, or python3 with pypdf`},
	{0, "\x7fELF", "an ELF executable or library", `file {f}, or readelf -h {f}`},
	{0, "\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an OLE2 document (old .doc, .xls, .ppt or .msi)", `file {f}, or python3 with olefile or xlrd`},
}

// binaryKind says what a binary file is, from its first bytes, and a command that
// reads it ("" when none is known).
func binaryKind(head []byte, sniffed string) (kind, how string) {
	for _, m := range binaryMagic {
		if len(head) >= m.at+len(m.magic) && string(head[m.at:m.at+len(m.magic)]) == m.magic {
			return m.kind, m.how
		}
	}
	if sniffed == "application/octet-stream" {
		return "binary data of no type recognised", ""
	}
	return sniffed, ""
}

// plainPath reports whether a path can stand in a suggested command as it is, in or
// out of quotes.
func plainPath(p string) bool {
	for _, r := range p {
		if !(r == '/' || r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}
