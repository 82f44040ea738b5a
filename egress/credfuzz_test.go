package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// compatForms are characters that Unicode normalization (NFKC) or a Windows "best
// fit" code page turns into ASCII that a path can escape with.
var compatForms = strings.NewReplacer(
	"\uff0e", ".", "\u2024", ".", "\ufe52", ".", "\u3002", ".", "\uff61", ".", "\u2025", "..", "\u2026", "...",
	"\uff0f", "/", "\u2215", "/", "\u2044", "/", "\ufe68", "\\", "\uff3c", "\\", "\u00a5", "\\", "\u20a9", "\\",
	"\uff05", "%", "\uff1b", ";", "\u3000", " ", "\u00a0", " ",
)

// overlong decodes the overlong UTF-8 forms of ASCII characters (2 and 3 bytes), as
// lax decoders do.
func overlong(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case i+1 < len(s) && s[i]&0xfe == 0xc0 && s[i+1]&0xc0 == 0x80:
			b.WriteByte((s[i]&0x1f)<<6 | s[i+1]&0x3f)
			i++
		case i+2 < len(s) && s[i] == 0xe0 && s[i+1]&0xe0 == 0x80 && s[i+2]&0xc0 == 0x80:
			b.WriteByte((s[i+1]&0x3f)<<6 | s[i+2]&0x3f)
			i += 2
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// laxUnescape decodes every valid %XX and %uXXXX, leaving the rest as it is.
func laxUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		if s[i] == '%' && i+5 < len(s) && (s[i+1] == 'u' || s[i+1] == 'U') && isHex(s[i+2]) && isHex(s[i+3]) && isHex(s[i+4]) && isHex(s[i+5]) {
			r := rune(unhex(s[i+2]))<<12 | rune(unhex(s[i+3]))<<8 | rune(unhex(s[i+4]))<<4 | rune(unhex(s[i+5]))
			b.WriteRune(r)
			i += 5
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// removeDots resolves dot segments as RFC 3986 does, after the lax server's own
// reading of a segment: parameters after ';' dropped, spaces and, from three on,
// dots trimmed as Windows does ("... " is ".."), and any segment emptied that way
// dropped.
func removeDots(p string) string {
	var out []string
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		seg, _, _ = strings.Cut(seg, ";")
		t := strings.Trim(seg, " \t")
		if strings.Trim(t, ". \t") == "" && strings.Contains(t, ".") {
			t = strings.ReplaceAll(t, " ", "")
			if len(t) > 2 {
				t = ".."
			}
		}
		switch {
		case i == 0:
			out = append(out, seg)
		case t == "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
		case t == ".":
		default:
			out = append(out, seg)
		}
	}
	if len(out) == 1 {
		return "/"
	}
	return strings.Join(out, "/")
}

// serverViews are the paths that servers, from strict to lax, may serve for raw (a
// request's path as sent): decoded none to three times, overlong UTF-8 and
// compatibility forms read as ASCII, backslashes as slashes, cut at a NUL or not,
// dot segments resolved.
func serverViews(raw string) []string {
	var views []string
	s := raw
	for depth := 0; depth <= 3; depth++ {
		if depth > 0 {
			s = laxUnescape(s)
		}
		lax := strings.ReplaceAll(compatForms.Replace(overlong(s)), "\\", "/")
		cut, _, _ := strings.Cut(lax, "\x00")
		for _, v := range []string{s, lax, cut} {
			views = append(views, removeDots(v))
		}
	}
	return views
}

// Whatever path a request carries, a credential scoped to /org goes with it only
// when every server's reading of the path, however lax, lies under /org.
func FuzzCredentialPath(f *testing.F) {
	for _, c := range pathCases {
		f.Add(c.path)
	}
	for _, s := range []string{
		"/org/x", "/org/%2e%2e/admin", "/org/..%2fadmin", "/org/%c0%ae%c0%ae/admin", "/org/x%ef%bc%8f..%ef%bc%8f..%ef%bc%8fadmin",
		"/org/%20../admin", "/org/x%00/../../admin", "/org/%25252e%25252e/admin", "/org/..;/admin", "/org\\..\\admin",
		"/org/%u002e%u002e/admin", "/org/x/...%20/admin", "/org/%e2%80%a5/admin", "/org/caf%C3%A9", "/org//x", "/org/x?y=/../..",
	} {
		f.Add(s)
	}
	rec := &recorder{}
	up := httptest.NewServer(rec)
	defer up.Close()
	port := portOf(f, up.URL)
	pol := mustCompile(f, Rules{
		Allow:       []string{"cred.test:" + port},
		Hosts:       map[string]string{"cred.test": "127.0.0.1"},
		Credentials: []Credential{{Prefix: "http://cred.test:" + port + "/org", Header: "X-Key", Value: "s3cret"}},
	})
	px := &Proxy{Policy: func() *Policy { return pol }, Resolve: func(context.Context, string) ([]netip.Addr, error) {
		return nil, errors.New("tests resolve no names")
	}}
	defer px.Close()
	f.Fuzz(func(t *testing.T, path string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n") {
			return
		}
		a, b := net.Pipe()
		px.ServeConn(a)
		defer b.Close()
		_ = b.SetDeadline(time.Now().Add(5 * time.Second))
		go fmt.Fprintf(b, "GET http://cred.test:%s%s HTTP/1.1\r\nHost: cred.test:%s\r\nConnection: close\r\n\r\n", port, path, port)
		res, err := http.ReadResponse(bufio.NewReader(b), nil)
		if err != nil {
			t.Fatalf("%q: %v", path, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		for _, seen := range rec.take() {
			uri, key, _ := strings.Cut(strings.TrimPrefix(seen, "GET "), " key=")
			if key == "" {
				continue
			}
			raw, _, _ := strings.Cut(uri, "?")
			for _, v := range serverViews(raw) {
				if !pathHasPrefix(v, "/org") {
					t.Fatalf("%q went upstream as %q with the credential, and a server may read it as %q", path, uri, v)
				}
			}
			if !utf8.ValidString(laxUnescape(raw)) {
				t.Fatalf("%q went upstream as %q with the credential, not valid UTF-8 decoded", path, uri)
			}
		}
	})
}
