package repocheck

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// fencedBlock is a fenced code block of a Markdown page: its indentation (a block inside
// a list item) and its lines.
var fencedBlock = regexp.MustCompile("(?ms)^([ \t]*)```[a-zA-Z]*\n(.*?)^[ \t]*```")

// placeholder marks a syntax summary (`<key>`, `<duration>`), not a Caddyfile to copy.
var placeholder = regexp.MustCompile(`<[a-z]`)

// TestDocCaddyfilesFormatted keeps every Caddyfile the docs show as `caddy fmt` writes
// it: Caddy warns "Caddyfile input is not formatted" on each start of a file that is
// not, and people copy these blocks as they are.
func TestDocCaddyfilesFormatted(t *testing.T) {
	for _, page := range pages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fencedBlock.FindAllStringSubmatch(string(b), -1) {
			body := unindent(m[2], m[1])
			if !strings.Contains(body, "{\n") || placeholder.MatchString(body) {
				continue
			}
			if got := string(caddyfile.Format([]byte(body))); got != body {
				t.Errorf("%s: a Caddyfile block is not formatted; as `caddy fmt` writes it:\n%s", page, got)
			}
		}
	}
}

// unindent removes a list item's indentation from each line of a block.
func unindent(body, indent string) string {
	if indent == "" {
		return body
	}
	lines := strings.Split(body, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, indent)
	}
	return strings.Join(lines, "\n")
}
