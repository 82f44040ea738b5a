package sandbox

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// boundedOutput keeps the first and the last bytes of a stream of any length in fixed
// memory: a plain head buffer and a ring buffer for the tail. Commands may print
// gigabytes; only max bytes per stream are ever held.
type boundedOutput struct {
	head    []byte // first bytes, up to maxHead
	maxHead int
	tail    []byte // ring of the last bytes once head is full; allocated on first use
	tsize   int    // capacity of the tail ring
	tpos    int    // next write position in tail
	tlen    int    // valid bytes in tail
	total   int64  // bytes written in total
}

func newBoundedOutput(max int) *boundedOutput {
	h := max / 2
	// The head starts small and grows, so the many short outputs stay cheap.
	return &boundedOutput{head: make([]byte, 0, min(h, 4096)), maxHead: h, tsize: max - h}
}

// Write never fails; it always consumes all of p.
func (b *boundedOutput) Write(p []byte) (int, error) {
	n := len(p)
	b.total += int64(n)
	if room := b.maxHead - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if b.tail == nil {
		b.tail = make([]byte, b.tsize)
	}
	if len(p) >= b.tsize { // only the last tsize bytes can survive
		copy(b.tail, p[len(p)-b.tsize:])
		b.tpos, b.tlen = 0, b.tsize
		return n, nil
	}
	k := copy(b.tail[b.tpos:], p)
	copy(b.tail, p[k:])
	b.tpos = (b.tpos + len(p)) % b.tsize
	b.tlen = min(b.tlen+len(p), b.tsize)
	return n, nil
}

// Total is the number of bytes the stream produced.
func (b *boundedOutput) Total() int64 { return b.total }

// Truncated reports whether bytes were dropped from the middle.
func (b *boundedOutput) Truncated() bool {
	return b.total > int64(len(b.head)+b.tlen)
}

// tailBytes returns the ring's content in stream order.
func (b *boundedOutput) tailBytes() []byte {
	out := make([]byte, 0, b.tlen)
	if b.tlen < b.tsize {
		return append(out, b.tail[:b.tlen]...)
	}
	out = append(out, b.tail[b.tpos:]...)
	return append(out, b.tail[:b.tpos]...)
}

// String returns the kept output as valid UTF-8. When bytes were dropped, the head and the
// tail are cut at character boundaries and joined by a line saying how many bytes are
// missing; invalid sequences become U+FFFD.
func (b *boundedOutput) String() string {
	tail := b.tailBytes()
	if !b.Truncated() {
		return strings.ToValidUTF8(string(b.head)+string(tail), "\uFFFD")
	}
	head := trimIncompleteEnd(b.head)
	tail = trimIncompleteStart(tail)
	omitted := b.total - int64(len(head)) - int64(len(tail))
	var sb strings.Builder
	sb.Grow(len(head) + len(tail) + 48)
	sb.WriteString(strings.ToValidUTF8(string(head), "\uFFFD"))
	fmt.Fprintf(&sb, "\n[... %d bytes omitted ...]\n", omitted)
	sb.WriteString(strings.ToValidUTF8(string(tail), "\uFFFD"))
	return sb.String()
}

// trimIncompleteEnd drops a multibyte sequence cut off at the end of p, so that a
// character split by the cut is not turned into a replacement character.
func trimIncompleteEnd(p []byte) []byte {
	// Look back at most UTFMax-1 bytes for the start of the last sequence.
	for i := 1; i < utf8.UTFMax && i <= len(p); i++ {
		c := p[len(p)-i]
		if c < utf8.RuneSelf { // ASCII: nothing is cut
			return p
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(p[len(p)-i:]) {
				return p[:len(p)-i]
			}
			return p
		}
	}
	return p
}

// trimIncompleteStart drops continuation bytes at the start of p that belong to a
// character whose first bytes were cut away.
func trimIncompleteStart(p []byte) []byte {
	i := 0
	for i < utf8.UTFMax-1 && i < len(p) && !utf8.RuneStart(p[i]) {
		i++
	}
	return p[i:]
}
