package sandbox

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/docker/docker/pkg/stdcopy"
)

// reference computes what boundedOutput should keep, the simple way.
func reference(all []byte, max int) (head, tail []byte) {
	h := max / 2
	if len(all) <= max {
		return all, nil
	}
	return all[:h], all[len(all)-(max-h):]
}

func TestBoundedOutputMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 500; iter++ {
		max := 1024 + r.IntN(3000)
		b := newBoundedOutput(max)
		var all []byte
		for n := r.IntN(20); n > 0; n-- {
			chunk := make([]byte, r.IntN(3*max))
			for i := range chunk {
				chunk[i] = 'a' + byte(r.IntN(26))
			}
			b.Write(chunk)
			all = append(all, chunk...)
		}
		if b.Total() != int64(len(all)) {
			t.Fatalf("total %d, want %d", b.Total(), len(all))
		}
		head, tail := reference(all, max)
		got := b.String()
		if tail == nil {
			if got != string(all) || b.Truncated() {
				t.Fatalf("untruncated output differs (max %d, len %d)", max, len(all))
			}
			continue
		}
		want := fmt.Sprintf("%s\n[... %d bytes omitted ...]\n%s", head, len(all)-len(head)-len(tail), tail)
		if got != want || !b.Truncated() {
			t.Fatalf("max %d len %d: output differs", max, len(all))
		}
	}
}

func TestBoundedOutputUTF8Cuts(t *testing.T) {
	for _, tc := range []struct{ in, wantHead, wantTail string }{
		// 4-byte emoji cut after 1, 2 and 3 bytes at the head end.
		{strings.Repeat("a", 511) + strings.Repeat("😀", 300), strings.Repeat("a", 511), ""},
		{strings.Repeat("a", 510) + strings.Repeat("😀", 300), strings.Repeat("a", 510), ""},
		{strings.Repeat("a", 509) + strings.Repeat("😀", 300), strings.Repeat("a", 509), ""},
		{strings.Repeat("a", 508) + strings.Repeat("😀", 300), strings.Repeat("a", 508) + "😀", ""},
		// 2-byte characters cut at the tail start.
		{strings.Repeat("é", 1000) + "z", "", strings.Repeat("é", 255) + "z"},
		// Invalid bytes are replaced, not dropped.
		{"\xff\xfe" + strings.Repeat("a", 2000) + "\xc3", "\uFFFDa", "a\uFFFD"}, // a run of invalid bytes becomes one U+FFFD
	} {
		b := newBoundedOutput(1024)
		b.Write([]byte(tc.in))
		got := b.String()
		if !utf8.ValidString(got) {
			t.Errorf("invalid UTF-8 for %.20q", tc.in)
		}
		head, tail, ok := strings.Cut(got, "\n[... ")
		if !ok {
			t.Fatalf("no marker")
		}
		_, tail, _ = strings.Cut(tail, " ...]\n")
		if !strings.HasPrefix(head, tc.wantHead) || !strings.HasSuffix(tail, tc.wantTail) {
			t.Errorf("%.20q: head %.30q... tail ...%.30q", tc.in, head, tail[max(0, len(tail)-30):])
		}
		// Kept and omitted bytes add up to the input.
		var omitted int
		fmt.Sscanf(got[len(head):], "\n[... %d bytes omitted", &omitted)
		if tc.wantHead == strings.Repeat("a", 511) && len(head)+omitted+len(tail) != len(tc.in) {
			t.Errorf("bytes do not add up: %d+%d+%d != %d", len(head), omitted, len(tail), len(tc.in))
		}
	}
}

func TestDemux(t *testing.T) {
	var stream bytes.Buffer
	out := stdcopy.NewStdWriter(&stream, stdcopy.Stdout)
	errw := stdcopy.NewStdWriter(&stream, stdcopy.Stderr)
	big := bytes.Repeat([]byte("0123456789"), 20000) // one frame larger than the read buffer
	out.Write([]byte("hello "))
	errw.Write([]byte("oops"))
	out.Write(big)
	var gotOut, gotErr bytes.Buffer
	if err := demux(&stream, func(p []byte) { gotOut.Write(p) }, func(p []byte) { gotErr.Write(p) }); err != nil {
		t.Fatal(err)
	}
	if gotOut.String() != "hello "+string(big) || gotErr.String() != "oops" {
		t.Errorf("stdout %d bytes, stderr %q", gotOut.Len(), gotErr.String())
	}

	// A stream cut inside a frame is an error, not a silent success.
	stream.Reset()
	out.Write([]byte("truncated"))
	cut := stream.Bytes()[:stream.Len()-3]
	if err := demux(bytes.NewReader(cut), func([]byte) {}, func([]byte) {}); err == nil {
		t.Error("cut stream accepted")
	}
}
