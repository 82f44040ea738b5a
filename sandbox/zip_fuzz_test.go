package sandbox

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// These tests need no Docker: they feed zipEntries tar streams made here, as a
// replaced tar in the container could send them.

// tarEntry is one entry of a test tar stream; body is the data of a regular file.
type tarEntry struct {
	hdr  tar.Header
	body string
}

// tarBytes writes entries as a tar stream; with end, the end-of-archive marker follows.
func tarBytes(tb testing.TB, end bool, entries ...tarEntry) []byte {
	tb.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := e.hdr
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(1_700_000_000, 0)
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			tb.Fatalf("writing tar header %q: %v", h.Name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			tb.Fatal(err)
		}
	}
	if end {
		if err := tw.Close(); err != nil {
			tb.Fatal(err)
		}
	} else if err := tw.Flush(); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// endless repeats chunk forever and counts what was read.
type endless struct {
	chunk []byte
	off   int
	read  int64
}

func (r *endless) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.chunk[r.off:])
		n += c
		r.off = (r.off + c) % len(r.chunk)
	}
	r.read += int64(n)
	return n, nil
}

// paxChain is a PAX extended header with a long path and no entry after it: repeated,
// archive/tar reads it again and again within one call to Next.
func paxChain(tb testing.TB) []byte {
	b := tarBytes(tb, false, tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "d/" + strings.Repeat("p", 4000) + "/", Format: tar.FormatPAX}})
	return b[:len(b)-512] // drop the entry's own header
}

// sparseFile is a GNU sparse file (PAX format 1.0) of 1 TiB that holds one byte at its
// end: archive/tar hands out the hole as zeros without reading them. archive/tar does
// not write sparse files, so the records are written under another name and renamed
// (the PAX records are not under the header's checksum).
func sparseFile(tb testing.TB) []byte {
	sparseMap := "1\n1099511627775\n1\n"
	data := sparseMap + strings.Repeat("\x00", 512-len(sparseMap)) + "x"
	b := tarBytes(tb, false, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "d/sparse", Format: tar.FormatPAX, PAXRecords: map[string]string{
		"XNU.sparse.major": "1", "XNU.sparse.minor": "0", "XNU.sparse.name": "d/sparse", "XNU.sparse.realsize": "1099511627776",
	}}, body: data})
	return bytes.ReplaceAll(b, []byte("XNU.sparse."), []byte("GNU.sparse."))
}

func newTestZip() *zip.Writer {
	zw := zip.NewWriter(io.Discard)
	zw.RegisterCompressor(zip.Deflate, newFlateWriter)
	return zw
}

// TestZipEntriesKeepsTree: a real directory's stream becomes the same tree in the zip,
// under the folder root, with the hard link waiting for its bytes.
func TestZipEntriesKeepsTree(t *testing.T) {
	in := tarBytes(t, true,
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "out/", Mode: 0o755}},
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "out/a.txt", Mode: 0o640}, body: strings.Repeat("hello ", 1000)},
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "out/pic.png", Mode: 0o644}, body: "png"},
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "out/link", Linkname: "a.txt"}},
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "out/hard", Linkname: "out/a.txt", Mode: 0o640}},
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "out/fifo"}},
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "out/" + strings.Repeat("n", 150) + "/", Mode: 0o700}},
	)
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	zw.RegisterCompressor(zip.Deflate, newFlateWriter)
	links, err := zipEntries(bytes.NewReader(in), zw, "saved", "/sandbox", zipLimit)
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 1 || links[0].fh.Name != "saved/hard" || links[0].source != "/sandbox/out/a.txt" {
		t.Fatalf("hard links %+v", links)
	}
	if err := writeEntry(zw, links[0].fh, strings.NewReader("again"), make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range testenv.ReadZip(t, out.Bytes()) {
		got = append(got, f.Name+" "+f.Mode().String()+" "+string(f.Data[:min(len(f.Data), 5)]))
	}
	want := []string{"saved/ drwxr-xr-x ", "saved/a.txt -rw-r----- hello", "saved/pic.png -rw-r--r-- png",
		"saved/link Lrwxrwxrwx a.txt", "saved/" + strings.Repeat("n", 150) + "/ drwx------ ", "saved/hard -rw-r----- again"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("zip entries\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestZipEntriesLimits: endless hostile streams end at a limit, having read a bounded
// amount; names that would unzip outside the folder end the archive.
func TestZipEntriesLimits(t *testing.T) {
	lim := zipLimits{entries: 1000, nameBytes: 64 << 10, hardLinks: 100, otherBytes: 4 << 20}
	long := strings.Repeat("x", 60_000)
	for _, tc := range []struct {
		name  string
		chunk []byte
		limit bool // errZipLimit, else another error
	}{
		{"hard links with long PAX names", tarBytes(t, false, tarEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "d/" + long, Linkname: "d/" + long, Format: tar.FormatPAX}}), true},
		{"hard links", tarBytes(t, false, tarEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "d/h", Linkname: "d/f"}}), true},
		{"empty directories", tarBytes(t, false, tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "d/e/"}}), true},
		{"empty files", tarBytes(t, false, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "d/f"}}), true},
		{"FIFOs, left out", tarBytes(t, false, tarEntry{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "d/p"}}), true},
		{"long names, left out", tarBytes(t, false, tarEntry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "d/" + long, Format: tar.FormatGNU}}), true},
		{"PAX headers without an entry", paxChain(t), true},
		{"data of an entry left out", tarBytes(t, false, tarEntry{hdr: tar.Header{Typeflag: 'Z', Name: "d/z", Size: 1 << 20}, body: strings.Repeat("z", 1<<20)}), true},
		{"a sparse file of 1 TiB", sparseFile(t), true},
		{"a name climbing out", tarBytes(t, false, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "d/../../etc/x"}}), false},
		{"an absolute name", tarBytes(t, false, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "d//etc/x"}}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &endless{chunk: tc.chunk}
			links, err := zipEntries(src, newTestZip(), "root", "/sandbox", lim)
			if errors.Is(err, errZipLimit) != tc.limit || err == nil || links != nil {
				t.Fatalf("err %v (limit %v), %d hard links", err, errors.Is(err, errZipLimit), len(links))
			}
			// Entries, names and other bytes each stop the stream; one tar header of
			// at most 1 MiB may be read past the last.
			if max := lim.otherBytes + 2<<20; src.read > max {
				t.Errorf("read %d bytes of the stream, want at most %d", src.read, max)
			}
			t.Logf("%v after %d bytes", err, src.read)
		})
	}
}

