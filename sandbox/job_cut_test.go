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
		return cutOutput([]byte(all), 0, total, -1, 1, keep, head, tail, "/f")
	}
	payload := all[:head] + all[len(all)-tail:]
	return cutOutput([]byte(payload), 0, total, int64(strings.Count(all, "\n")), 1, keep, head, tail, "/f")
}

var markerRe = regexp.MustCompile(`\[\.\.\. lines (\d+)–(\d+) left out \((\d+) bytes\)(?:; that is a lot: search it first with execute, e\.g\. grep -n PATTERN /f \| head -50)?; read them with read_file path=/f offset=(\d+) limit=(\d+) \.\.\.\]\n`)

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
			from, _ := strconv.Atoi(got[m[2]:m[3]])
			to, _ := strconv.Atoi(got[m[4]:m[5]])
			bytesOut, _ := strconv.Atoi(got[m[6]:m[7]])
			offset, _ := strconv.Atoi(got[m[8]:m[9]])
			limit, _ := strconv.Atoi(got[m[10]:m[11]])
			linesOut := to - from + 1
			if from != strings.Count(head, "\n")+1 || offset != from || limit != min(linesOut, markerPage) {
				t.Errorf("n=%d keep=%d: marker names lines %d–%d offset %d after %d lines", n, keep, from, to, offset, strings.Count(head, "\n"))
			}
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
	if !cut || !utf8.ValidString(got) || strings.Contains(got, "\uFFFD") || !strings.Contains(got, "[... part of line 1 left out (") {
		t.Errorf("cut %v, %q", cut, got[:100])
	}
}

// deliverLike delivers range the way the job runner does (whole, or head and tail with
// the line count when longer) through cutStream, with held in front.
func deliverLike(rng string, held []byte, running bool, keep int) (string, bool, []byte) {
	_, head, tail := budget(keep)
	payload, lines := rng, int64(-1)
	if len(rng) > head+tail {
		payload, lines = rng[:head]+rng[len(rng)-tail:], int64(strings.Count(rng, "\n"))
	}
	return cutStream([]byte(payload), held, 0, int64(len(rng)), lines, 1, running, keep, head, tail, "/f")
}

// TestCutStreamHoldsSplitCharacter: a delivery of a running job that ends inside a
// character holds its first bytes back, and the next delivery shows it whole, for
// short and for cut output; a finished job's last delivery holds nothing back.
func TestCutStreamHoldsSplitCharacter(t *testing.T) {
	const bar = "━" // E2 94 81
	for _, n := range []int{0, 10, 20000} {
		all := strings.Repeat("progress "+bar+"\n", n) + "step " + bar + bar + " done\n"
		for split := len(all) - 12; split < len(all)-6; split++ {
			first, _, held := deliverLike(all[:split], nil, true, 4096)
			second, _, rest := deliverLike(all[split:], held, true, 4096)
			if !utf8.ValidString(first) || !utf8.ValidString(second) || strings.Contains(first+second, "\uFFFD") {
				t.Fatalf("n=%d split=%d: %q | %q", n, split, clipEnd(first), second)
			}
			if rest != nil || !strings.HasSuffix(first+second, "step "+bar+bar+" done\n") {
				t.Fatalf("n=%d split=%d: joined %q, still held %q", n, split, clipEnd(first+second), rest)
			}
			if n == 0 && first+second != all {
				t.Fatalf("split=%d: %q, want %q", split, first+second, all)
			}
		}
	}
	// A finished job's last delivery shows what there is.
	text, _, held := deliverLike("end \xe2\x94", nil, false, 4096)
	if held != nil || text != "end \uFFFD" {
		t.Fatalf("finished: %q, held %q", text, held)
	}
	// Held bytes come first also when the next delivery finishes the job.
	text, _, held = deliverLike("\x81.", []byte("\xe2\x94"), false, 4096)
	if held != nil || text != bar+"." {
		t.Fatalf("held then finished: %q, held %q", text, held)
	}
}

func clipEnd(s string) string { return s[max(0, len(s)-40):] }

