package links

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// verifyPath checks a download link and returns the container path and its expiry.
func verifyPath(s *Signer, urlPath string, now time.Time) (string, time.Time, error) {
	_, p, l, err := s.verifyDownload(urlPath, now)
	return p, l.Expires, err
}

// These tests need no Docker and no Caddy: they pin down the rules of download links
// (ranges, If-Range, signatures, what opens inline) in milliseconds.

func TestParseRange(t *testing.T) {
	const size = 1000
	for _, tc := range []struct {
		header   string
		start, n int64
		ok       bool
	}{
		{"bytes=0-499", 0, 500, true},
		{"bytes=500-999", 500, 500, true},
		{"bytes=500-", 500, 500, true},
		{"bytes=999-", 999, 1, true},
		{"bytes=0-0", 0, 1, true},
		{"bytes=-1", 999, 1, true},
		{"bytes=-500", 500, 500, true},
		{"bytes=-5000", 0, 1000, true},     // a suffix longer than the file is the whole file
		{"bytes=900-5000", 900, 100, true}, // an end past the file is cut to it
		{" bytes=10-19 ", 10, 10, true},
		{"bytes=1000-", 0, 0, false}, // starts at the end: not satisfiable
		{"bytes=5000-6000", 0, 0, false},
		{"bytes=-0", 0, 0, false},
		{"bytes=0-1,5-6", 0, -1, true}, // several ranges: the whole file
		{"bytes=abc-", 0, -1, true},    // malformed: ignored
		{"bytes=5-3", 0, -1, true},     // end before start: ignored
		{"items=0-5", 0, -1, true},     // another unit: ignored
		{"bytes=-x", 0, -1, true},
		{"bytes=--5", 0, -1, true},
		{"bytes=5", 0, -1, true},
	} {
		start, n, ok := parseRange(tc.header, size)
		if start != tc.start || n != tc.n || ok != tc.ok {
			t.Errorf("parseRange(%q) = %d, %d, %v; want %d, %d, %v", tc.header, start, n, ok, tc.start, tc.n, tc.ok)
		}
	}
	if _, _, ok := parseRange("bytes=-5", 0); ok {
		t.Errorf("a suffix range of an empty file is satisfiable")
	}
	// The last byte of a 2 GB file.
	if start, n, ok := parseRange("bytes=2147483647-", 2<<30); start != 2147483647 || n != 1 || !ok {
		t.Errorf("last byte of 2 GB: %d %d %v", start, n, ok)
	}
}

func TestIfRange(t *testing.T) {
	mod := time.Date(2026, 5, 1, 12, 0, 0, 500, time.UTC)
	etag := `"abc-123"`
	for _, tc := range []struct {
		ifRange string
		want    bool
	}{
		{"", true},
		{`"abc-123"`, true},
		{`"abc-124"`, false},
		{`W/"abc-123"`, false}, // weak tags never match (RFC 9110 13.1.5)
		{mod.Format(http.TimeFormat), true},
		{mod.Add(time.Hour).Format(http.TimeFormat), true},
		{mod.Add(-time.Hour).Format(http.TimeFormat), false},
		{"not a date", false},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		if tc.ifRange != "" {
			r.Header.Set("If-Range", tc.ifRange)
		}
		if got := ifRangeMatches(r, etag, mod); got != tc.want {
			t.Errorf("If-Range %q: %v, want %v", tc.ifRange, got, tc.want)
		}
	}
}

