package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/docker/docker/api/types/container"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/browsertest"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/links"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// filesHeapPeak samples the heap until stop is called and returns its peak growth.
func filesHeapPeak() (stop func() uint64) { return testenv.HeapPeak(10 * time.Millisecond) }

func imageOf(t *testing.T, res *mcp.CallToolResult) (image.Image, string, string) {
	t.Helper()
	for _, c := range res.Content {
		if ic, ok := c.(mcp.ImageContent); ok {
			data, err := base64.StdEncoding.DecodeString(ic.Data)
			if err != nil {
				t.Fatalf("image data is not base64: %v", err)
			}
			img, format, err := image.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("image content does not decode: %v", err)
			}
			if len(data) > mcptools.MaxImageBytes {
				t.Errorf("image data %d bytes, over %d", len(data), mcptools.MaxImageBytes)
			}
			return img, format, ic.MIMEType
		}
	}
	t.Fatalf("no image content in %v (text %q)", res.Content, testsite.ResultText(res))
	return nil, "", ""
}

func TestReadFileImages(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"}) // the container exists from the first call

	// A 4000x3000 chart-like PNG: scaled to 1568x1176.
	big := image.NewNRGBA(image.Rect(0, 0, 4000, 3000))
	for y := range 3000 {
		for x := range 4000 {
			big.Set(x, y, color.NRGBA{uint8(x / 16), uint8(y / 12), uint8((x + y) / 28), 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, big); err != nil {
		t.Fatal(err)
	}
	s.PutFile("/sandbox/charts/big.png", buf.Bytes())
	stop := filesHeapPeak()
	start := time.Now()
	res := testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/charts/big.png"})
	d := time.Since(start)
	peak := stop()
	if res.IsError {
		t.Fatalf("read_file: %s", testsite.ResultText(res))
	}
	img, format, mimeType := imageOf(t, res)
	b := img.Bounds()
	t.Logf("4000x3000 PNG (%d KB) -> %dx%d %s in %v, heap peak +%d MiB; text %q", buf.Len()>>10, b.Dx(), b.Dy(), mimeType, d, peak>>20, testsite.ResultText(res))
	if max(b.Dx(), b.Dy()) > mcptools.MaxImageEdge || b.Dx() != 1568 || b.Dy() != 1176 || format != "png" || mimeType != "image/png" {
		t.Errorf("scaled image %dx%d %s (%s)", b.Dx(), b.Dy(), format, mimeType)
	}
	// The picture survived the scaling: a corner keeps its colour.
	if r, g, _, _ := img.At(1560, 1170).RGBA(); r>>8 < 230 || g>>8 < 230 {
		t.Errorf("bottom-right pixel %v: the scaled image does not look like the original", img.At(1560, 1170))
	}
	if peak > 128<<20 {
		t.Errorf("heap grew by %d MiB scaling a 4000x3000 image (its pixels take 46 MiB)", peak>>20)
	}
	if !strings.Contains(testsite.ResultText(res), "4000x3000") || !strings.Contains(testsite.ResultText(res), "1568x1176") {
		t.Errorf("text does not say the sizes: %q", testsite.ResultText(res))
	}

	// A small JPEG comes back as it is; a tall one is scaled on its long edge.
	small := image.NewRGBA(image.Rect(0, 0, 300, 200))
	buf.Reset()
	_ = jpeg.Encode(&buf, small, nil)
	s.PutFile("/sandbox/small.jpg", buf.Bytes())
	img, _, mimeType = imageOf(t, testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/small.jpg"}))
	if img.Bounds().Dx() != 300 || mimeType != "image/jpeg" {
		t.Errorf("small JPEG: %v %s", img.Bounds(), mimeType)
	}
	tall := image.NewRGBA(image.Rect(0, 0, 500, 4000))
	buf.Reset()
	_ = jpeg.Encode(&buf, tall, nil)
	s.PutFile("/sandbox/tall.jpeg", buf.Bytes())
	img, _, mimeType = imageOf(t, testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/tall.jpeg"}))
	if img.Bounds().Dy() != 1568 || img.Bounds().Dx() != 196 || mimeType != "image/jpeg" {
		t.Errorf("tall JPEG: %v %s", img.Bounds(), mimeType)
	}

	// WebP (a sample from golang.org/x/image's test data) is recognised and decodable.
	webp, err := os.ReadFile("testdata/images/large-lossy.webp")
	if err != nil {
		t.Fatal(err)
	}
	s.PutFile("/sandbox/photo.webp", webp)
	img, format, mimeType = imageOf(t, testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/photo.webp"}))
	if img.Bounds().Dx() != 600 || img.Bounds().Dy() != 400 || format != "webp" || mimeType != "image/webp" {
		t.Errorf("WebP: %v %s %s", img.Bounds(), format, mimeType)
	}

	// A wide GIF is scaled and comes back as PNG.
	pal := image.NewPaletted(image.Rect(0, 0, 3000, 120), color.Palette{color.White, color.Black})
	buf.Reset()
	if err := gif.Encode(&buf, pal, nil); err != nil {
		t.Fatal(err)
	}
	s.PutFile("/sandbox/wide.gif", buf.Bytes())
	img, _, mimeType = imageOf(t, testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/wide.gif"}))
	if img.Bounds().Dx() != 1568 || img.Bounds().Dy() != 62 || mimeType != "image/png" {
		t.Errorf("wide GIF: %v %s", img.Bounds(), mimeType)
	}

	// An absurd image (a header claiming 100000x100000) is refused before decoding.
	buf.Reset()
	_ = png.Encode(&buf, image.NewGray(image.Rect(0, 0, 1, 1)))
	bomb := buf.Bytes()
	binary.BigEndian.PutUint32(bomb[16:], 100000)
	binary.BigEndian.PutUint32(bomb[20:], 100000)
	binary.BigEndian.PutUint32(bomb[29:], crc32.ChecksumIEEE(bomb[12:29]))
	s.PutFile("/sandbox/bomb.png", bomb)
	stop = filesHeapPeak()
	res = testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/bomb.png"})
	if peak := stop(); peak > 64<<20 {
		t.Errorf("heap grew by %d MiB on a decompression bomb", peak>>20)
	}
	if !res.IsError || !strings.Contains(testsite.ResultText(res), "too large") {
		t.Errorf("bomb: %v %q", res.IsError, testsite.ResultText(res))
	}

	// Other binary files: a description and a hint.
	s.ContainerExec(`printf '%%PDF-1.7\n\x00\x01binary' > /sandbox/doc.pdf; head -c 5000 /dev/urandom > /sandbox/noise.bin`)
	for _, p := range []string{"/sandbox/doc.pdf", "/sandbox/noise.bin"} {
		res = testsite.Call(ctx, t, c, "read_file", map[string]any{"path": p})
		if txt := testsite.ResultText(res); res.IsError || !strings.Contains(txt, "binary file") || !strings.Contains(txt, "share_file") {
			t.Errorf("%s: %v %q", p, res.IsError, txt)
		}
	}
}

func TestReadFileLargeText(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"}) // the container exists from the first call
	// About 50 MB of numbered lines, made in the container.
	s.ContainerExec(`awk 'BEGIN { for (i = 1; i <= 1250000; i++) printf "line %d: the quick brown fox jumps over the dog\n", i }' > /sandbox/big.txt`)
	size := strings.TrimSpace(s.ContainerExec(`wc -c < /sandbox/big.txt`))
	t.Logf("text file of %s bytes", size)

	stop := filesHeapPeak()
	start := time.Now()
	res := testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/big.txt", "offset": 1000000, "limit": 3})
	d := time.Since(start)
	peak := stop()
	txt := testsite.ResultText(res)
	t.Logf("lines 1000000-1000002 in %v, heap peak +%d KiB:\n%s", d, peak>>10, txt)
	want := "1000000\tline 1000000: the quick brown fox jumps over the dog\n" +
		"1000001\tline 1000001: the quick brown fox jumps over the dog\n" +
		"1000002\tline 1000002: the quick brown fox jumps over the dog\n"
	if res.IsError || !strings.HasPrefix(txt, want) || !strings.Contains(txt, "continue with offset=1000003") {
		t.Fatalf("read_file = %q", txt)
	}
	if d > 3*time.Second {
		t.Errorf("took %v", d)
	}
	if peak > 16<<20 {
		t.Errorf("heap grew by %d MiB reading 3 lines of a 50 MB file", peak>>20)
	}

	// Default page: 2000 lines, then a pointer to the next.
	txt = testsite.ResultText(testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/big.txt"}))
	if n := strings.Count(txt, "\n"); n != mcptools.DefaultReadLines || !strings.HasPrefix(txt, "     1\tline 1:") || !strings.Contains(txt, "continue with offset=2001") {
		t.Errorf("default page: %d lines, ends %q", n, txt[max(0, len(txt)-200):])
	}
	// The end of the file, a start past it, long lines, no final newline.
	txt = testsite.ResultText(testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/big.txt", "offset": "1249999"}))
	if !strings.Contains(txt, "1250000\tline 1250000") || !strings.Contains(txt, "the end of the file") {
		t.Errorf("end: %q", txt)
	}
	res = testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/big.txt", "offset": 2000000})
	if !strings.Contains(testsite.ResultText(res), "ends before") {
		t.Errorf("past the end: %q", testsite.ResultText(res))
	}
	s.ContainerExec(`{ echo short; head -c 10000 /dev/zero | tr '\0' 'x'; printf '\nlast'; } > /sandbox/long.txt`)
	txt = testsite.ResultText(testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/long.txt"}))
	if !strings.Contains(txt, "     2\t"+strings.Repeat("x", mcptools.MaxLineBytes)+"\n") || !strings.Contains(txt, "     3\tlast\n") || !strings.Contains(txt, "were cut") {
		t.Errorf("long lines: %q", human.Clip(txt, 300))
	}
	// A byte cap keeps a page of long lines bounded.
	s.ContainerExec(`awk 'BEGIN { for (i = 1; i <= 500; i++) { s = ""; for (j = 0; j < 150; j++) s = s "0123456789"; print s } }' > /sandbox/wide.txt`)
	txt = testsite.ResultText(testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/wide.txt"}))
	if len(txt) > mcptools.MaxReadBytes+2000 || !strings.Contains(txt, "more follows") {
		t.Errorf("byte cap: %d bytes, ends %q", len(txt), txt[max(0, len(txt)-200):])
	}
}

func TestWriteAndEditFile(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"}) // the container exists from the first call
	content := "#!/bin/bash\necho \"it's $HOME and ${PATH}\" 'single' `backtick` \\n \\\\ \\\ncat <<'EOF'\nheredoc $x\nEOF\n<<EOF\n% printf %s %d\n日本語 ünïcødé 🚀\r\n\ttab\x01\x7f" + "no trailing newline"
	res := testsite.Call(ctx, t, c, "write_file", map[string]any{"path": "/sandbox/new/deep/dir/script.sh", "content": content})
	if res.IsError || !strings.Contains(testsite.ResultText(res), "Created") {
		t.Fatalf("write_file: %q", testsite.ResultText(res))
	}
	sum := sha256.Sum256([]byte(content))
	got := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "sha256sum /sandbox/new/deep/dir/script.sh"}))["stdout"].(string)
	if !strings.HasPrefix(got, hex.EncodeToString(sum[:])) {
		t.Fatalf("sha256 in the sandbox %q, want %x", got, sum)
	}
	// Replacing keeps the mode; an empty content makes an empty file.
	s.ContainerExec("chmod 751 /sandbox/new/deep/dir/script.sh")
	res = testsite.Call(ctx, t, c, "write_file", map[string]any{"path": "/sandbox/new/deep/dir/script.sh", "content": "echo replaced\n"})
	if !strings.Contains(testsite.ResultText(res), "Replaced") {
		t.Errorf("replace: %q", testsite.ResultText(res))
	}
	if got := s.ContainerExec("stat -c '%a %s' /sandbox/new/deep/dir/script.sh && /sandbox/new/deep/dir/script.sh"); got != "751 14\nreplaced\n" {
		t.Errorf("after replace: %q", got)
	}
	testsite.Call(ctx, t, c, "write_file", map[string]any{"path": "/sandbox/empty.txt", "content": ""})
	if got := s.ContainerExec("stat -c %s /sandbox/empty.txt"); got != "0\n" {
		t.Errorf("empty: %q", got)
	}

	// edit_file: one match is replaced; zero and two change nothing and say where.
	testsite.Call(ctx, t, c, "write_file", map[string]any{"path": "/sandbox/app.py", "content": "def f():\n    return 1\n\ndef g():\n    return 1\n# end"})
	s.ContainerExec("chmod 640 /sandbox/app.py")
	before := s.ContainerExec("sha256sum /sandbox/app.py")
	res = testsite.Call(ctx, t, c, "edit_file", map[string]any{"path": "/sandbox/app.py", "old_text": "    return 1\n", "new_text": "    return 2\n"})
	if txt := testsite.ResultText(res); !res.IsError || !strings.Contains(txt, "occurs 2 times") || !strings.Contains(txt, "lines 2, 5") {
		t.Errorf("two matches: %v %q", res.IsError, txt)
	}
	res = testsite.Call(ctx, t, c, "edit_file", map[string]any{"path": "/sandbox/app.py", "old_text": "return 3", "new_text": "return 4"})
	if txt := testsite.ResultText(res); !res.IsError || !strings.Contains(txt, "not found") {
		t.Errorf("no match: %v %q", res.IsError, txt)
	}
	if after := s.ContainerExec("sha256sum /sandbox/app.py"); after != before {
		t.Errorf("a refused edit changed the file")
	}
	res = testsite.Call(ctx, t, c, "edit_file", map[string]any{"path": "/sandbox/app.py", "old_text": "def g():\n    return 1", "new_text": "def g():\n    return \"$2\" # ünï"})
	if txt := testsite.ResultText(res); res.IsError || !strings.Contains(txt, "line 4") {
		t.Errorf("one match: %v %q", res.IsError, txt)
	}
	if got := s.ContainerExec("cat /sandbox/app.py; echo; stat -c %a /sandbox/app.py"); got != "def f():\n    return 1\n\ndef g():\n    return \"$2\" # ünï\n# end\n640\n" {
		t.Errorf("edited file: %q", got)
	}

	// Right after the container was recreated, the file tools work (same volume).
	if err := s.Docker.ContainerRemove(ctx, s.Container, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	res = testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/app.py", "limit": 1})
	if res.IsError || !strings.Contains(testsite.ResultText(res), "     1\tdef f():") {
		t.Errorf("read_file after recreation: %q", testsite.ResultText(res))
	}
	if err := s.Docker.ContainerRemove(ctx, s.Container, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	res = testsite.Call(ctx, t, c, "write_file", map[string]any{"path": "/sandbox/after.txt", "content": "x"})
	if res.IsError {
		t.Errorf("write_file after recreation: %q", testsite.ResultText(res))
	}
	if err := s.Docker.ContainerRemove(ctx, s.Container, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	res = testsite.Call(ctx, t, c, "edit_file", map[string]any{"path": "/sandbox/after.txt", "old_text": "x", "new_text": "y"})
	if res.IsError || s.ContainerExec("cat /sandbox/after.txt") != "y" {
		t.Errorf("edit_file after recreation: %q", testsite.ResultText(res))
	}
}

// zipTree reads a zip archive into path -> content ("->target" for links, "/" for
// directories).
func zipTree(t *testing.T, data []byte) map[string]string {
	t.Helper()
	tree := map[string]string{}
	for _, f := range testenv.ReadZip(t, data) {
		switch {
		case f.Mode().IsDir():
			tree[strings.TrimSuffix(f.Name, "/")] = "/"
		case f.Mode()&os.ModeSymlink != 0:
			tree[f.Name] = "->" + string(f.Data)
		default:
			sum := sha256.Sum256(f.Data)
			tree[f.Name] = fmt.Sprintf("%x %o", sum, f.Mode().Perm())
		}
	}
	return tree
}

func TestShareDirectoryAsZip(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"}) // the container exists from the first call
	s.ContainerExec(`mkdir -p /sandbox/out/sub/deeper /sandbox/out/empty && cd /sandbox/out &&
		head -c 3000000 /dev/urandom > big.bin && seq 1 100000 > sub/nums.txt && printf 'x' > sub/deeper/one &&
		printf 'a b' > 'sub/name with spaces & ünï.txt' && : > zero && chmod 750 sub/nums.txt &&
		ln -s sub/nums.txt link && ln sub/deeper/one hard && echo png > image.png`)
	// What the container says the tree is.
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(s.ContainerExec(`cd /sandbox && find out | while IFS= read -r p; do
		if [ -L "$p" ]; then echo "$p|->$(readlink "$p")"
		elif [ -d "$p" ]; then echo "$p|/"
		else echo "$p|$(sha256sum < "$p" | cut -d' ' -f1) $(stat -c %a "$p")"; fi; done`)), "\n") {
		k, v, _ := strings.Cut(line, "|")
		want[k] = v
	}
	res := testsite.Call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/out/"})
	st := testsite.Structured(t, res)
	if res.IsError || st["name"] != "out.zip" || st["directory"] != true || st["path"] != "/sandbox/out" {
		t.Fatalf("share_file on a directory: %v %q", st, testsite.ResultText(res))
	}
	link := st["url"].(string)
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/zip" ||
		resp.Header.Get("Content-Disposition") != `attachment; filename=out.zip` || resp.ContentLength != -1 {
		t.Fatalf("zip download: %d %q %q length %d", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"), resp.ContentLength)
	}
	got := zipTree(t, data)
	// Directory modes are not compared; the hard link is a copy.
	for k, v := range want {
		if strings.HasSuffix(v, "/") || k == "out/hard" {
			continue
		}
		if got[k] != v {
			t.Errorf("%s: zip has %q, the sandbox %q", k, got[k], v)
		}
	}
	if got["out/hard"] != want["out/sub/deeper/one"] || got["out/empty"] != "/" || got["out/sub/deeper"] != "/" {
		t.Errorf("hard link %q, empty dir %q, nested dir %q", got["out/hard"], got["out/empty"], got["out/sub/deeper"])
	}
	if len(got) != len(want) {
		keys := func(m map[string]string) []string {
			var k []string
			for n := range m {
				k = append(k, n)
			}
			slices.Sort(k)
			return k
		}
		t.Errorf("zip has %v, the sandbox %v", keys(got), keys(want))
	}
	t.Logf("zip of %d entries, %d bytes", len(got), len(data))

	// HEAD answers without making the archive; a removed directory is a clear 404.
	resp, err = http.Head(link)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/zip" {
		t.Fatalf("HEAD: %v %v", resp, err)
	}
	s.ContainerExec("rm -rf /sandbox/out")
	resp, _ = http.Get(link)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("removed directory: %d %s", resp.StatusCode, b)
	}
}

// TestRangeStartsAtOffset: a Range request reads from its offset, not from the start
// of the file (item 5 of the outside review).
func TestRangeStartsAtOffset(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"}) // the container exists from the first call
	s.ContainerExec(`truncate -s 2G /sandbox/sparse.bin && printf 'Z' | dd of=/sandbox/sparse.bin bs=1 seek=2147483647 conv=notrunc 2>/dev/null && head -c 3000000 /dev/urandom > /sandbox/r.bin`)
	sparse := testsite.Structured(t, testsite.Call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/sparse.bin"}))["url"].(string)
	rlink := testsite.Structured(t, testsite.Call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/r.bin"}))["url"].(string)

	get := func(link, rg string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", link, nil)
		if rg != "" {
			req.Header.Set("Range", rg)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	var times []time.Duration
	for range 7 {
		start := time.Now()
		resp, b := get(sparse, "bytes=2147483647-")
		times = append(times, time.Since(start))
		if resp.StatusCode != 206 || string(b) != "Z" || resp.Header.Get("Content-Range") != "bytes 2147483647-2147483647/2147483648" {
			t.Fatalf("last byte: %d %q %q", resp.StatusCode, b, resp.Header.Get("Content-Range"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	slices.Sort(times)
	t.Logf("last byte of a 2 GB file: median %v (all %v)", times[len(times)/2], times)
	if times[len(times)/2] > 250*time.Millisecond {
		t.Errorf("median %v for the last byte of 2 GB: ranged reads do not start at the offset", times[len(times)/2])
	}

	// Exact bytes at offsets across block edges.
	_, whole := get(rlink, "")
	for _, rg := range []struct {
		header     string
		start, end int
	}{
		{"bytes=1-1", 1, 2}, {"bytes=65535-65536", 65535, 65537}, {"bytes=65536-", 65536, 3000000},
		{"bytes=123457-987653", 123457, 987654}, {"bytes=-1", 2999999, 3000000}, {"bytes=2999000-2999999", 2999000, 3000000},
		{"bytes=0-9", 0, 10},
	} {
		resp, b := get(rlink, rg.header)
		if resp.StatusCode != 206 || !bytes.Equal(b, whole[rg.start:rg.end]) {
			t.Errorf("%s: %d, %d bytes, equal %v", rg.header, resp.StatusCode, len(b), bytes.Equal(b, whole[rg.start:rg.end]))
		}
	}

	// At most links.MaxDownloadsPerLink downloads of one link at once; the next gets 429.
	var held []*http.Response
	for range links.MaxDownloadsPerLink {
		resp, err := http.Get(sparse)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, resp) // not read: the download stays open
	}
	resp, b := get(sparse, "bytes=0-0")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "at once") {
		t.Errorf("download %d at once: %d %q", links.MaxDownloadsPerLink+1, resp.StatusCode, b)
	}
	if resp, _ := get(rlink, "bytes=0-0"); resp.StatusCode != 206 {
		t.Errorf("another link while one is busy: %d", resp.StatusCode)
	}
	// Stalled downloads hold nothing else up: commands and file tools still answer.
	start := time.Now()
	if got := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo free"}))["stdout"]; got != "free\n" {
		t.Errorf("execute while downloads stall: %q", got)
	}
	if res := testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "/sandbox/r.bin"}); !strings.Contains(testsite.ResultText(res), "binary") {
		t.Errorf("read_file while downloads stall: %q", testsite.ResultText(res))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("execute and read_file took %v while downloads stall", d)
	}
	held[0].Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _ := get(sparse, "bytes=0-0")
		if resp.StatusCode == 206 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d after a download ended", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, r := range held[1:] {
		r.Body.Close()
	}
}

// BenchmarkRangeLastByte fetches the last byte of a 2 GB sparse file through a link,
// next to a raw Docker exec of `true` (the least any read in the container costs
// without a reader started ahead), alternating the two. The target is under 100 ms.
func BenchmarkRangeLastByte(b *testing.B) {
	s := testsite.Start(b, testsite.Options{})
	ctx := context.Background()
	c := s.Client(ctx)
	testsite.Call(ctx, b, c, "execute", map[string]any{"command": "truncate -s 2G /sandbox/sparse.bin"})
	link := testsite.Structured(b, testsite.Call(ctx, b, c, "share_file", map[string]any{"path": "/sandbox/sparse.bin"}))["url"].(string)
	req, _ := http.NewRequest("GET", link, nil)
	req.Header.Set("Range", "bytes=2147483647-")
	var raw, ranged time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		rawExec(ctx, b, s.Docker, s.Container)
		t1 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t2 := time.Now()
		if resp.StatusCode != 206 || n != 1 {
			b.Fatalf("%d, %d bytes", resp.StatusCode, n)
		}
		raw += t1.Sub(t0)
		ranged += t2.Sub(t1)
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(b.N) }
	b.ReportMetric(ms(ranged), "last-byte-ms")
	b.ReportMetric(ms(raw), "raw-exec-ms")
	b.ReportMetric(ms(ranged)/ms(raw), "ratio")
}

// TestShareFileCleansPath: dot segments are removed before signing, so the link is
// the one browsers and curl will ask for (item 6 of the outside review); a path
// relative to /sandbox is taken from there, by share_file and read_file alike.
func TestShareFileCleansPath(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"}) // the container exists from the first call
	s.ContainerExec("mkdir -p /sandbox/d && echo hello > /sandbox/a.txt")
	if text := testsite.ResultText(testsite.Call(ctx, t, c, "read_file", map[string]any{"path": "a.txt"})); !strings.Contains(text, "hello") || !strings.Contains(text, "/sandbox/a.txt") {
		t.Errorf("read_file a.txt: %q", text)
	}
	for _, p := range []string{"/sandbox/./a.txt", "/sandbox/d/../a.txt", "/sandbox//a.txt", "a.txt", "d/../a.txt"} {
		st := testsite.Structured(t, testsite.Call(ctx, t, c, "share_file", map[string]any{"path": p}))
		if st["path"] != "/sandbox/a.txt" {
			t.Errorf("%s: path %v, want /sandbox/a.txt", p, st["path"])
		}
		// Fetch it the way a browser does: dot segments removed first.
		u, err := url.Parse(st["url"].(string))
		if err != nil {
			t.Fatal(err)
		}
		u = u.ResolveReference(&url.URL{Path: u.EscapedPath()})
		resp, err := http.Get(u.String())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "hello\n" {
			t.Errorf("%s: link %s answered %d %q", p, u, resp.StatusCode, b)
		}
	}
}

// TestSymlinkLoopShare: a loop is "not a regular file", never Docker's API URL; a link
// whose file became a loop answers 404 (item 9 of the outside review).
func TestSymlinkLoopShare(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"}) // the container exists from the first call
	s.ContainerExec("cd /sandbox && ln -s loop-b loop-a && ln -s loop-a loop-b && echo hi > f.txt")
	for _, tool := range []string{"share_file", "read_file"} {
		res := testsite.Call(ctx, t, c, tool, map[string]any{"path": "/sandbox/loop-a"})
		txt := testsite.ResultText(res)
		if !res.IsError || !strings.Contains(txt, "not a regular file") || strings.Contains(txt, "sock") || strings.Contains(txt, "http") {
			t.Errorf("%s of a loop: %v %q", tool, res.IsError, txt)
		}
	}
	link := testsite.Structured(t, testsite.Call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/f.txt"}))["url"].(string)
	s.ContainerExec("cd /sandbox && rm f.txt && ln -s f.txt f.txt")
	logBefore, _ := os.ReadFile(filepath.Join(s.Storage, "caddy.log"))
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(b), "not a regular file") {
		t.Errorf("link to a file that became a loop: %d %s", resp.StatusCode, b)
	}
	logAfter, _ := os.ReadFile(filepath.Join(s.Storage, "caddy.log"))
	if added := string(logAfter[len(logBefore):]); strings.Contains(added, `"level":"error"`) {
		t.Errorf("a loop was logged as an error: %s", added)
	}
}

// TestInlineDownloads: a PNG opens in the browser as an image; HTML, SVG and files
// whose bytes do not match their name download.
func TestInlineDownloads(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"}) // the container exists from the first call
	chart := image.NewNRGBA(image.Rect(0, 0, 320, 200))
	for y := range 200 {
		for x := range 320 {
			chart.Set(x, y, color.NRGBA{uint8(x * 255 / 320), 120, uint8(y * 255 / 200), 255})
		}
	}
	var buf bytes.Buffer
	_ = png.Encode(&buf, chart)
	s.PutFile("/sandbox/chart.png", buf.Bytes())
	s.ContainerExec(`cd /sandbox && echo '<html><script>document.title="ran"</script></html>' > page.html && cp page.html fake.png &&
		echo '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>' > d.svg`)
	s.PutFile("/sandbox/doc.pdf", minimalPDF())
	links := map[string]string{}
	for _, n := range []string{"chart.png", "page.html", "fake.png", "d.svg", "doc.pdf"} {
		links[n] = testsite.Structured(t, testsite.Call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/" + n}))["url"].(string)
	}
	for name, want := range map[string][2]string{
		"chart.png": {"inline", "image/png"},
		"page.html": {"attachment", "text/html; charset=utf-8"},
		"fake.png":  {"attachment", "image/png"},
		"d.svg":     {"attachment", "image/svg+xml"},
		"doc.pdf":   {"inline", "application/pdf"},
	} {
		resp, err := http.Get(links[name])
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		cd, ct, csp := resp.Header.Get("Content-Disposition"), resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy")
		if !strings.HasPrefix(cd, want[0]+";") || ct != want[1] || resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(csp, "default-src 'none'") {
			t.Errorf("%s: %q %q %q", name, cd, ct, csp)
		}
		if !strings.HasSuffix(csp, "; sandbox") {
			t.Errorf("%s: CSP %q without sandbox", name, csp)
		}
	}
	// A ranged request of an inline file gets the same headers.
	req, _ := http.NewRequest("GET", links["chart.png"], nil)
	req.Header.Set("Range", "bytes=100-")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 206 || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "inline") {
		t.Errorf("range of PNG: %d %q", resp.StatusCode, resp.Header.Get("Content-Disposition"))
	}

	// In Chromium: the PNG link shows the image; the HTML link does not render a page.
	bctx := newFilesBrowser(t)
	if err := chromedp.Do(bctx, chromedp.Navigate(links["chart.png"])); err != nil {
		t.Fatalf("opening the PNG link: %v", err)
	}
	type page struct {
		ContentType string `json:"contentType"`
		Images      int    `json:"images"`
		Width       int    `json:"width"`
	}
	shown, err := chromedp.Run(bctx, chromedp.Evaluate[page](`({contentType: document.contentType, images: document.images.length, width: document.images.length ? document.images[0].naturalWidth : 0})`))
	if err != nil {
		t.Fatal(err)
	}
	browsertest.Screenshot(t, bctx, "share-png-inline.png")
	if shown.ContentType != "image/png" || shown.Images != 1 || shown.Width != 320 {
		t.Errorf("the PNG link shows %+v, want an image document of width 320", shown)
	}
	// The PDF opens in Chromium's viewer, sandboxing CSP and all.
	if err := chromedp.Do(bctx, chromedp.Navigate(links["doc.pdf"])); err != nil {
		t.Fatalf("opening the PDF link: %v", err)
	}
	time.Sleep(3 * time.Second) // the viewer draws the page after the load event
	if ct, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.contentType`)); err != nil || ct != "application/pdf" {
		t.Errorf("the PDF link shows %q (%v)", ct, err)
	}
	browsertest.Screenshot(t, bctx, "share-pdf-inline.png")

	err = chromedp.Do(bctx, chromedp.Navigate(links["page.html"]))
	title, _ := chromedp.Run(bctx, chromedp.Title())
	t.Logf("HTML link in Chromium: navigate error %v, title %q", err, title)
	if title == "ran" || err == nil || !strings.Contains(err.Error(), "ERR_ABORTED") {
		t.Errorf("the HTML link did not turn into a download: navigate error %v, title %q", err, title)
	}
}

// minimalPDF is a one-page PDF saying "Hello PDF".
func minimalPDF() []byte {
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 200] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
		"<< /Length 44 >>\nstream\nBT /F1 24 Tf 20 100 Td (Hello PDF) Tj ET\nendstream",
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
	}
	var b strings.Builder
	b.WriteString("%PDF-1.4\n")
	var offs []int
	for i, o := range objs {
		offs = append(offs, b.Len())
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	x := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, o := range offs {
		fmt.Fprintf(&b, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, x)
	return []byte(b.String())
}

func newFilesBrowser(t *testing.T) context.Context {
	t.Helper()
	return browsertest.New(t, 900, 700, 60*time.Second)
}

func TestShareFileExpiresIn(t *testing.T) {
	s := testsite.Start(t, testsite.Options{Directive: []string{"link_ttl 1h", "max_link_ttl 2h"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"}) // the container exists from the first call
	s.ContainerExec("echo hi > /sandbox/x.txt")
	for _, tc := range []struct {
		expiresIn any
		want      time.Duration
	}{
		{nil, time.Hour}, {2, 2 * time.Second}, {"600", 10 * time.Minute}, {7200, 2 * time.Hour},
	} {
		args := map[string]any{"path": "/sandbox/x.txt"}
		if tc.expiresIn != nil {
			args["expires_in"] = tc.expiresIn
		}
		now := time.Now()
		st := testsite.Structured(t, testsite.Call(ctx, t, c, "share_file", args))
		exp, err := time.Parse(time.RFC3339, st["expires_at"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if d := exp.Sub(now); d < tc.want-2*time.Second || d > tc.want+time.Second {
			t.Errorf("expires_in %v: link lives %v, want %v", tc.expiresIn, d, tc.want)
		}
	}
	for _, bad := range []any{7201, 0, -5, "7d", 1.5, true} {
		res := testsite.Call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/x.txt", "expires_in": bad})
		if txt := testsite.ResultText(res); !res.IsError || !strings.Contains(txt, `"expires_in" must be`) || !strings.Contains(txt, "max_link_ttl") {
			t.Errorf("expires_in %v: %v %q", bad, res.IsError, txt)
		}
	}
	short := testsite.Structured(t, testsite.Call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/x.txt", "expires_in": 1}))["url"].(string)
	time.Sleep(2100 * time.Millisecond)
	resp, err := http.Get(short)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 410 {
		t.Errorf("a link of 1 s after 2 s: %d", resp.StatusCode)
	}

	// Annotations as clients see them.
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]bool{ // read-only, destructive
		"share_file": {true, false},
		"read_file":  {true, false},
		"write_file": {false, true},
		"edit_file":  {false, true},
	}
	seen := 0
	for _, tool := range tools.Tools {
		w, ok := want[tool.Name]
		if !ok {
			continue
		}
		seen++
		a := tool.Annotations
		if a.ReadOnlyHint == nil || *a.ReadOnlyHint != w[0] || a.DestructiveHint == nil || *a.DestructiveHint != w[1] || a.OpenWorldHint == nil || *a.OpenWorldHint {
			t.Errorf("%s annotations: %+v", tool.Name, a)
		}
		if tool.Name == "share_file" {
			if _, ok := tool.InputSchema.Properties["expires_in"]; !ok || !strings.Contains(tool.Description, "2h") {
				t.Errorf("share_file: no expires_in, or the description does not say the maximum: %q", tool.Description)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("found %d of the file tools", seen)
	}
}

// TestSlowDownloadLeavesExecuteFree: while a person downloads a large file slowly
// through a share link, the model's commands run as usual; the bytes that arrive are
// the file's.
func TestSlowDownloadLeavesExecuteFree(t *testing.T) {
	testsite.WithAndWithoutAgent(t, testSlowDownloadLeavesExecuteFree)
}

func testSlowDownloadLeavesExecuteFree(t *testing.T, opts testsite.Options) {
	s := testsite.Start(t, opts)
	ctx := context.Background()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "head -c 16000000 /dev/urandom > /sandbox/large.bin"})
	link := testsite.Structured(t, testsite.Call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/large.bin"}))["url"].(string)

	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	head := make([]byte, 64<<10)
	if _, err := io.ReadFull(resp.Body, head); err != nil {
		t.Fatal(err)
	}
	// The person stops reading; the download stays open.
	time.Sleep(500 * time.Millisecond)
	for i := 0; i < 3; i++ {
		c0 := time.Now()
		res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo free"})
		if res.IsError || testsite.Structured(t, res)["stdout"] != "free\n" {
			out := testsite.Structured(t, res)
			id, _ := out["job_id"].(string)
			t.Fatalf("execute during the download: %s\n%v\njob %s in the container:\n%s", testsite.ResultText(res), out, id,
				s.TryExec("cd "+sandbox.JobsDir+" && for f in "+id+".*; do echo \"== $f\"; head -c 300 $f; echo; done"))
		}
		if took := time.Since(c0); took > 5*time.Second {
			t.Errorf("execute took %v while a download stalled", took)
		}
	}
	want := s.ContainerExec("head -c 65536 /sandbox/large.bin | sha256sum")
	sum := sha256.Sum256(head)
	if !strings.HasPrefix(want, hex.EncodeToString(sum[:])) {
		t.Errorf("the first 64 KiB downloaded differ from the file's")
	}
}
