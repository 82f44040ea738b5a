package expiry

import (
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1767225600", 1767225600, true},
		{"0", 0, true},
		{"7", 7, true},
		{"999999999999", 999999999999, true}, // MaxDigits
		{"", 0, false},
		{"+1767225600", 0, false},
		{"-1767225600", 0, false},
		{"01767225600", 0, false},
		{"00", 0, false},
		{"1767225600 ", 0, false},
		{" 1767225600", 0, false},
		{"1767225600\n", 0, false},
		{"1_767_225_600", 0, false},
		{"0x69557d00", 0, false},
		{"1767225600.5", 0, false},
		{"1e9", 0, false},
		{"١٧٦٧٢٢٥٦٠٠", 0, false},    // Arabic-Indic digits
		{"１７６７２２５６００", 0, false},    // fullwidth digits
		{"1000000000000", 0, false}, // 13 digits
		{"9223372036854775807", 0, false},
		{"99999999999999999999999", 0, false},
		{strings.Repeat("1", 10000), 0, false},
	} {
		got, ok := Parse(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Parse(%.40q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParse: Parse accepts exactly what strconv.FormatInt writes for 0..10^MaxDigits-1,
// reads it back to the same number, and allocates nothing.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"1767225600", "0", "+1", "-1", "01", "", "999999999999", "1000000000000", " 1", "1\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := Parse(s)
		v, err := strconv.ParseInt(s, 10, 64)
		canonical := err == nil && v >= 0 && len(s) <= MaxDigits && strconv.FormatInt(v, 10) == s
		if ok != canonical || (ok && n != v) || (!ok && n != 0) {
			t.Fatalf("Parse(%q) = %d, %v; canonical %v (%d)", s, n, ok, canonical, v)
		}
		if allocs := testing.AllocsPerRun(10, func() { Parse(s) }); allocs != 0 { //nolint:staticcheck // SA4017: the call is what is measured
			t.Fatalf("Parse(%q) allocates %v times", s, allocs)
		}
	})
}
