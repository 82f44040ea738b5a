package links

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLinkOwner: a link names the person it was made for and opens only that person's
// sandbox; moving it to another person, to the operator, or the operator's to a person,
// breaks the signature. The operator's links are spelled as before people existed.
func TestLinkOwner(t *testing.T) {
	now := time.Now()
	s := NewSigner("link-owner-test-key-0123456789")
	op := s.Download("/sandbox/a.txt", now, time.Hour).Path
	alice := s.As("alice").Download("/sandbox/a.txt", now, time.Hour).Path
	if strings.Count(strings.SplitN(strings.TrimPrefix(op, FilesPrefix), "/", 2)[0], ".") != 1 {
		t.Fatalf("the operator's link changed its spelling: %s", op)
	}
	owner, p, _, err := s.verifyDownload(alice, now)
	if err != nil || owner != "alice" || p != "/sandbox/a.txt" {
		t.Fatalf("alice's link: %q %q %v", owner, p, err)
	}
	if owner, _, _, err := s.verifyDownload(op, now); err != nil || owner != "" {
		t.Fatalf("the operator's link: %q %v", owner, err)
	}
	tok := func(l string) string { return strings.SplitN(strings.TrimPrefix(l, FilesPrefix), "/", 2)[0] }
	rest := strings.TrimPrefix(alice, FilesPrefix+tok(alice))
	for name, forged := range map[string]string{
		"alice's link as bob's":      FilesPrefix + strings.TrimSuffix(tok(alice), ".alice") + ".bob" + rest,
		"alice's link as operator's": FilesPrefix + strings.TrimSuffix(tok(alice), ".alice") + rest,
		"operator's link as alice's": FilesPrefix + tok(op) + ".alice" + rest,
		"an empty owner":             FilesPrefix + strings.TrimSuffix(tok(alice), "alice") + rest,
	} {
		if _, _, _, err := s.verifyDownload(forged, now); !errors.Is(err, errLinkInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
	up := s.As("bob").Upload("/sandbox/uploads", now.Add(time.Hour)).Path
	if tgt, _, err := s.verifyUpload(up, now); err != nil || tgt.owner != "bob" {
		t.Fatalf("bob's upload link: %+v %v", tgt, err)
	}
	if _, _, err := s.verifyUpload(strings.Replace(up, ".bob/", ".alice/", 1), now); !errors.Is(err, errLinkInvalid) {
		t.Errorf("bob's upload link as alice's: %v", err)
	}
}
