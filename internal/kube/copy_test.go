package kube

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

func TestStatPath(t *testing.T) {
	c, pod := podForTests(t)
	ctx := context.Background()
	r := execIn(t, c, pod, boxapi.ProcessSpec{Stdout: true, Stderr: true, Argv: []string{"sh", "-c",
		`rm -rf /tmp/st && mkdir -p /tmp/st/d && chmod 0750 /tmp/st/d && printf 12345 > /tmp/st/f && chmod 4640 /tmp/st/f && ln -s ../st/f /tmp/st/l && ln -s '/no where
x' /tmp/st/dangling && touch -d @1700000000 /tmp/st/f`}}, nil)
	if r.code != 0 {
		t.Fatalf("making the files: %+v", r)
	}
	st, err := c.StatPath(ctx, pod, "/tmp/st/f")
	if err != nil || st.Name != "f" || st.Size != 5 || st.Mode != os.ModeSetuid|0o640 || !st.Mtime.Equal(time.Unix(1700000000, 0)) || st.LinkTarget != "" {
		t.Fatalf("file: %+v %v", st, err)
	}
	st, err = c.StatPath(ctx, pod, "/tmp/st/d")
	if err != nil || st.Name != "d" || st.Mode != os.ModeDir|0o750 {
		t.Fatalf("dir: %+v %v", st, err)
	}
	st, err = c.StatPath(ctx, pod, "/tmp/st/l")
	if err != nil || st.Name != "l" || st.Mode&os.ModeSymlink == 0 || st.LinkTarget != "../st/f" {
		t.Fatalf("symlink: %+v %v", st, err)
	}
	st, err = c.StatPath(ctx, pod, "/tmp/st/dangling")
	if err != nil || st.Mode&os.ModeSymlink == 0 || st.LinkTarget != "/no where\nx" {
		t.Fatalf("dangling symlink: %+v %v", st, err)
	}
	if _, err := c.StatPath(ctx, pod, "/tmp/st/missing"); !cerrdefs.IsNotFound(err) {
		t.Fatalf("missing: %v, want not found", err)
	}
	if _, err := c.StatPath(ctx, "exec-no-such-pod", "/"); !cerrdefs.IsNotFound(err) {
		t.Fatalf("missing pod: %v, want not found", err)
	}
}

func TestParseStat(t *testing.T) {
	good := map[string]boxapi.PathStat{
		"81a4 5 1700000000\n":          {Size: 5, Mode: 0o644, Mtime: time.Unix(1700000000, 0)},
		"41ed 4096 1\n":                {Size: 4096, Mode: os.ModeDir | 0o755, Mtime: time.Unix(1, 0)},
		"a1ff 3 2\n../x\n":             {Size: 3, Mode: os.ModeSymlink | 0o777, Mtime: time.Unix(2, 0), LinkTarget: "../x"},
		"a1ff 3 2\na\nb\n":             {Size: 3, Mode: os.ModeSymlink | 0o777, Mtime: time.Unix(2, 0), LinkTarget: "a\nb"},
		"43ff 0 0\n":                   {Mode: os.ModeDir | os.ModeSticky | 0o777, Mtime: time.Unix(0, 0)},
		"2190 0 0\n":                   {Mode: os.ModeDevice | os.ModeCharDevice | 0o620, Mtime: time.Unix(0, 0)},
		"11a4 0 -5\n":                  {Mode: os.ModeNamedPipe | 0o644, Mtime: time.Unix(-5, 0)},
		"c1ed 0 0\n":                   {Mode: os.ModeSocket | 0o755, Mtime: time.Unix(0, 0)},
		"89a4 9223372036854775807 0\n": {Size: 1<<63 - 1, Mode: os.ModeSetuid | 0o644, Mtime: time.Unix(0, 0)},
	}
	for in, want := range good {
		got, err := parseStat([]byte(in))
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "\n", "81a4 5\n", "81a4 5 1 2\n", "zz 5 1\n", "81a4 -1 1\n", "81a4 5 x\n",
		"81a4 5 1\nextra\n", "a1ff 3 2\n", "a1ff 3 2\n\n", "a1ff 3 2\nno newline", "81a4  5 1\n", "81a4 5 99999999999999999999\n",
		"a1ff 3 2\n" + strings.Repeat("x", 5000) + "\n", "a1ff 3 2\na\x00b\n"} {
		if st, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("%q: parsed as %+v", bad, st)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("81a4 5 1700000000\n"))
	f.Add([]byte("a1ff 3 2\n../x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStat(b)
		if err == nil && (st.Size < 0 || len(st.LinkTarget) > 4096) {
			t.Fatalf("%q: %+v", b, st)
		}
	})
}

