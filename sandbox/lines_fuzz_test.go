package sandbox

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestCollectLinesEndless: a program that prints one endless line, or endless empty
// lines, in place of tail or head ends a read within its limits.
func TestCollectLinesEndless(t *testing.T) {
	lim := lineLimits{lines: 10, line: 100, bytes: 1000, scan: 1 << 20}
	src := &endless{chunk: []byte("x")}
	var out boxapi.Lines
	if err := collectLines(src, lim, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Lines) != 1 || out.Lines[0] != strings.Repeat("x", 100) || out.Cut != 1 || !out.More || out.Capped {
		t.Errorf("one endless line: %d lines, cut %d, more %v, capped %v", len(out.Lines), out.Cut, out.More, out.Capped)
	}
	if src.read > lim.scan+64<<10 {
		t.Errorf("read %d bytes, limit %d", src.read, lim.scan)
	}

	out = boxapi.Lines{}
	if err := collectLines(&endless{chunk: []byte("\n")}, lim, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Lines) != 10 || !out.More {
		t.Errorf("endless empty lines: %d lines, more %v", len(out.Lines), out.More)
	}
}

// TestCollectLinesInvalidUTF8: replacing invalid bytes does not take a line past its
// limit.
func TestCollectLinesInvalidUTF8(t *testing.T) {
	var out boxapi.Lines
	err := collectLines(strings.NewReader(strings.Repeat("a\xff", 3)+"\nok\n"), lineLimits{lines: 5, line: 6, bytes: 100, scan: 1 << 20}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Lines) != 2 || out.Lines[0] != "a\uFFFDa" || out.Lines[1] != "ok" || out.Cut != 1 {
		t.Errorf("lines %q, cut %d", out.Lines, out.Cut)
	}
}

// FuzzCollectLines: whatever the program prints, collectLines keeps at most lim.lines
// lines of valid UTF-8, each of at most lim.line bytes, at most lim.bytes in all (or
// the first line alone), and reads at most lim.scan bytes. It allocates (and so holds)
// at most its 64 KiB buffer, a few times the bytes it keeps and of one line being cut,
// and a slice header per line.
func FuzzCollectLines(f *testing.F) {
	f.Add([]byte("one\ntwo\nthree\n"), uint16(4), uint16(100), uint16(2), uint32(1000))
	f.Add([]byte(strings.Repeat("é", 300)+"\nnext"), uint16(7), uint16(20), uint16(5), uint32(1<<20))
	f.Add([]byte("a\xffa\xffa\xff\n\n\n\r\n"), uint16(3), uint16(5), uint16(9), uint32(6))
	f.Add([]byte(strings.Repeat("\n", 500)), uint16(1), uint16(50), uint16(1000), uint32(400))
	f.Add(bytes.Repeat([]byte("\xe2\x82"), 200), uint16(10), uint16(100), uint16(3), uint32(1000))
	f.Fuzz(func(t *testing.T, data []byte, line, total, n uint16, scan uint32) {
		lim := lineLimits{lines: int64(n%1000) + 1, line: int(line%4096) + 1, bytes: int(total) + 1, scan: int64(scan % (1 << 22))}
		src := &countingReader{r: bytes.NewReader(data)}
		var out boxapi.Lines
		var err error
		alloc := allocatedBytes(func() { err = collectLines(src, lim, &out) })
		if err != nil {
			t.Fatal(err)
		}
		kept := 0
		for _, l := range out.Lines {
			kept += len(l)
			if len(l) > lim.line || !utf8.ValidString(l) {
				t.Errorf("line %q: %d bytes, limit %d", l, len(l), lim.line)
			}
		}
		if int64(len(out.Lines)) > lim.lines || len(out.Lines) > 1 && kept+len(out.Lines) > lim.bytes {
			t.Errorf("%d lines of %d bytes, limits %d lines and %d bytes", len(out.Lines), kept, lim.lines, lim.bytes)
		}
		if src.n > lim.scan {
			t.Errorf("read %d bytes, limit %d", src.n, lim.scan)
		}
		if maxAlloc := int64(64<<10 + 8*kept + 64*cap(out.Lines) + 8*lim.line + measureSlack); alloc > maxAlloc {
			t.Errorf("allocated %d bytes for %d lines of %d bytes, want at most %d", alloc, len(out.Lines), kept, maxAlloc)
		}
	})
}

// countingReader counts what was read from r.
type countingReader struct {
	r interface{ Read([]byte) (int, error) }
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
