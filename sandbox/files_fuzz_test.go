package sandbox

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestArchiveBody: the file's bytes come out of an archive whose header is what Stat
// said; a header of another entry, or one past archiveHeaderMax, is refused.
func TestArchiveBody(t *testing.T) {
	file := tarBytes(t, true, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "f.bin"}, body: "contents"})
	r, err := archiveBody(bytes.NewReader(file), 8)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(r); err != nil || string(b) != "contents" {
		t.Fatalf("body %q, %v", b, err)
	}
	if _, err := archiveBody(bytes.NewReader(file), 9); err == nil {
		t.Error("a size other than Stat's was accepted")
	}
	dir := tarBytes(t, true, tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "d/"}})
	if _, err := archiveBody(bytes.NewReader(dir), 0); err == nil {
		t.Error("a directory was accepted")
	}
	// Extended attributes are the sandbox's to set: past the header limit, the read
	// falls back to dd rather than parsing a megabyte of records.
	fat := tarBytes(t, true, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "f.bin", Format: tar.FormatPAX,
		PAXRecords: map[string]string{"SCHILY.xattr.user.big": strings.Repeat("x", 600<<10)}}, body: "contents"})
	if _, err := archiveBody(bytes.NewReader(fat), 8); err == nil {
		t.Error("a header of 600 KiB was accepted")
	}
}

// FuzzArchiveBody: whatever the archive, archiveBody reads at most archiveHeaderMax
// bytes before the file's, then exactly size bytes or an error, and allocates at most a
// few times the header it read (archive/tar copies PAX records into strings).
func FuzzArchiveBody(f *testing.F) {
	f.Add(tarBytes(f, true, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "f.bin"}, body: "contents"}), int64(8))
	f.Add(tarBytes(f, true, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: strings.Repeat("n", 300), Format: tar.FormatPAX}, body: "x"}), int64(1))
	f.Add(tarBytes(f, true, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: strings.Repeat("g", 300), Format: tar.FormatGNU}, body: "x"}), int64(1))
	f.Add(tarBytes(f, true, tarEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "f"}}), int64(0))
	f.Add(paxChain(f), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, size int64) {
		src := &countingReader{r: bytes.NewReader(data)}
		var body []byte
		var header int64
		var err error
		alloc := allocatedBytes(func() {
			var r io.Reader
			r, err = archiveBody(src, size)
			header = src.n
			if err == nil {
				body, err = io.ReadAll(io.LimitReader(r, 1<<20))
			}
		})
		if header > archiveHeaderMax {
			t.Errorf("read %d bytes before the file's, limit %d", header, archiveHeaderMax)
		}
		if err == nil && int64(len(body)) != size {
			t.Errorf("%d bytes of body, the header said %d", len(body), size)
		}
		if maxAlloc := 8*min(int64(len(data)), archiveHeaderMax) + 4*int64(len(body)) + 64<<10; alloc > maxAlloc {
			t.Errorf("allocated %d bytes for %d of input, want at most %d", alloc, len(data), maxAlloc)
		}
	})
}
