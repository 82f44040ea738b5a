package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

func TestSanitizeName(t *testing.T) {
	long := strings.Repeat("é", 6000) + ".csv" // 12 KB
	for _, tc := range []struct {
		in, want string
	}{
		{"report.pdf", "report.pdf"},
		{"../../etc/x", "x"},
		{"a/b", "b"},
		{`C:\Users\me\data.xlsx`, "data.xlsx"},
		{"/etc/passwd", "passwd"},
		{"nul\x00byte.txt", "nulbyte.txt"},
		{"new\nline\r.txt", "newline.txt"},
		{"tab\there", "tabhere"},
		{"  spaced  ", "spaced"},
		{"\u202Egnp.exe", "gnp.exe"},
		{"a\u2066b\u200Fc", "abc"},
		{"emoji \U0001F468\u200D\U0001F4BB.png", "emoji \U0001F468\u200D\U0001F4BB.png"},
		{".", ""},
		{"..", ""},
		{"...", ""},
		{"../..", ""},
		{"a/..", ""},
		{"", ""},
		{"\x00\n", ""},
		{"/", ""},
		{".bashrc", ".bashrc"},
		{tempPrefix + "x.part", ""},
		{"bad\xffutf8", "bad\uFFFDutf8"},
	} {
		got, changed := boxapi.SanitizeName(tc.in)
		if got != tc.want {
			t.Errorf("boxapi.SanitizeName(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if changed != (got != tc.in) {
			t.Errorf("boxapi.SanitizeName(%q) changed = %v", tc.in, changed)
		}
	}
	got, _ := boxapi.SanitizeName(long)
	if len(got) > boxapi.MaxNameBytes || !utf8.ValidString(got) || !strings.HasSuffix(got, ".csv") {
		t.Errorf("10 KB name: got %d bytes, valid %v, %q...", len(got), utf8.ValidString(got), got[len(got)-10:])
	}
	// Properties over random input: one component, bounded, no control bytes.
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(600))
		for i := range b {
			b[i] = byte(r.IntN(256))
			if r.IntN(4) == 0 {
				b[i] = "./\\\x00\n"[r.IntN(5)]
			}
		}
		got, _ := boxapi.SanitizeName(string(b))
		if got == "" {
			continue
		}
		if len(got) > boxapi.MaxNameBytes || strings.ContainsAny(got, "/\\\x00\n\r") || got == "." || got == ".." || !utf8.ValidString(got) {
			t.Fatalf("boxapi.SanitizeName(%q) = %q", b, got)
		}
		if again, changed := boxapi.SanitizeName(got); again != got || changed {
			t.Fatalf("SanitizeName is not stable on %q: %q", got, again)
		}
	}
}

func TestCandidates(t *testing.T) {
	c := candidates("data.tar.gz")
	if c[0] != "data.tar.gz" || c[1] != "data (1).tar.gz" || c[19] != "data (19).tar.gz" || len(c) != 21 {
		t.Errorf("candidates = %q", c)
	}
	if c := candidates(".env"); c[1] != ".env (1)" {
		t.Errorf("candidates(.env) = %q", c[:2])
	}
	name, _ := boxapi.SanitizeName(strings.Repeat("ж", 200) + ".txt")
	for _, c := range candidates(name) {
		if len(c) > boxapi.MaxNameBytes || !utf8.ValidString(c) || !strings.HasSuffix(c, ".txt") {
			t.Errorf("candidate %q (%d bytes)", c, len(c))
		}
	}
}

// upload streams data into the sandbox and returns the result.
func upload(t *testing.T, sb *Sandbox, dir, name string, r io.Reader, opts boxapi.UploadOptions) (boxapi.UploadResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return sb.Upload(ctx, dir, name, r, opts)
}

// failingReader yields n bytes, then an error, as a client that hangs up does.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("client went away")
	}
	k := min(len(p), f.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	f.n -= k
	return k, nil
}

