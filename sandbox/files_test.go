package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

func TestStatAndOpenErrors(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx := context.Background()
	mustExec(t, sb, `mkdir -p d && echo hello > f.txt && ln -s f.txt rel-link && ln -s /sandbox/f.txt abs-link &&
		ln -s d dir-link && ln -s missing dangling && mkfifo fifo && mknod chardev c 1 3 && ln -s rel-link link-to-link`, boxapi.ExecOptions{})

	for _, tc := range []struct {
		path string
		want error
	}{
		{"f.txt", boxapi.ErrRelativePath},
		{"sandbox/f.txt", boxapi.ErrRelativePath},
		{"/sandbox/missing", boxapi.ErrNotFound},
		{"/nope/nope", boxapi.ErrNotFound},
		{"/sandbox/dangling", boxapi.ErrNotFound},
		{"/sandbox/d", boxapi.ErrIsDir},
		{"/sandbox", boxapi.ErrIsDir},
		{"/sandbox/dir-link", boxapi.ErrIsDir},
		{"/sandbox/fifo", boxapi.ErrNotRegular},
		{"/sandbox/chardev", boxapi.ErrNotRegular},
	} {
		if _, err := sb.Stat(ctx, tc.path); !errors.Is(err, tc.want) {
			t.Errorf("Stat(%q) = %v, want %v", tc.path, err, tc.want)
		}
		if f, err := sb.Open(ctx, tc.path, 0); !errors.Is(err, tc.want) {
			if f != nil {
				f.Close()
			}
			t.Errorf("Open(%q) = %v, want %v", tc.path, err, tc.want)
		}
	}

	for _, p := range []string{"/sandbox/f.txt", "/sandbox/rel-link", "/sandbox/abs-link", "/sandbox/link-to-link", "/sandbox/./d/../f.txt"} {
		fi, err := sb.Stat(ctx, p)
		if err != nil {
			t.Errorf("Stat(%q): %v", p, err)
			continue
		}
		if fi.Size != 6 || !fi.Mode.IsRegular() || time.Since(fi.ModTime) > time.Hour || !strings.HasPrefix(fi.Path, "/sandbox/") {
			t.Errorf("Stat(%q) = %+v", p, fi)
		}
		f, err := sb.Open(ctx, p, 0)
		if err != nil {
			t.Errorf("Open(%q): %v", p, err)
			continue
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil || string(b) != "hello\n" {
			t.Errorf("Open(%q) read %q, %v", p, b, err)
		}
	}
	if fi, _ := sb.Stat(ctx, "/sandbox/rel-link"); fi.Name != "rel-link" {
		t.Errorf("name %q", fi.Name)
	}
}

func TestOpenOffsets(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx := context.Background()
	mustExec(t, sb, "seq 1 200000 > /sandbox/nums", boxapi.ExecOptions{})
	var want bytes.Buffer
	for i := 1; i <= 200000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	size := int64(want.Len())
	for _, off := range []int64{0, 1, 12345, size - 1, size} {
		f, err := sb.Open(ctx, "/sandbox/nums", off)
		if err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil || f.Size != size || !bytes.Equal(got, want.Bytes()[off:]) {
			t.Errorf("offset %d: read %d bytes (err %v), size %d; want %d bytes", off, len(got), err, f.Size, size-off)
		}
	}
	if _, err := sb.Open(ctx, "/sandbox/nums", size+1); err == nil {
		t.Errorf("offset beyond end accepted")
	}
	if _, err := sb.Open(ctx, "/sandbox/nums", -1); err == nil {
		t.Errorf("negative offset accepted")
	}
}

func TestOpenLargeFileBoundedMemory(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx := context.Background()
	const size = 300_000_000
	res := mustExec(t, sb, fmt.Sprintf("head -c %d /dev/urandom > /sandbox/big && sha256sum /sandbox/big", size), boxapi.ExecOptions{})
	wantSum, _, _ := strings.Cut(res.Stdout, " ")
	if len(wantSum) != 64 {
		t.Fatalf("sha256sum in container: %+v", res)
	}
	stop := testenv.HeapPeak(20 * time.Millisecond)
	start := time.Now()
	f, err := sb.Open(ctx, "/sandbox/big", 0)
	if err != nil {
		t.Fatal(err)
	}
	got, n, err := sha256Hex(f)
	f.Close()
	d := time.Since(start)
	peak := stop()
	t.Logf("streamed %d MB in %v (%.0f MB/s), heap peak +%d KiB", n/1e6, d, float64(n)/1e6/d.Seconds(), peak>>10)
	if err != nil || n != size || f.Size != size {
		t.Fatalf("read %d bytes, err %v, size %d", n, err, f.Size)
	}
	if got != wantSum {
		t.Errorf("sha256 %s, container says %s", got, wantSum)
	}
	if peak > 64<<20 {
		t.Errorf("heap grew by %d MiB while streaming 300 MB", peak>>20)
	}

	// A tail read at an offset is exact too.
	res = mustExec(t, sb, fmt.Sprintf("tail -c %d /sandbox/big | sha256sum", 1000), boxapi.ExecOptions{})
	f, err = sb.Open(ctx, "/sandbox/big", size-1000)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err = sha256Hex(f)
	f.Close()
	if want, _, _ := strings.Cut(res.Stdout, " "); err != nil || got != want {
		t.Errorf("tail sha256 mismatch (err %v)", err)
	}
}

func TestOpenRecreatesRemovedContainer(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx := context.Background()
	mustExec(t, sb, "echo kept > /sandbox/k", boxapi.ExecOptions{})
	if err := cli.ContainerRemove(ctx, sb.cfg.Container, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	fi, err := sb.Stat(ctx, "/sandbox/k")
	if err != nil || fi.Size != 5 {
		t.Fatalf("Stat after removal: %+v, %v", fi, err)
	}
}

// TestOpenLeavesExecsFree: a download nobody reads any more holds no lock that commands
// need. Whole large files come through a transfer container; reading them gives the
// file's bytes, also when a directory on the way is a symbolic link off the volume
// (where a transfer container would see a different root).
func TestOpenLeavesExecsFree(t *testing.T) {
	withAndWithoutAgent(t, testOpenLeavesExecsFree)
	t.Run("direct", func(t *testing.T) { testOpenLeavesExecsFree(t, directConfig(t)) })
}

func testOpenLeavesExecsFree(t *testing.T, cfg Config) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, cfg)
	ctx := context.Background()
	mustExec(t, sb, `mkdir -p /sandbox/d /tmp/off && head -c 9000000 /dev/urandom > /sandbox/d/big.bin &&
		head -c 6000000 /dev/urandom > /tmp/off/big.bin && ln -s /tmp/off /sandbox/lnk`, boxapi.ExecOptions{})
	sum := func(p string) string {
		return strings.Fields(mustExec(t, sb, "sha256sum "+p, boxapi.ExecOptions{}).Stdout)[0]
	}
	for _, p := range []string{"/sandbox/d/big.bin", "/sandbox/lnk/big.bin"} {
		f, err := sb.Open(ctx, p, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := sha256Hex(f)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if got != sum(p) {
			t.Errorf("%s: read sha256 %s, want the file's", p, got)
		}
	}

	// A stalled download: one read, then nothing.
	f, err := sb.Open(ctx, "/sandbox/d/big.bin", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Read(make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	ectx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := sb.Exec(ectx, "echo free > /sandbox/d/note && cat /sandbox/d/note", boxapi.ExecOptions{})
	if err != nil || res.Stdout != "free\n" {
		t.Fatalf("a command while a download stalls: %v %+v", err, res)
	}
	f.Close()
}
