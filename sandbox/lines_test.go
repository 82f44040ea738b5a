package sandbox

import (
	"bufio"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestReadLine needs no Docker: long lines are cut to the limit on a UTF-8 boundary and
// their rest is read and dropped, whatever the reader's buffer size.
func TestReadLine(t *testing.T) {
	long := strings.Repeat("é", 5000) // 10000 bytes
	in := "short\n" + long + "\nab€cd\r\nlast"
	for _, bufSize := range []int{16, 4096} {
		br := bufio.NewReaderSize(strings.NewReader(in), bufSize)
		var got []string
		var cuts []bool
		for {
			line, cut, err := readLine(br, 7)
			if err == io.EOF && line == "" && !cut {
				break
			}
			got = append(got, line)
			cuts = append(cuts, cut)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		want := []string{"short", "ééé", "ab€cd", "last"}
		wantCut := []bool{false, true, true, false}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("buffer %d: lines %q, want %q", bufSize, got, want)
		}
		for i := range min(len(cuts), len(wantCut)) {
			if cuts[i] != wantCut[i] {
				t.Errorf("buffer %d: line %d cut %v", bufSize, i+1, cuts[i])
			}
		}
		for _, l := range got {
			if !utf8.ValidString(l) {
				t.Errorf("invalid UTF-8 %q", l)
			}
		}
	}
}