// TestZipLimitMemory: at every default limit at once (the most hard links, the most
// names, the most entries), what a directory archive holds stays within what the
// comment of zipLimit says, about 62 MB.
func TestZipLimitMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 100 MB of tar headers")
	}
	lim := zipLimit
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		// The hard links take almost all of the name bytes, the directories the rest
		// of the entries, with short names.
		per := (lim.nameBytes - (lim.entries-lim.hardLinks)*16) / lim.hardLinks / 2
		mtime := time.Unix(1_700_000_000, 0)
		for i := range lim.hardLinks {
			name := "d/" + strings.Repeat("h", per-30) + strconv.Itoa(i)
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: name, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		for i := range lim.entries - lim.hardLinks {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "d/" + strconv.Itoa(i) + "/", ModTime: mtime}); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	var links []hardLink
	var err error
	held, _ := heapUse(func() any {
		zw := newTestZip()
		links, err = zipEntries(pr, zw, "root", "/sandbox", lim)
		return []any{zw, links}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d hard links and %d entries in all hold %.1f MB", len(links), lim.entries, float64(held)/1e6)
	if len(links) != lim.hardLinks {
		t.Fatalf("%d hard links, want %d", len(links), lim.hardLinks)
	}
	if held > 75e6 {
		t.Errorf("a directory archive at its limits holds %.1f MB, want about 62 MB", float64(held)/1e6)
	}
}

// heapUse measures what f leaves on the heap (what it returns and keeps alive through
// keep) and what it allocated in all. Two collections on each side also empty the
// pools, so only what f holds is counted.
func heapUse(f func() (keep any)) (held, allocated int64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	keep := f()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), int64(after.TotalAlloc - before.TotalAlloc)
}

// allocated measures the bytes f allocates, which bounds what it can hold. It needs no
// collection, so fuzzing stays fast.
func allocatedBytes(f func()) int64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc)
}

// measureSlack is what the runtime and the test framework may allocate while a
// measure runs, besides the code measured.
const measureSlack = 16 << 10

