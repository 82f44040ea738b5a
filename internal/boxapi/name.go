// The names an upload may take: sanitizing what a client sent, and the free names
// tried in turn ("name (1).ext", ...) so that no file is replaced.

package boxapi

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameBytes bounds a file name, as Linux file systems do (NAME_MAX).
const MaxNameBytes = 255

// UploadTempPrefix starts the hidden name a file is written under until it is
// complete; no upload may take such a name.
const UploadTempPrefix = ".mcp-upload-"

// SanitizeName turns a name a person or a client sent into a single safe path
// component: the part after the last '/' or '\', without control characters (NUL and
// newlines included) or bidirectional overrides, trimmed of spaces, cut to [MaxNameBytes] bytes of valid UTF-8 at
// a character boundary (keeping the extension). It returns "" when nothing usable is
// left ("", ".", ".." and the like), and changed reports whether the name differs from
// what was sent.
func SanitizeName(name string) (clean string, changed bool) {
	s := strings.ToValidUTF8(name, "\uFFFD")
	if i := strings.LastIndexAny(s, `/\`); i >= 0 {
		s = s[i+1:]
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || IsBidiOrInvisible(r) {
			return -1
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > MaxNameBytes {
		s = fitName(s, MaxNameBytes)
	}
	if strings.Trim(s, ".") == "" || strings.HasPrefix(s, UploadTempPrefix) {
		return "", name != ""
	}
	return s, s != name
}

// IsBidiOrInvisible reports characters that change how a name is shown without being
// part of it: bidirectional overrides (which can make "gnp.exe" read as "exe.png"),
// line and paragraph separators, and the byte order mark.
func IsBidiOrInvisible(r rune) bool {
	switch {
	case r >= '\u202A' && r <= '\u202E', r >= '\u2066' && r <= '\u2069',
		r == '\u200E', r == '\u200F', r == '\u061C', r == '\u2028', r == '\u2029', r == '\uFEFF':
		return true
	}
	return false
}

// ValidName reports whether name is already what SanitizeName makes of it.
func ValidName(name string) bool {
	c, changed := SanitizeName(name)
	return c != "" && !changed
}

// splitExt splits a name into a stem and an extension (".txt", ".tar.gz"); a leading
// dot (".bashrc") is not an extension.
func splitExt(name string) (stem, ext string) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || i == len(name)-1 {
		return name, ""
	}
	stem, ext = name[:i], name[i:]
	if strings.HasSuffix(stem, ".tar") && len(stem) > 4 {
		stem, ext = stem[:len(stem)-4], ".tar"+ext
	}
	if len(ext) > 32 { // not an extension, just a dot in a long name
		return name, ""
	}
	return stem, ext
}

// fitName cuts name to at most max bytes at a character boundary, keeping its
// extension.
func fitName(name string, max int) string {
	if len(name) <= max {
		return name
	}
	stem, ext := splitExt(name)
	keep := max - len(ext)
	if keep < 1 {
		stem, ext, keep = name, "", max
	}
	for keep > 0 && !utf8.RuneStart(stem[keep]) {
		keep--
	}
	return strings.TrimSpace(stem[:keep]) + ext
}

// Candidates lists the names tried in turn for a file called name: the name itself,
// then "name (1).ext" up to "name (19).ext", then one with the random suffix, each cut
// to MaxNameBytes.
func Candidates(name, random string) []string {
	stem, ext := splitExt(name)
	out := []string{name}
	for i := 1; i < 20; i++ {
		out = append(out, numbered(stem, ext, strconv.Itoa(i)))
	}
	return append(out, numbered(stem, ext, random))
}

func numbered(stem, ext, n string) string {
	suffix := " (" + n + ")" + ext
	return cutStem(stem, MaxNameBytes-len(suffix)) + suffix
}

// cutStem cuts stem to at most max bytes at a character boundary.
func cutStem(stem string, max int) string {
	if len(stem) <= max {
		return stem
	}
	for max > 0 && !utf8.RuneStart(stem[max]) {
		max--
	}
	return stem[:max]
}
