package mcpsandbox

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLinkExpiryStrict: the expiry of download and upload links is read only in the
// form the server writes it. The signature covers the number, so before this a link
// with "+", leading zeros or a longer run of digits for the same second passed as the
// same link under another spelling.
func TestLinkExpiryStrict(t *testing.T) {
	const key = "a-long-enough-test-key-0123456789"
	now := time.Unix(1_800_000_000, 0)
	dl := newLinkSigner(key, time.Hour)
	up := newUploadSigner(key)
	download, _ := dl.sign("/sandbox/report.pdf", now)
	upload := up.sign("/sandbox/uploads", now.Add(time.Hour))

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
			if _, _, err := dl.verify(respell(download, filesPrefix, tc.f), now); !errors.Is(err, errLinkInvalid) {
				t.Errorf("download link %q: %v, want invalid", respell(download, filesPrefix, tc.f), err)
			}
			if _, _, err := up.verify(respell(upload, uploadsPrefix, tc.f), now); !errors.Is(err, errLinkInvalid) {
				t.Errorf("upload link %q: %v, want invalid", respell(upload, uploadsPrefix, tc.f), err)
			}
		})
	}
	// The links as signed still pass.
	if _, _, err := dl.verify(download, now); err != nil {
		t.Errorf("download link as signed: %v", err)
	}
	if _, _, err := up.verify(upload, now); err != nil {
		t.Errorf("upload link as signed: %v", err)
	}
}