// FuzzZipEntries: whatever the tar stream, zipEntries does not panic, keeps at most
// lim.entries entries and lim.hardLinks hard links, writes no name that unzips outside
// the folder, and allocates (so holds) at most what its limits allow: per entry about
// 200 bytes of zip directory (zipEntryHeld here, with room), the name bytes twice over
// (allocation rounding), one compressor, the archive written (twice, as it grows), and
// 16 bytes per byte of the stream that is not file contents, of which there are at
// most lim.otherBytes (headers are parsed once, contents copied through one buffer).
// TestZipLimitMemory measures what is held at the real limits.
func FuzzZipEntries(f *testing.F) {
	real, err := os.ReadFile("testdata/tar/busybox.tar")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(real)
	f.Add(real[:3000])
	f.Add(tarBytes(f, true,
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "out/", Mode: 0o755}},
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "out/a.txt", Mode: 0o644}, body: "hello"},
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "out/l", Linkname: "a.txt"}},
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "out/h", Linkname: "out/a.txt"}},
	))
	f.Add(tarBytes(f, true, tarEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "d/" + strings.Repeat("l", 3000), Linkname: "d/" + strings.Repeat("k", 3000), Format: tar.FormatPAX}}))
	f.Add(tarBytes(f, true, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "d/" + strings.Repeat("g", 300), Format: tar.FormatGNU}, body: "gnu"}))
	f.Add(tarBytes(f, true, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "d/../x"}, body: "out"}))
	f.Add(append(paxChain(f), paxChain(f)...))
	f.Add(sparseFile(f))
	hl := tarBytes(f, false, tarEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "d/h", Linkname: "d/f"}})
	f.Add(bytes.Repeat(hl, 20))

	lim := zipLimits{entries: 16, nameBytes: 2 << 10, hardLinks: 4, otherBytes: 64 << 10}
	// What one compressor allocates, made, used and closed with an empty pool. The
	// pool makes it one for the whole archive, unless it drops what is put in it, as
	// it does at random under the race detector: then one per entry.
	_, flateAlloc := heapUse(func() any {
		w, _ := newFlateWriter(io.Discard)
		_, _ = w.Write([]byte("some bytes to compress"))
		_ = w.Close()
		return nil
	})
	if !poolKeeps() {
		flateAlloc *= int64(lim.entries)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkZipEntries(t, data, lim, flateAlloc)
		// Most changes to a header break its checksum, and archive/tar stops there:
		// the same bytes again with every block's checksum made right reach further.
		checkZipEntries(t, withTarChecksums(data), lim, flateAlloc)
	})
}

// poolKeeps reports whether a sync.Pool gives back what was put in it, every time.
func poolKeeps() bool {
	var p sync.Pool
	for range 100 {
		p.Put(new(int))
		if p.Get() == nil {
			return false
		}
	}
	return true
}

// checkZipEntries runs zipEntries over data and checks what FuzzZipEntries promises.
func checkZipEntries(t *testing.T, data []byte, lim zipLimits, flateAlloc int64) {
	const zipEntryHeld = 512
	var links []hardLink
	var err error
	var out bytes.Buffer
	alloc := allocatedBytes(func() {
		zw := zip.NewWriter(&out)
		zw.RegisterCompressor(zip.Deflate, newFlateWriter)
		links, err = zipEntries(bytes.NewReader(data), zw, "root", "/sandbox", lim)
		if err == nil {
			for _, l := range links {
				if err := writeEntry(zw, l.fh, nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
	maxAlloc := flateAlloc + int64(lim.entries*zipEntryHeld+2*lim.nameBytes+measureSlack+2*out.Cap()) + 16*min(int64(len(data)), lim.otherBytes)
	if alloc > maxAlloc {
		t.Errorf("allocated %d bytes for a stream of %d, want at most %d", alloc, len(data), maxAlloc)
	}
	if len(links) > lim.hardLinks {
		t.Errorf("%d hard links, limit %d", len(links), lim.hardLinks)
	}
	if err != nil {
		return
	}
	zr, err := zip.NewReader(bytes.NewReader(out.Bytes()), int64(out.Len()))
	if err != nil {
		t.Fatalf("the archive does not read back: %v", err)
	}
	if len(zr.File) > lim.entries {
		t.Errorf("%d entries, limit %d", len(zr.File), lim.entries)
	}
	for _, f := range zr.File {
		if f.Name != "root/" && f.Name != "root" && !strings.HasPrefix(f.Name, "root/") || slices.Contains(strings.Split(f.Name, "/"), "..") {
			t.Errorf("entry %q is outside the folder", f.Name)
		}
	}
}

// withTarChecksums returns a copy of data in which every 512-byte block that is not
// all zeros carries a right tar header checksum.
func withTarChecksums(data []byte) []byte {
	b := bytes.Clone(data)
	for off := 0; off+512 <= len(b); off += 512 {
		blk := b[off : off+512]
		if bytes.Count(blk, []byte{0}) == 512 {
			continue
		}
		copy(blk[148:156], "        ")
		sum := 0
		for _, c := range blk {
			sum += int(c)
		}
		copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
	}
	return b
}

// BenchmarkZipEntries turns the tar stream of a directory (2,000 small text files and
// one of 8 MiB) into a zip, as a download does, with no Docker: the cost of the limits
// and of the compressors on the normal path.
func BenchmarkZipEntries(b *testing.B) {
	var entries []tarEntry
	text := strings.Repeat("some source code, line after line\n", 120) // about 4 KiB
	for i := range 2000 {
		entries = append(entries, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "out/src/file" + strconv.Itoa(i) + ".go", Mode: 0o644}, body: text})
	}
	entries = append(entries, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "out/big.log", Mode: 0o644}, body: strings.Repeat(text, 2048)})
	in := tarBytes(b, true, entries...)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		zw := newTestZip()
		if _, err := zipEntries(bytes.NewReader(in), zw, "out", "/sandbox", zipLimit); err != nil {
			b.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
