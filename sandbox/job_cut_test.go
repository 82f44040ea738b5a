package sandbox

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// cutLike cuts all the way the job runner does: the whole range when it fits in
// head+tail, else its head and tail with the range's line count.
func cutLike(all string, keep int) (string, bool) {
	_, head, tail := budget(keep)
	total := int64(len(all))
	if len(all) <= head+tail {
		return cutOutput([]byte(all), total, total, -1, keep, head, tail, "/f")
	}
	payload := all[:head] + all[len(all)-tail:]
	return cutOutput([]byte(payload), total, int64(head+tail), int64(strings.Count(all, "\n")), keep, head, tail, "/f")
}

var markerRe = regexp.MustCompile(`\[\.\.\. (\d+) bytes \((\d+) lines?\) left out; the whole output is in /f \.\.\.\]\n`)

// TestCutOutputLines: long output is cut at line boundaries, with the counts of what
// was left out, whether it came whole or as head and tail.
func TestCutOutputLines(t *testing.T) {
	for _, n := range []int{10, 300, 3000, 80000} {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&b, "line %d of the output\n", i)
		}
		all := b.String()
		for _, keep := range []int{1024, 5000, 200000} {
			got, cut := cutLike(all, keep)
			if !cut {
				if got != all || len(all) > keep {
					t.Errorf("n=%d keep=%d: not cut but changed or too long", n, keep)
				}
				continue
			}
			m := markerRe.FindStringSubmatchIndex(got)
			if m == nil {
				t.Fatalf("n=%d keep=%d: no marker in %q", n, keep, got)
			}
			head, tail := got[:m[0]], got[m[1]:]
			bytesOut, _ := strconv.Atoi(got[m[2]:m[3]])
			linesOut, _ := strconv.Atoi(got[m[4]:m[5]])
			if !strings.HasPrefix(all, head) || !strings.HasSuffix(all, tail) || !strings.HasSuffix(head, "\n") {
				t.Errorf("n=%d keep=%d: head or tail not a whole-line part of the output", n, keep)
			}
			if len(head)+bytesOut+len(tail) != len(all) {
				t.Errorf("n=%d keep=%d: %d+%d+%d != %d", n, keep, len(head), bytesOut, len(tail), len(all))
			}
			if strings.Count(head, "\n")+linesOut+strings.Count(tail, "\n") != n {
				t.Errorf("n=%d keep=%d: lines %d+%d+%d != %d", n, keep, strings.Count(head, "\n"), linesOut, strings.Count(tail, "\n"), n)
			}
			if len(head)+len(tail) > keep {
				t.Errorf("n=%d keep=%d: kept %d bytes", n, keep, len(head)+len(tail))
			}
		}
	}
}

// TestCutOutputLongLines: without newlines near the cut, it falls on a character
// boundary.
func TestCutOutputLongLines(t *testing.T) {
	all := strings.Repeat("€", 20000)
	got, cut := cutLike(all, 5000)
	if !cut || !utf8.ValidString(got) || strings.Contains(got, "\uFFFD") || !strings.Contains(got, "(0 lines) left out") {
		t.Errorf("cut %v, %q", cut, got[:100])
	}
}