func TestUpload(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(i * 7)
	}
	const dir = "/sandbox/in/deeper"
	listTemp := func() string {
		return mustExec(t, sb, "ls -A "+dir+" | grep '^"+tempPrefix+"' || true", boxapi.ExecOptions{}).Stdout
	}

	for _, known := range []bool{true, false} {
		size := int64(-1)
		if known {
			size = int64(len(data))
		}
		res, err := upload(t, sb, dir, "data.bin", bytes.NewReader(data), boxapi.UploadOptions{Size: size, Max: 10 << 20})
		if err != nil {
			t.Fatalf("known=%v: %v", known, err)
		}
		want := "data.bin"
		if !known {
			want = "data (1).bin"
		}
		if res.Name != want || res.Path != dir+"/"+want || res.Renamed != !known || res.Size != int64(len(data)) {
			t.Errorf("known=%v: %+v", known, res)
		}
		got := mustExec(t, sb, "sha256sum '"+res.Path+"'", boxapi.ExecOptions{}).Stdout
		if !strings.HasPrefix(got, sha(data)) {
			t.Errorf("known=%v: sha256 in the sandbox %q, want %s", known, got, sha(data))
		}
	}

	// Too large: refused at once when the length is known, cut off while streaming
	// when it is not; an aborted stream leaves nothing either.
	for _, tc := range []struct {
		name string
		r    io.Reader
		opts boxapi.UploadOptions
		want error
	}{
		{"big-known", bytes.NewReader(data), boxapi.UploadOptions{Size: int64(len(data)), Max: 1 << 20}, boxapi.ErrTooLarge},
		{"big-chunked", bytes.NewReader(data), boxapi.UploadOptions{Size: -1, Max: 1 << 20}, boxapi.ErrTooLarge},
		{"big-lying", bytes.NewReader(data), boxapi.UploadOptions{Size: 1000, Max: 1 << 20}, nil},
		{"abort-known", &failingReader{n: 2 << 20}, boxapi.UploadOptions{Size: 3 << 20, Max: 10 << 20}, nil},
		{"abort-chunked", &failingReader{n: 2 << 20}, boxapi.UploadOptions{Size: -1, Max: 10 << 20}, nil},
		{"short-known", bytes.NewReader(data[:100]), boxapi.UploadOptions{Size: 1000, Max: 10 << 20}, nil},
	} {
		_, err := upload(t, sb, dir, tc.name, tc.r, tc.opts)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
		if out := mustExec(t, sb, "ls -A "+dir, boxapi.ExecOptions{}).Stdout; strings.Contains(out, tc.name) || strings.Contains(out, tempPrefix) {
			t.Errorf("%s left something behind: %q", tc.name, out)
		}
	}
	if s := listTemp(); s != "" {
		t.Errorf("temporary files left: %q", s)
	}

	// Bad names are refused by Upload itself, whatever the caller did.
	for _, name := range []string{"../x", "a/b", ".", "..", "nul\x00", "nl\n", strings.Repeat("a", 300)} {
		if _, err := upload(t, sb, dir, name, strings.NewReader("x"), boxapi.UploadOptions{Size: 1}); !errors.Is(err, boxapi.ErrBadName) {
			t.Errorf("Upload(%q) = %v, want ErrBadName", name, err)
		}
	}
	if _, err := upload(t, sb, "relative", "x", strings.NewReader("x"), boxapi.UploadOptions{Size: 1}); !errors.Is(err, boxapi.ErrRelativePath) {
		t.Errorf("relative dir: %v", err)
	}
	mustExec(t, sb, "echo > /sandbox/afile", boxapi.ExecOptions{})
	if _, err := upload(t, sb, "/sandbox/afile", "x", strings.NewReader("x"), boxapi.UploadOptions{Size: 1}); !errors.Is(err, boxapi.ErrNotDir) {
		t.Errorf("dir is a file: %v", err)
	}
	if _, err := upload(t, sb, "/sandbox/afile/sub", "x", strings.NewReader("x"), boxapi.UploadOptions{Size: 1}); !errors.Is(err, boxapi.ErrNotDir) {
		t.Errorf("dir below a file: %v", err)
	}

	// A symbolic link where the name would go is never followed or replaced.
	mustExec(t, sb, "ln -s /etc/passwd "+dir+"/link.txt && mkdir "+dir+"/sub.txt && echo -n h > "+dir+"/.hidden && echo > "+dir+"/"+tempPrefix+"x.part", boxapi.ExecOptions{})
	for _, name := range []string{"link.txt", "sub.txt"} {
		res, err := upload(t, sb, dir, name, strings.NewReader("new"), boxapi.UploadOptions{Size: 3})
		if err != nil || !res.Renamed || res.Name == name {
			t.Errorf("upload over %s: %+v %v", name, res, err)
		}
	}
	if out := mustExec(t, sb, "head -c 5 /etc/passwd", boxapi.ExecOptions{}).Stdout; out != "root:" {
		t.Errorf("/etc/passwd changed: %q", out)
	}

	list, err := sb.ListFiles(context.Background(), dir, 100)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, fmt.Sprintf("%s:%d", e.Name, e.Size))
		if time.Since(e.ModTime) > time.Hour {
			t.Errorf("mtime of %s: %v", e.Name, e.ModTime)
		}
	}
	if got := strings.Join(names, ","); got != ".hidden:1,data (1).bin:3145745,data.bin:3145745,link (1).txt:3,sub (1).txt:3" {
		t.Errorf("ListFiles = %s", got)
	}
	if l, err := sb.ListFiles(context.Background(), "/sandbox/none", 10); err != nil || len(l) != 0 {
		t.Errorf("ListFiles of a missing dir: %v %v", l, err)
	}

	// Empty files are files too, whichever way they come.
	for _, size := range []int64{0, -1} {
		res, err := upload(t, sb, "/sandbox/empty", "empty.txt", strings.NewReader(""), boxapi.UploadOptions{Size: size})
		if err != nil || res.Size != 0 {
			t.Errorf("empty upload (size %d): %+v %v", size, res, err)
		}
	}
	if out := mustExec(t, sb, "ls -A /sandbox/empty && wc -c < '/sandbox/empty/empty (1).txt'", boxapi.ExecOptions{}).Stdout; out != "empty (1).txt\nempty.txt\n0\n" {
		t.Errorf("empty uploads: %q", out)
	}

	// The container was removed: Upload brings it back.
	if err := cli.ContainerRemove(context.Background(), sb.cfg.Container, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if res, err := upload(t, sb, "/sandbox/after", "x.txt", strings.NewReader("hello"), boxapi.UploadOptions{Size: 5}); err != nil || res.Path != "/sandbox/after/x.txt" {
		t.Fatalf("upload after removal: %+v %v", res, err)
	}
}

