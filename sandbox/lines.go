package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// ReadLines returns up to n lines of the regular file at the absolute path p, starting
// with line first (1-based). Each line keeps at most maxLine bytes, and the lines
// returned take at most maxBytes in total (or one line, when the first is longer). The
// lines are picked inside the container (tail and head stream, and stop early), so
// neither the time nor the memory depends on the size of the file beyond the lines
// skipped. At most linesScanMax bytes are read: a longer line ends the read, as if
// more followed.
func (s *Sandbox) ReadLines(ctx context.Context, p string, first, n int64, maxLine, maxBytes int) (*boxapi.Lines, error) {
	if first < 1 || n < 1 || maxLine < 1 || maxBytes < 1 {
		return nil, fmt.Errorf("reading lines of %s: bad range %d+%d", p, first, n)
	}
	fi, target, err := s.files.statRegular(ctx, p)
	if err != nil {
		return nil, err
	}
	// n+1 lines: the one past the end says whether more follow.
	e, err := s.runner.startStream(ctx, "/", []string{"sh", "-c", `tail -n "+$1" -- "$2" | head -n "$3"`, "sh",
		strconv.FormatInt(first, 10), target, strconv.FormatInt(n+1, 10)}, nil)
	if err != nil {
		return nil, fmt.Errorf("reading %s in the sandbox: %w", fi.Path, err)
	}
	defer e.Close()
	out := &boxapi.Lines{FileInfo: fi, First: first}
	lim := lineLimits{lines: n, line: maxLine, bytes: maxBytes, scan: linesScanMax}
	if err := collectLines(e, lim, out); err != nil {
		return nil, fmt.Errorf("reading %s in the sandbox: %w", fi.Path, err)
	}
	if len(out.Lines) == 0 {
		// Nothing past the end: tell an empty file from a start beyond the last line.
		code, stderr, werr := e.wait(ctx)
		if werr == nil && code != 0 && stderr != "" {
			return nil, fmt.Errorf("reading %s in the sandbox: %s", fi.Path, human.Clip(stderr, 300))
		}
	}
	return out, nil
}

// linesScanMax bounds what one ReadLines reads from the container. The lines kept are
// few and short, but the rest of a long line is read (and dropped) to find where the
// next begins; the program printing them is the sandbox's, and may never stop.
const linesScanMax = 256 << 20

// lineLimits bound one read of lines.
type lineLimits struct {
	lines int64 // lines kept
	line  int   // bytes kept of one line
	bytes int   // bytes kept in all; the first line is kept whatever its length
	scan  int64 // bytes read in all
}

// collectLines reads lines from r into out.Lines within lim, and sets out.Cut, More
// and Capped. At most lim.scan bytes are read, and held: lim.line bytes of the line
// being read (its rest is dropped), the lines kept, and a 64 KiB buffer.
func collectLines(r io.Reader, lim lineLimits, out *boxapi.Lines) error {
	lr := &io.LimitedReader{R: r, N: lim.scan}
	br := bufio.NewReaderSize(lr, 64<<10)
	budget := lim.bytes
	for {
		line, cut, err := readLine(br, lim.line)
		scanned := err == io.EOF && lr.N <= 0
		if err == io.EOF && line == "" && !cut && !scanned {
			return nil
		}
		if err != nil && err != io.EOF {
			return err
		}
		if int64(len(out.Lines)) == lim.lines {
			out.More = true
			return nil
		}
		if len(line)+1 > budget && len(out.Lines) > 0 {
			out.More, out.Capped = true, true
			return nil
		}
		if scanned {
			// The end of what may be read, not of the file: this line may go on.
			if line == "" && !cut {
				out.More = true
				return nil
			}
			cut, out.More = true, true
		}
		budget -= len(line) + 1
		out.Lines = append(out.Lines, line)
		if cut {
			out.Cut++
		}
		if err == io.EOF {
			return nil
		}
	}
}

// readLine reads one line and keeps at most max bytes of it, ending the cut in a whole
// UTF-8 sequence; the rest of a long line is read and dropped, never held. Invalid
// UTF-8 is replaced, within the same max bytes.
func readLine(br *bufio.Reader, max int) (line string, cut bool, err error) {
	var b strings.Builder
	for {
		chunk, err := br.ReadSlice('\n')
		data := chunk
		if err == nil {
			data = chunk[:len(chunk)-1]
		}
		if room := max - b.Len(); room > 0 {
			if len(data) > room {
				b.Write(data[:room])
				cut = true
			} else {
				b.Write(data)
			}
		} else if len(data) > 0 {
			cut = true
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line, cut = finishLine(b.String(), cut, max)
		return line, cut, err
	}
}

// finishLine makes s valid UTF-8 of at most max bytes; cut says s was cut, before or now.
func finishLine(s string, cut bool, max int) (string, bool) {
	if cut {
		s = trimSplitRune(s)
	}
	if utf8.ValidString(s) {
		return s, cut
	}
	// A replacement character takes three bytes where the invalid one took one.
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > max {
		s, cut = trimSplitRune(s[:max]), true
	}
	return s, cut
}

// trimSplitRune drops the end of a UTF-8 sequence that a cut split.
func trimSplitRune(s string) string {
	for i := 0; i < 3 && len(s) > 0; i++ {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}
