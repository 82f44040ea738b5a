package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestOpenRangeSeeks: a read at an offset starts there, so the last byte of a 2 GB
// sparse file comes back as fast as the first.
func TestOpenRangeSeeks(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx := context.Background()
	mustExec(t, sb, "truncate -s 2G /sandbox/sparse && printf Z | dd of=/sandbox/sparse bs=1 seek=2147483647 conv=notrunc 2>/dev/null", boxapi.ExecOptions{})
	const size = 2 << 30
	for i := range 6 { // the first calls may pay for Ensure and for starting a reader ahead
		start := time.Now()
		f, err := sb.OpenRange(ctx, "/sandbox/sparse", size-1, 1)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		d := time.Since(start)
		t.Logf("last byte of 2 GB in %v", d)
		if err != nil || string(b) != "Z" || f.Size != size {
			t.Fatalf("read %q, %v, size %d", b, err, f.Size)
		}
		if i > 0 {
			time.Sleep(200 * time.Millisecond) // time to start the next reader ahead
		}
		if d > time.Second {
			t.Errorf("last byte took %v: the read does not seek", d)
		}
	}

	// Exact bytes at offsets around block edges, with and without a length.
	mustExec(t, sb, "seq 1 300000 > /sandbox/nums", boxapi.ExecOptions{})
	var want bytes.Buffer
	for i := 1; i <= 300000; i++ {
		want.WriteString(itoa(i) + "\n")
	}
	w := want.Bytes()
	for _, tc := range []struct{ off, n int64 }{
		{1, 10}, {rangeBlock - 1, 2}, {rangeBlock, rangeBlock}, {rangeBlock + 1, -1},
		{12345, 3 * rangeBlock}, {int64(len(w)) - 1, 1}, {int64(len(w)) - 5, -1}, {int64(len(w)), -1}, {7, 0},
	} {
		f, err := sb.OpenRange(ctx, "/sandbox/nums", tc.off, tc.n)
		if err != nil {
			t.Fatalf("OpenRange(%d, %d): %v", tc.off, tc.n, err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		end := int64(len(w))
		if tc.n >= 0 {
			end = tc.off + tc.n
		}
		if err != nil || !bytes.Equal(got, w[tc.off:end]) {
			t.Errorf("OpenRange(%d, %d): %d bytes, err %v; want %d bytes", tc.off, tc.n, len(got), err, end-tc.off)
		}
	}
	// Closing early ends the read in the container too.
	f, err := sb.OpenRange(ctx, "/sandbox/sparse", 1, -1)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1000)
	if _, err := io.ReadFull(f, buf); err != nil {
		t.Fatal(err)
	}
	f.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res := mustExec(t, sb, "ps -o args | grep -c '^[d]d if=/sandbox/sparse' || true", boxapi.ExecOptions{})
		if strings.TrimSpace(res.Stdout) == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dd still runs after Close: %s", res.Stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSymlinkLoopIsNotRegular: a loop is "not a regular file", and the error says
// nothing of the engine's API.
func TestSymlinkLoopIsNotRegular(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx := context.Background()
	mustExec(t, sb, "ln -s loop-b /sandbox/loop-a && ln -s loop-a /sandbox/loop-b && ln -s self /sandbox/self && mkdir -p /sandbox/d && ln -s /sandbox/loop-a/x /sandbox/d/through", boxapi.ExecOptions{})
	for _, p := range []string{"/sandbox/loop-a", "/sandbox/self", "/sandbox/loop-a/x", "/sandbox/d/through"} {
		_, err := sb.Stat(ctx, p)
		if !errors.Is(err, boxapi.ErrNotRegular) && !errors.Is(err, boxapi.ErrNotFound) {
			t.Errorf("Stat(%s) = %v, want not a regular file", p, err)
		}
		if err != nil && (strings.Contains(err.Error(), "sock") || strings.Contains(err.Error(), "http") || strings.Contains(err.Error(), "API")) {
			t.Errorf("Stat(%s) error shows the engine's API: %v", p, err)
		}
		if f, err := sb.Open(ctx, p, 3); err == nil {
			f.Close()
			t.Errorf("Open(%s) succeeded", p)
		}
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}