// TestUploadConcurrentSameName uploads one name several times at once: every upload
// lands under its own name and none replaces another.
func TestUploadConcurrentSameName(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	const n = 6
	errs := make(chan error, n)
	for i := range n {
		go func() {
			body := strings.Repeat(fmt.Sprint(i), 1000)
			_, err := sb.Upload(context.Background(), "/sandbox/c", "same.txt", strings.NewReader(body), boxapi.UploadOptions{Size: int64(len(body))})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	out := mustExec(t, sb, "cd /sandbox/c && ls -A | wc -l && cat * | fold -w 1000 | sort -u | wc -l", boxapi.ExecOptions{}).Stdout
	if strings.Fields(out)[0] != "6" || strings.Fields(out)[1] != "6" {
		t.Errorf("want 6 files with 6 different contents, got %q", out)
	}
}

// BenchmarkUploadPaths compares the two ways Upload moves bytes (the archive API for
// known lengths, cat's stdin otherwise) with a bare CopyToContainer, for 300 MB.
func BenchmarkUploadPaths(b *testing.B) {
	const size = 300 << 20
	sb, cli := benchSandbox(b)
	ctx := context.Background()
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 31)
	}
	src := func() io.Reader { return io.LimitReader(repeatReader(chunk), size) }
	var raw, archive, stdin time.Duration
	b.SetBytes(size)
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "raw.bin", Size: size, Mode: 0o644})
			_, err := io.Copy(tw, src())
			if err == nil {
				err = tw.Close()
			}
			pw.CloseWithError(err)
		}()
		if err := cli.CopyToContainer(ctx, sb.cfg.Container, "/sandbox", pr, container.CopyToContainerOptions{}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := sb.Upload(ctx, "/sandbox", "a.bin", src(), boxapi.UploadOptions{Size: size}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := sb.Upload(ctx, "/sandbox", "s.bin", src(), boxapi.UploadOptions{Size: -1}); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		raw, archive, stdin = raw+t1.Sub(t0), archive+t2.Sub(t1), stdin+t3.Sub(t2)
		b.StopTimer()
		mustExec(b, sb, "rm -f /sandbox/*.bin", boxapi.ExecOptions{})
		b.StartTimer()
	}
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(raw), "raw-MB/s")
	b.ReportMetric(mbps(archive), "archive-MB/s")
	b.ReportMetric(mbps(stdin), "stdin-MB/s")
}

type repeatReader []byte

func (r repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		n += copy(p[n:], r)
	}
	return n, nil
}

// TestUploadGuardRemovesOnHangup: when the connection to the guard ends without a
// verdict (the server stopped mid-upload), the guard removes the temporary file.
func TestUploadGuardRemovesOnHangup(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	tmp := tempPrefix + "hangup.part"
	mustExec(t, sb, "echo partial > /sandbox/"+tmp, boxapi.ExecOptions{})
	g, real, err := sb.files.startGuard(context.Background(), "/sandbox", tmp, []string{"final.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if real != "/sandbox" {
		t.Errorf("real path %q, want /sandbox", real)
	}
	g.p.Close()
	var out string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if out = mustExec(t, sb, "ls -A /sandbox", boxapi.ExecOptions{}).Stdout; out == "" {
			return
		}
	}
	t.Fatalf("left behind after the hang-up: %q", out)
}

// gatedReader yields its bytes only once open is closed, as a person on a slow line
// does.
type gatedReader struct {
	open chan struct{}
	r    io.Reader
	once sync.Once
	read chan struct{} // closed at the first Read
}