// TestCutMarker: the marker names the lines left out, counted from the line the
// delivery starts in, and the read_file call that reads them, a page at most; for
// part of one long line, the byte range that holds it (read_file would start the line
// over); without a line number it gives counts and the file, and past the counting
// limit bytes only.
func TestCutMarker(t *testing.T) {
	const f = "/var/lib/mcp-sandbox/jobs/j0123456789ab.out"
	for _, c := range []struct {
		omitted, lines, omittedLines, first, at int64
		head                                    string
		endsLine                                bool
		want                                    string
	}{
		{824043, 9300, 7468, 1, 3522, strings.Repeat("x\n", 1761), true,
			"[... lines 1762–9229 left out (824043 bytes); read them with read_file path=" + f + " offset=1762 limit=200 ...]\n"},
		{500, 40, 10, 101, 9000, "a\nb\n", true,
			"[... lines 103–112 left out (500 bytes); read them with read_file path=" + f + " offset=103 limit=10 ...]\n"},
		{4980, 0, 0, 12, 2006, "€€", false,
			"[... part of line 12 left out (4980 bytes); read them with execute: tail -c +2007 " + f + " | head -c 4980 ...]\n"},
		{70, 3, 1, 1, 2, "a\n", true,
			"[... line 2 left out (70 bytes); read them with read_file path=" + f + " offset=2 limit=1 ...]\n"},
		{70, 3, 1, 1, 3, "a\nb", false,
			"[... lines 2–3 left out (70 bytes); read them with read_file path=" + f + " offset=2 limit=2 ...]\n"},
		{500, 40, 10, -1, 2, "a\n", true, "[... 500 bytes (10 lines) left out; the whole output is in " + f + " ...]\n"},
		{500, -1, 0, 7, 2, "a\n", true, "[... 500 bytes left out; the whole output is in " + f + " ...]\n"},
		// 45 MB left out: search before paging.
		{45_000_000, 900000, 899000, 1, 3522, "x\n", true,
			"[... lines 2–899001 left out (45000000 bytes); that is a lot: search it first with execute, e.g. grep -n PATTERN " + f + " | head -50; read them with read_file path=" + f + " offset=2 limit=200 ...]\n"},
		{45_000_000, -1, 0, 7, 2, "a\n", true, "[... 45000000 bytes left out; the whole output is in " + f + "; that is a lot: search it first with execute, e.g. grep -n PATTERN " + f + " | head -50 ...]\n"},
	} {
		if got := cutMarker(c.omitted, c.lines, c.omittedLines, c.first, c.at, []byte(c.head), c.endsLine, f); got != c.want {
			t.Errorf("cutMarker(%d, %d, %d, %d, %d, %q, %v) =\n%q, want\n%q", c.omitted, c.lines, c.omittedLines, c.first, c.at, c.head, c.endsLine, got, c.want)
		}
	}
}

// TestCutOneLongLine: the byte range the marker names for part of one long line is
// exactly the part left out, also in a delivery that starts past the file's start and
// with bytes held from the previous one.
func TestCutOneLongLine(t *testing.T) {
	file := "earlier output\n" + strings.Repeat("0123456789", 3000) + "\n"
	const from = 15 // the delivery starts after the first line
	rng := file[from:]
	_, head, tail := budget(4096)
	held := []byte(rng[:3])
	rest := rng[3:]
	payload := rest[:head] + rest[len(rest)-tail:]
	text, cut, _ := cutStream([]byte(payload), held, from+3, int64(len(rest)), 1, 2, false, 4096, head, tail, "/f")
	m := regexp.MustCompile(`\[\.\.\. part of line 2 left out \((\d+) bytes\)(?:; that is a lot: search it first with execute, e\.g\. grep -n PATTERN /f \| head -50)?; read them with execute: tail -c \+(\d+) /f \| head -c (\d+) \.\.\.\]\n`).FindStringSubmatchIndex(text)
	if !cut || m == nil {
		t.Fatalf("no byte-range marker: %q", text)
	}
	n, _ := strconv.Atoi(text[m[2]:m[3]])
	start, _ := strconv.Atoi(text[m[4]:m[5]])
	shownHead, shownTail := text[:m[0]], text[m[1]:]
	left := file[start-1 : start-1+n]
	if strings.TrimSuffix(shownHead, "\n")+left+shownTail != rng {
		t.Errorf("head %d + left out %d (from byte %d) + tail %d bytes do not make the delivery of %d", len(shownHead), n, start, len(shownTail), len(rng))
	}
}
