package sandbox

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

func TestRealDirPath(t *testing.T) {
	for _, tc := range []struct {
		out, want string
	}{
		{"/sandbox/uploads\n", "/sandbox/uploads"},
		{"/\n", "/"},
		{"/tmp/real dir/ünï\n", "/tmp/real dir/ünï"},
		{"/" + strings.Repeat("a", maxRealDir-1) + "\n", "/" + strings.Repeat("a", maxRealDir-1)},
		{"/sandbox/uploads", ""},   // no newline: cut short
		{"/sandbox/x\n\n", ""},     // two lines
		{"/tmp/a\nb\n", ""},        // a newline inside
		{"/tmp/a\rb\n", ""},        // a carriage return
		{"/tmp/\x1b[31mred\n", ""}, // a terminal escape
		{"/tmp/\u0085x\n", ""},     // C1 control (NEL)
		{"/tmp/\xff\n", ""},        // not UTF-8
		{"relative/dir\n", ""},
		{"\n", ""},
		{"", ""},
		{"/tmp/../etc\n", ""},
		{"/tmp/./x\n", ""},
		{"/tmp//x\n", ""},
		{"/tmp/x/\n", ""},
		{"/" + strings.Repeat("a", maxRealDir) + "\n", ""}, // over the bound
	} {
		got, err := realDirPath(tc.out)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("realDirPath(%.60q) = %q, %v; want %q", tc.out, got, err, tc.want)
		}
		if err != nil && !errors.Is(err, boxapi.ErrBadName) {
			t.Errorf("realDirPath(%.60q): %v, want ErrBadName", tc.out, err)
		}
	}
}

// FuzzRealDirPath: what realDirPath accepts is one absolute, clean line of text within
// its bound, and checking any input allocates at most a few KiB: the length check comes
// before path.Clean (which copies at most maxRealDir bytes), and the error quotes at most
// 100 bytes of the input.
func FuzzRealDirPath(f *testing.F) {
	for _, s := range []string{"/sandbox\n", "/\n", "/a\nb\n", "x\n", "/a/../b\n", "/\xff\n", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		p, err := realDirPath(out)
		if err == nil && (p+"\n" != out || len(p) > maxRealDir || p[0] != '/' || strings.ContainsAny(p, "\n\r\x00")) {
			t.Fatalf("realDirPath(%q) accepted %q", out, p)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 10 {
			_, _ = realDirPath(out)
		}
		runtime.ReadMemStats(&after)
		if per := (after.TotalAlloc - before.TotalAlloc) / 10; per > 8<<10 {
			t.Fatalf("realDirPath(%d bytes) allocates %d bytes per call", len(out), per)
		}
	})
}
