package boxapi

import (
	"strings"
	"unicode"
)

// Near is where the text edit_file was asked to replace comes closest to a file that
// does not hold it: the line where they part, the file's line there and the text's.
type Near struct {
	Line     int    // 1-based line of the file
	FileLine string // the file's line there
	TextLine string // the line of the text to replace that differs from it
	// Matched is how many whole lines of the text matched before they parted (from
	// Line-Matched); 0 when only a line like the text's first one was found.
	Matched int
	// Whitespace says that the two lines differ only in whitespace (indentation,
	// tabs or spaces, trailing blanks, a carriage return).
	Whitespace bool
}

// Closest finds where old comes closest to text, which does not contain it: the
// longest start of old found in text, when it spans a whole line, else a line of text
// like old's first non-blank line (equal but for whitespace, or sharing a long start
// once indentation is set aside). nil when nothing is close.
func Closest(text, old string) *Near {
	// The longest start of old that text holds: starts found are monotone in length.
	lo, hi := 0, len(old) // old[:lo] is found, old[:hi+1] is not (old itself is not)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if strings.Contains(text, old[:mid]) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if nl := strings.LastIndexByte(old[:lo], '\n'); nl >= 0 && strings.TrimSpace(old[:nl]) != "" {
		at := strings.Index(text, old[:lo])
		start := at + nl + 1 // where the line that differs starts in text
		n := &Near{
			Line:     strings.Count(text[:start], "\n") + 1,
			FileLine: lineAt(text, start),
			TextLine: lineAt(old, nl+1),
			Matched:  strings.Count(old[:nl+1], "\n"),
		}
		n.Whitespace = sameBarSpace(n.FileLine, n.TextLine)
		return n
	}
	first := ""
	for l := range strings.SplitSeq(old, "\n") {
		if strings.TrimSpace(l) != "" {
			first = l
			break
		}
	}
	want := strings.TrimSpace(first)
	if want == "" {
		return nil
	}
	var best *Near
	bestLen := 0
	line := 0
	for l := range strings.SplitSeq(text, "\n") {
		line++
		got := strings.TrimSpace(l)
		if sameBarSpace(l, first) {
			return &Near{Line: line, FileLine: l, TextLine: first, Whitespace: true}
		}
		if k := commonPrefix(got, want); k > bestLen {
			best, bestLen = &Near{Line: line, FileLine: l, TextLine: first}, k
		}
	}
	// A start shared by chance (a keyword, an indentation) is no guide.
	if bestLen < 8 || bestLen*2 < len(want) {
		return nil
	}
	return best
}

// lineAt is the line of s that starts at i, without its newline.
func lineAt(s string, i int) string {
	l, _, _ := strings.Cut(s[i:], "\n")
	return l
}

// sameBarSpace reports whether a and b differ only in whitespace.
func sameBarSpace(a, b string) bool {
	return a != b && strings.Join(strings.FieldsFunc(a, unicode.IsSpace), " ") == strings.Join(strings.FieldsFunc(b, unicode.IsSpace), " ")
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
