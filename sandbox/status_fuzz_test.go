package sandbox

import (
	"strconv"
	"strings"
	"testing"
)

// TestParseDiskUsage: du's output becomes bytes; anything else, including a number too
// large to be bytes, is unknown (-1) rather than a wrong figure.
func TestParseDiskUsage(t *testing.T) {
	for in, want := range map[string]int64{
		"2052\t/sandbox\n":             2052 << 10,
		"0\t/sandbox\n":                0,
		"9007199254740991\t/sandbox\n": 9007199254740991 << 10,
		"9007199254740992\t/sandbox\n": -1, // KiB that overflow bytes
		"99999999999999999999\t/x\n":   -1,
		"12k\t/sandbox\n":              -1,
		"-1\t/sandbox\n":               -1,
		"\t/sandbox\n":                 -1,
		"":                             -1,
		"du: cannot read directory":    -1,
	} {
		if got := parseDiskUsage(in); got != want {
			t.Errorf("parseDiskUsage(%q) = %d, want %d", in, got, want)
		}
	}
}

// FuzzParseDiskUsage: whatever du prints, parseDiskUsage allocates nothing and returns
// -1 or the bytes of the leading number of KiB.
func FuzzParseDiskUsage(f *testing.F) {
	f.Add("2052\t/sandbox\n")
	f.Add("9007199254740991\t/sandbox\n")
	f.Add(strings.Repeat("7", 100))
	f.Add("12 x")
	f.Fuzz(func(t *testing.T, out string) {
		var got int64
		if allocs := testing.AllocsPerRun(1, func() { got = parseDiskUsage(out) }); allocs != 0 {
			t.Errorf("%v allocations", allocs)
		}
		if got == -1 {
			return
		}
		field, _, _ := strings.Cut(strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' {
				return ' '
			}
			return r
		}, out), " ")
		kb, err := strconv.ParseInt(field, 10, 64)
		if err != nil || kb<<10 != got || got < 0 || field[0] == '+' || field[0] == '-' {
			t.Errorf("parseDiskUsage(%q) = %d", out, got)
		}
	})
}