func TestCopyRoundTrip(t *testing.T) {
	c, pod := podForTests(t)
	ctx := context.Background()
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now().Truncate(time.Second)
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "cp/", Mode: 0o755, ModTime: now}))
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "cp/big", Mode: 0o600, Size: int64(len(data)), ModTime: now}))
	_, err := tw.Write(data)
	must(t, err)
	must(t, tw.Close())
	execIn(t, c, pod, boxapi.ProcessSpec{Argv: []string{"rm", "-rf", "/tmp/cp"}, Stdout: true}, nil)
	content := &countReader{r: &buf}
	total := buf.Len()
	if err := c.CopyIn(ctx, pod, "/tmp", content); err != nil {
		t.Fatalf("CopyIn: %v", err)
	}
	if content.n != total {
		t.Fatalf("CopyToContainer read %d of the archive's %d bytes", content.n, total)
	}
	r := execIn(t, c, pod, boxapi.ProcessSpec{Argv: []string{"sh", "-c", "stat -c '%a %s' /tmp/cp/big"}, Stdout: true, Stderr: true}, nil)
	if r.stdout != "600 3145728\n" {
		t.Fatalf("the copied file: %+v", r)
	}
	rc, st, err := c.CopyOut(ctx, pod, "/tmp/cp")
	if err != nil {
		t.Fatalf("CopyFromContainer: %v", err)
	}
	defer rc.Close()
	if st.Name != "cp" || !st.Mode.IsDir() {
		t.Fatalf("stat of the copied directory: %+v", st)
	}
	tr := tar.NewReader(rc)
	var got []byte
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the archive: %v", err)
		}
		names = append(names, h.Name)
		if h.Name == "cp/big" {
			got, err = io.ReadAll(tr)
			must(t, err)
		}
	}
	if _, err := io.Copy(io.Discard, rc); err != nil {
		t.Fatalf("the archive's stream ended with: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, not the 3 MiB written (entries %q)", len(got), names)
	}

	// Errors: a missing directory, a missing source, an archive tar rejects.
	if err := c.CopyIn(ctx, pod, "/no/such/dir", bytes.NewReader(make([]byte, 1024))); !cerrdefs.IsNotFound(err) {
		t.Fatalf("copy into a missing directory: %v, want not found", err)
	}
	if _, _, err := c.CopyOut(ctx, pod, "/no/such/file"); !cerrdefs.IsNotFound(err) {
		t.Fatalf("copy of a missing file: %v, want not found", err)
	}
	err = c.CopyIn(ctx, pod, "/tmp", strings.NewReader(strings.Repeat("not a tar archive ", 100)))
	if err == nil || !strings.Contains(err.Error(), "tar failed") {
		t.Fatalf("copy of garbage: %v, want tar's failure", err)
	}
	t.Logf("copy of garbage: %v", err)
}

type countReader struct {
	r io.Reader
	n int
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestStatPathHostileStat: a container whose stat never answers does not hold the
// caller past the stat's bound.
func TestStatPathHostileStat(t *testing.T) {
	c := testClient(t)
	pod := "exec-hostile-stat" // of its own: its sh and stat are spoilt
	testPod(t, c, pod)
	r := execIn(t, c, pod, boxapi.ProcessSpec{Stdout: true, Stderr: true, Argv: []string{"sh", "-c",
		// busybox's sh runs its own stat whatever PATH says: the container's sh becomes
		// bash, which looks stat up in PATH and finds one that never answers.
		`B=$(command -v bash) && for d in $(echo "$PATH" | tr : ' '); do mkdir -p "$d" && printf '#!%s\nexec sleep 1000\n' "$B" > "$d/stat.new" && chmod +x "$d/stat.new" && mv -f "$d/stat.new" "$d/stat"; done && ln -sf "$B" /bin/sh.new && mv -f /bin/sh.new /bin/sh`}}, nil)
	if r.code != 0 {
		t.Fatalf("replacing stat: %+v", r)
	}
	defer func(d time.Duration) { statTimeout = d }(statTimeout)
	statTimeout = 2 * time.Second
	begin := time.Now()
	_, err := c.StatPath(context.Background(), pod, "/tmp")
	took := time.Since(begin)
	if err == nil || took > 20*time.Second {
		t.Fatalf("a stat that never answers: %v after %v", err, took)
	}
	t.Logf("%v after %v", err, took.Round(time.Millisecond))
}
