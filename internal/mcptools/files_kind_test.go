package mcptools

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// bytesBox is a sandbox whose files all hold data.
type bytesBox struct {
	fakeBox
	data []byte
}

func (b *bytesBox) OpenRange(_ context.Context, p string, off, n int64) (*boxapi.File, error) {
	end := min(int64(len(b.data)), off+n)
	return &boxapi.File{ReadCloser: io.NopCloser(bytes.NewReader(b.data[off:end])),
		FileInfo: boxapi.FileInfo{Path: p, Size: int64(len(b.data))}}, nil
}

// TestReadFileNamesBinaryFormats: read_file names common binary formats by their
// first bytes (an SQLite database was "binary data of no type recognised") and says
// which command reads each, with the file's path in it.
func TestReadFileNamesBinaryFormats(t *testing.T) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte("hello"))
	w.Close()
	tarHead := make([]byte, 512)
	copy(tarHead, "a.txt")
	copy(tarHead[257:], "ustar\x0000")
	for _, c := range []struct {
		data       []byte
		kind, read string
	}{
		{[]byte("SQLite format 3\x00\x10\x00\x01\x01"), "an SQLite 3 database", "sqlite3 /sandbox/f.bin .tables"},
		{[]byte("PAR1\x15\x04\x15\x00"), "an Apache Parquet file", "pd.read_parquet('/sandbox/f.bin')"},
		{gz.Bytes(), "gzip-compressed data", "zcat /sandbox/f.bin | head"},
		{[]byte("PK\x03\x04\x14\x00\x00\x00"), "a zip archive", "unzip -l /sandbox/f.bin"},
		{[]byte("%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"), "a PDF document", "pdftotext /sandbox/f.bin -"},
		{tarHead, "a tar archive", "tar tvf /sandbox/f.bin"},
		{[]byte("\x7fELF\x02\x01\x01\x00"), "an ELF executable", "readelf -h /sandbox/f.bin"},
		{[]byte{0, 1, 2, 3, 0xfe, 0xff}, "binary data of no type recognised", "xxd | head"},
	} {
		h := newToolsHarness(t, func(o *Options) { o.Boxes = oneBox{&bytesBox{data: c.data}} })
		isErr, text, _ := h.call("read_file", map[string]any{"path": "f.bin"})
		if isErr || !strings.Contains(text, "/sandbox/f.bin is a binary file ("+c.kind) || !strings.Contains(text, c.read) || !strings.Contains(text, "share_file") {
			t.Errorf("%s: %v %q", c.kind, isErr, text)
		}
	}
	// A path that cannot stand in a command as it is is not put in one.
	h := newToolsHarness(t, func(o *Options) { o.Boxes = oneBox{&bytesBox{data: []byte("SQLite format 3\x00")}} })
	if _, text, _ := h.call("read_file", map[string]any{"path": "it's; rm -rf.db"}); strings.Contains(text, "sqlite3 /sandbox/it") || !strings.Contains(text, "sqlite3 FILE .tables") {
		t.Errorf("a path with quotes: %q", text)
	}
}
