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
)

// Lines is a run of lines of a text file, as [Sandbox.ReadLines] returns it.
type Lines struct {
	FileInfo
	First  int64    // number (1-based) of the first line in Lines
	Lines  []string // the lines without their newline, each cut to the line limit
	Cut    int      // how many of Lines were cut to the line limit
	More   bool     // the file goes on after the last line returned
	Capped bool     // fewer lines than asked for came back because of the byte limit
}

// ReadLines returns up to n lines of the regular file at the absolute path p, starting
// with line first (1-based). Each line keeps at most maxLine bytes, and the lines
// returned take at most maxBytes in total. The lines are picked inside the container
// (tail and head stream, and stop early), so neither the time nor the memory depends on
// the size of the file beyond the lines skipped.
func (s *Sandbox) ReadLines(ctx context.Context, p string, first, n int64, maxLine, maxBytes int) (*Lines, error) {
	if first < 1 || n < 1 || maxLine < 1 || maxBytes < 1 {
		return nil, fmt.Errorf("reading lines of %s: bad range %d+%d", p, first, n)
	}
	fi, target, err := s.statRegular(ctx, p)
	if err != nil {
		return nil, err
	}
	// n+1 lines: the one past the end says whether more follow.
	e, err := s.startStream(ctx, "/", []string{"sh", "-c", `tail -n "+$1" -- "$2" | head -n "$3"`, "sh",
		strconv.FormatInt(first, 10), target, strconv.FormatInt(n+1, 10)}, nil)
	if err != nil {
		return nil, fmt.Errorf("reading %s in the sandbox: %w", fi.Path, err)
	}
	defer e.Close()
	out := &Lines{FileInfo: fi, First: first}
	br := bufio.NewReaderSize(e, 64<<10)
	budget := maxBytes
	for {
		line, cut, err := readLine(br, maxLine)
		if err == io.EOF && line == "" && !cut {
			break
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("reading %s in the sandbox: %w", fi.Path, err)
		}
		if int64(len(out.Lines)) == n {
			out.More = true
			break
		}
		if len(line)+1 > budget && len(out.Lines) > 0 {
			out.More, out.Capped = true, true
			break
		}
		budget -= len(line) + 1
		out.Lines = append(out.Lines, line)
		if cut {
			out.Cut++
		}
		if err == io.EOF {
			break
		}
	}
	if len(out.Lines) == 0 {
		// Nothing past the end: tell an empty file from a start beyond the last line.
		code, stderr, werr := e.wait(ctx)
		if werr == nil && code != 0 && stderr != "" {
			return nil, fmt.Errorf("reading %s in the sandbox: %s", fi.Path, clip(stderr, 300))
		}
	}
	return out, nil
}

// readLine reads one line and keeps at most max bytes of it, ending the cut in a whole
// UTF-8 sequence; the rest of a long line is read and dropped, never held.
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
		switch {
		case err == nil:
			return finishLine(b.String(), cut), cut, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return finishLine(b.String(), cut), cut, err
		}
	}
}

func finishLine(s string, cut bool) string {
	if cut {
		// Drop a UTF-8 sequence the cut split.
		for i := 0; i < 3 && len(s) > 0; i++ {
			if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
				break
			}
			s = s[:len(s)-1]
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