func TestLinkSignatures(t *testing.T) {
	l := NewSigner("0123456789abcdef-key")
	now := time.Unix(1_800_000_000, 0)
	p := `/sandbox/my report "v2" ü:1.bin`
	dl := l.Download(p, now, time.Hour)
	link, exp := dl.Path, dl.Expires
	if !exp.Equal(now.Add(time.Hour)) || !strings.HasPrefix(link, FilesPrefix) {
		t.Fatalf("sign = %q, %v", link, exp)
	}
	// What the server sees is the decoded path.
	decoded := func(link string) string {
		r, err := http.NewRequest("GET", "http://x"+link, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r.URL.Path
	}
	got, gotExp, err := verifyPath(l, decoded(link), now)
	if err != nil || got != p || !gotExp.Equal(exp) {
		t.Fatalf("verify = %q, %v, %v", got, gotExp, err)
	}
	if strings.ContainsAny(link[len(FilesPrefix):], ` "ü:`) {
		t.Errorf("link not escaped: %s", link)
	}
	if _, _, err := verifyPath(l, decoded(link), exp.Add(time.Second)); !errors.Is(err, errLinkExpired) {
		t.Errorf("after expiry: %v", err)
	}
	if _, _, err := verifyPath(l, decoded(link), exp); err != nil {
		t.Errorf("at the expiry second: %v", err)
	}

	token, _, _ := strings.Cut(strings.TrimPrefix(link, FilesPrefix), "/")
	expStr, sig, _ := strings.Cut(token, ".")
	for name, bad := range map[string]string{
		"other path":      FilesPrefix + token + "/sandbox/other.bin",
		"longer expiry":   FilesPrefix + "9" + expStr + "." + sig + "/sandbox/x",
		"no signature":    FilesPrefix + expStr + "/sandbox/x",
		"empty signature": FilesPrefix + expStr + "./sandbox/x",
		"no path":         FilesPrefix + token,
		"bad expiry":      FilesPrefix + "x." + sig + "/sandbox/x",
		"dot segments":    FilesPrefix + token + "/sandbox/../sandbox/my%20report",
		"flipped sig":     FilesPrefix + expStr + "." + flip(sig) + decoded(link)[len(FilesPrefix)+len(token):],
	} {
		if _, _, err := verifyPath(l, bad, now); !errors.Is(err, errLinkInvalid) {
			t.Errorf("%s (%s): %v, want invalid", name, bad, err)
		}
	}
	// Another key signs other links; a lifetime of one's own is signed too.
	if _, _, _, err := NewSigner("another-key-0123456789").verifyDownload(decoded(link), now); !errors.Is(err, errLinkInvalid) {
		t.Errorf("other key: %v", err)
	}
	week := l.Download(p, now, 7*24*time.Hour)
	long, longExp := week.Path, week.Expires
	if _, e, err := verifyPath(l, decoded(long), now.Add(6*24*time.Hour)); err != nil || !e.Equal(longExp) {
		t.Errorf("signFor 7 days: %v %v", e, err)
	}
}

func flip(s string) string {
	b := []byte(s)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	return string(b)
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"/sandbox/./a.txt":     "/sandbox/a.txt",
		"/sandbox/d/../a.txt":  "/sandbox/a.txt",
		"/sandbox//a.txt":      "/sandbox/a.txt",
		"/sandbox/d/":          "/sandbox/d",
		"/../../etc/passwd":    "/etc/passwd",
		"/sandbox/a b/./c.txt": "/sandbox/a b/c.txt",
	} {
		if got := boxapi.CleanPath(in); got != want {
			t.Errorf("boxapi.CleanPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestServedType(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	jpeg := []byte("\xff\xd8\xff\xe0\x00\x10JFIF\x00")
	pdf := []byte("%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
	html := []byte("<!doctype html><html><script>alert(1)</script>")
	svg := []byte(`<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`)
	mp3 := []byte("ID3\x03\x00\x00\x00\x00\x00\x00")
	for _, tc := range []struct {
		name   string
		head   []byte
		ctype  string
		inline bool
	}{
		{"chart.png", png, "image/png", true},
		{"photo.JPG", jpeg, "image/jpeg", true},
		{"photo.jpeg", png, "image/png", true}, // an image all the same: the bytes name it
		{"paper.pdf", pdf, "application/pdf", true},
		{"song.mp3", mp3, "audio/mpeg", true},
		{"page.html", html, "text/html; charset=utf-8", false},
		{"drawing.svg", svg, "image/svg+xml", false},
		{"feed.xml", []byte("<?xml version='1.0'?><a/>"), "text/xml; charset=utf-8", false},
		{"fake.png", html, "image/png", false}, // HTML dressed as an image stays a download
		{"fake.pdf", html, "application/pdf", false},
		{"fake.mp4", html, "video/mp4", false},
		{"notes.txt", []byte("hello"), "text/plain; charset=utf-8", false},
		{"data.bin", png, "application/octet-stream", false}, // unknown names are never shown
		{"noext", png, "application/octet-stream", false},
		{"empty.png", nil, "image/png", false},
	} {
		ctype, inline := servedType(tc.name, tc.head)
		if ctype != tc.ctype || inline != tc.inline {
			t.Errorf("servedType(%q) = %q, %v; want %q, %v", tc.name, ctype, inline, tc.ctype, tc.inline)
		}
		if inline && strings.Contains(ctype, "html") {
			t.Errorf("%s: HTML inline", tc.name)
		}
	}
}

func TestLinkLimiter(t *testing.T) {
	var l linkLimiter
	var releases []func()
	for i := range MaxDownloadsPerLink {
		r, ok := l.acquire("a")
		if !ok {
			t.Fatalf("download %d refused", i+1)
		}
		releases = append(releases, r)
	}
	if _, ok := l.acquire("a"); ok {
		t.Fatalf("download %d accepted", MaxDownloadsPerLink+1)
	}
	if r, ok := l.acquire("b"); !ok {
		t.Fatalf("another link refused")
	} else {
		r()
	}
	releases[0]()
	if r, ok := l.acquire("a"); !ok {
		t.Fatalf("refused after a release")
	} else {
		r()
	}
	for _, r := range releases[1:] {
		r()
	}
	if len(l.running) != 0 {
		t.Fatalf("counts left behind: %v", l.running)
	}
}

// TestLinkExpiryStrict: the expiry of download and upload links is read only in the
// form the server writes it. The signature covers the number, so before this a link
// with "+", leading zeros or a longer run of digits for the same second passed as the
// same link under another spelling.
func TestLinkExpiryStrict(t *testing.T) {
	const key = "a-long-enough-test-key-0123456789"
	now := time.Unix(1_800_000_000, 0)
	s := NewSigner(key)
	download := s.Download("/sandbox/report.pdf", now, time.Hour).Path
	upload := s.Upload("/sandbox/uploads", now.Add(time.Hour)).Path

	// respell rewrites the expiry of a link ("/files/<exp>.<sig>/..." or
	// "/uploads/<exp>.<sig>/...").
	respell := func(link, prefix string, f func(string) string) string {
		rest := strings.TrimPrefix(link, prefix)
		exp, tail, _ := strings.Cut(rest, ".")
		return prefix + f(exp) + "." + tail
	}
	for _, tc := range []struct {
		name string
		f    func(string) string
	}{
		{"plus sign", func(e string) string { return "+" + e }},
		{"leading zero", func(e string) string { return "0" + e }},
		{"leading zeros", func(e string) string { return "0000000" + e }},
		{"minus zero", func(e string) string { return "-0" + e }},
		{"underscores", func(e string) string { return e[:1] + "_" + e[1:] }},
		{"trailing space", func(e string) string { return e + " " }},
		{"empty", func(string) string { return "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := verifyPath(s, respell(download, FilesPrefix, tc.f), now); !errors.Is(err, errLinkInvalid) {
				t.Errorf("download link %q: %v, want invalid", respell(download, FilesPrefix, tc.f), err)
			}
			if _, _, err := s.verifyUpload(respell(upload, UploadsPrefix, tc.f), now); !errors.Is(err, errLinkInvalid) {
				t.Errorf("upload link %q: %v, want invalid", respell(upload, UploadsPrefix, tc.f), err)
			}
		})
	}
	// The links as signed still pass.
	if _, _, err := verifyPath(s, download, now); err != nil {
		t.Errorf("download link as signed: %v", err)
	}
	if _, _, err := s.verifyUpload(upload, now); err != nil {
		t.Errorf("upload link as signed: %v", err)
	}
}

func TestUploadSigner(t *testing.T) {
	const key = "a-long-enough-test-key-0123456789"
	u := NewSigner(key)
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(time.Hour)
	for _, dir := range []string{"/sandbox/uploads", "/", "/sandbox/my data/ünï:code?#%"} {
		link := u.Upload(dir, exp).Path
		if !strings.HasSuffix(link, "/") || strings.ContainsAny(link, "?#") || !strings.HasPrefix(link, UploadsPrefix) {
			t.Errorf("sign(%q) = %q: want a path ending in / with no query", dir, link)
		}
		got, slashless, err := u.verifyUpload(link, now)
		if err != nil || got.dir != dir || got.name != "" || slashless || !got.expiry.Equal(exp) {
			t.Errorf("verify(sign(%q)) = %+v %v %v", dir, got, slashless, err)
		}
		got, _, err = u.verifyUpload(link+"report%20v2.pdf", now)
		if err != nil || got.dir != dir || got.name != "report v2.pdf" {
			t.Errorf("verify with a name = %+v %v", got, err)
		}
		if _, _, err := u.verifyUpload(link, exp.Add(time.Second)); err != errLinkExpired {
			t.Errorf("after expiry: %v", err)
		}
	}
	link := u.Upload("/sandbox/uploads", exp).Path
	if got, slashless, err := u.verifyUpload(strings.TrimSuffix(link, "/"), now); err != nil || !slashless || got.dir != "/sandbox/uploads" {
		t.Errorf("slashless link: %+v %v %v", got, slashless, err)
	}
	for _, bad := range []string{
		strings.Replace(link, "/sandbox/", "/sandboy/", 1),
		strings.Replace(link, "/uploads/1", "/uploads/2", 1),
		link[:len(UploadsPrefix)+15] + flipped(link[len(UploadsPrefix)+15]) + link[len(UploadsPrefix)+16:],
		UploadsPrefix + "garbage/x/",
		UploadsPrefix,
		strings.Replace(link, "/sandbox/uploads/", "/sandbox/uploads/../../etc/", 1),
	} {
		if _, _, err := u.verifyUpload(bad, now); err != errLinkInvalid {
			t.Errorf("verify(%q) = %v, want invalid", bad, err)
		}
	}
	// A download link's key is not an upload link's key.
	if u.mac(downloadKind, exp.Unix(), "", "/sandbox/uploads") == u.mac(uploadKind, exp.Unix(), "", "/sandbox/uploads") {
		t.Error("download and upload links share a key")
	}
	if other := NewSigner(key + "x"); other.mac(uploadKind, 1, "", "/") == u.mac(uploadKind, 1, "", "/") {
		t.Error("the key does not depend on the API key")
	}
}

// flipped is a signature character other than c.
func flipped(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}