func (g *gatedReader) Read(p []byte) (int, error) {
	g.once.Do(func() { close(g.read) })
	<-g.open
	return g.r.Read(p)
}

// TestUploadLeavesExecsFree: while an upload waits for its bytes, commands run as
// usual. Docker's archive API locks the container it writes to for as long as the
// archive streams, so the upload must not stream into the sandbox's own container.
// Directories reached through a symbolic link off the volume get their bytes too.
func TestUploadLeavesExecsFree(t *testing.T) {
	withAndWithoutAgent(t, testUploadLeavesExecsFree)
	t.Run("direct", func(t *testing.T) { testUploadLeavesExecsFree(t, directConfig(t)) })
}

func testUploadLeavesExecsFree(t *testing.T, cfg Config) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, cfg)
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	for _, dir := range []string{"/sandbox/slow", "/sandbox/off"} {
		t.Run(path.Base(dir), func(t *testing.T) {
			if dir == "/sandbox/off" {
				mustExec(t, sb, "mkdir -p /tmp/elsewhere && ln -s /tmp/elsewhere /sandbox/off", boxapi.ExecOptions{})
			}
			body := strings.Repeat("slow bytes\n", 100000)
			g := &gatedReader{open: make(chan struct{}), r: strings.NewReader(body), read: make(chan struct{})}
			done := make(chan error, 1)
			var res boxapi.UploadResult
			go func() {
				var err error
				res, err = sb.Upload(context.Background(), dir, "late.txt", g, boxapi.UploadOptions{Size: int64(len(body))})
				done <- err
			}()
			select {
			case <-g.read:
			case <-time.After(time.Minute):
				t.Fatal("the upload never started reading")
			}
			time.Sleep(300 * time.Millisecond) // the bytes are awaited now
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			t0 := time.Now()
			r, err := sb.Exec(ctx, "echo free", boxapi.ExecOptions{})
			cancel()
			if err != nil || r.Stdout != "free\n" {
				t.Fatalf("a command during the upload: %v %+v", err, r)
			}
			t.Logf("a command while the upload waited for its bytes took %v", time.Since(t0))
			close(g.open)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			real := map[string]string{"/sandbox/slow": "/sandbox/slow", "/sandbox/off": "/tmp/elsewhere"}[dir]
			if res.Path != real+"/late.txt" {
				t.Errorf("path %q, want where the file went, %s/late.txt", res.Path, real)
			}
			want := sha([]byte(body))
			got := strings.Fields(mustExec(t, sb, "sha256sum "+real+"/late.txt", boxapi.ExecOptions{}).Stdout)
			if len(got) == 0 || got[0] != want {
				t.Errorf("sha256 in the sandbox %v, want %s", got, want)
			}
		})
	}
	// The transfer containers go with the Sandbox, and never ran; the direct channel
	// needs none.
	list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", labelTransferOf+"="+sb.Config().Container))})
	if err != nil {
		t.Fatal(err)
	}
	if direct, _ := sb.AgentDirect(); direct {
		if len(list) != 0 {
			t.Errorf("transfer containers: %+v, want none through the direct channel", list)
		}
	} else if len(list) != 1 || list[0].State != "created" {
		t.Errorf("transfer containers: %+v, want one, created and never started", list)
	}
	sb.CloseTransfers()
	list, _ = cli.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", labelTransferOf+"="+sb.Config().Container))})
	if len(list) != 0 {
		t.Errorf("%d transfer containers left after CloseTransfers", len(list))
	}
}

// An upload into a full file system fails with an error that says so, and leaves no
// temporary file behind: through the direct channel's bulk socket, the agent's exec
// and the fallback alike.
func TestUploadDiskFull(t *testing.T) {
	hostConfigForTest.Set(func(hc *container.HostConfig) {
		hc.Tmpfs = map[string]string{"/small": "size=1m"}
	})
	t.Cleanup(hostConfigForTest.Clear)
	run := func(t *testing.T, cfg Config) {
		sb := newTestSandbox(t, dockerClient(t), cfg)
		body := strings.Repeat("x", 4<<20)
		for _, size := range []int64{int64(len(body)), -1} {
			_, err := sb.Upload(context.Background(), "/small", "big.bin", strings.NewReader(body), boxapi.UploadOptions{Size: size})
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), "no space") {
				t.Fatalf("an upload of %d bytes into 1 MB: %v, want an error that says there is no space", size, err)
			}
			if res := mustExec(t, sb, "ls -A /small", boxapi.ExecOptions{}); res.Stdout != "" {
				t.Fatalf("left behind: %q", res.Stdout)
			}
		}
	}
	withAndWithoutAgent(t, run)
	t.Run("direct", func(t *testing.T) { run(t, directConfig(t)) })
}
