package sandbox

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestParseListing: the listing script's output becomes entries; more files than were
// asked for, or output of another shape, is refused rather than believed.
func TestParseListing(t *testing.T) {
	list, err := parseListing("12 1700000000\n0 5\n\x00a.txt\x00name with\nnewline\x00", 10)
	if err != nil || len(list) != 2 || list[0].Name != "a.txt" || list[0].Size != 12 || list[0].ModTime.Unix() != 1700000000 ||
		list[1].Name != "name with\nnewline" || list[1].Size != 0 {
		t.Fatalf("listing %+v, %v", list, err)
	}
	many := strings.Repeat("1 1\n", 100_000) + "\x00" + strings.Repeat("f\x00", 100_000)
	for _, bad := range []string{
		many,                  // more than asked for
		"1 1\n\x00a\x00b\x00", // a name too many
		"1 1\n1 1\n\x00a\x00", // a name too few
		"x 1\n\x00a\x00",      // not a number
		"-1 1\n\x00a\x00",     // a negative size
		"1 1\n\x00a/b\x00",    // a slash in a name
		"1 1\n\x00\x00",       // an empty name
		"1 1\n\x00" + strings.Repeat("n", 256) + "\x00",
		"1 1\n\x00a", // no end
		"1 " + strings.Repeat("9", 30) + "\n\x00a\x00", // out of range
	} {
		if list, err := parseListing(bad, 10); err == nil {
			t.Errorf("%.40q: %d entries, want an error", bad, len(list))
		}
	}
	if _, err := parseListing(many, 10); err == nil || errors.Is(err, errListing) {
		t.Errorf("too many files: %v", err)
	}
}

// FuzzParseListing: whatever the listing prints, parseListing returns at most max
// entries with plain names, and allocates (so holds) at most the entries' slice as it
// grows (names share the input's memory) and an error.
func FuzzParseListing(f *testing.F) {
	f.Add("12 1700000000\n0 5\n\x00a.txt\x00b\x00", uint16(10))
	f.Add("1 1\n\x00a/b\x00", uint16(3))
	f.Add(strings.Repeat("1 1\n", 50)+"\x00"+strings.Repeat("f\x00", 50), uint16(20))
	f.Add("\n\x00\x00", uint16(0))
	entry := int64(unsafe.Sizeof(boxapi.DirEntry{}))
	f.Fuzz(func(t *testing.T, out string, max uint16) {
		m := int(max % 600)
		var list []boxapi.DirEntry
		var err error
		alloc := allocatedBytes(func() { list, err = parseListing(out, m) })
		if maxAlloc := 3*int64(m+1)*entry + measureSlack; alloc > maxAlloc {
			t.Errorf("allocated %d bytes, want at most %d", alloc, maxAlloc)
		}
		if err != nil {
			return
		}
		if len(list) > m {
			t.Fatalf("%d entries, max %d", len(list), m)
		}
		for _, e := range list {
			if e.Name == "" || len(e.Name) > boxapi.MaxNameBytes || strings.Contains(e.Name, "/") || e.Size < 0 {
				t.Errorf("entry %+v", e)
			}
		}
	})
}
