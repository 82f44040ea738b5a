package repocheck

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's top directory, seen from this package.
const root = "../.."

// pages are the Markdown files whose links must resolve.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md found (%v): run the test from the repository", err)
	}
	return append([]string{filepath.Join(root, "README.md")}, docs...)
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`[^`]*`")
	// [text](target) and ![alt](target), with an optional "title".
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// prose is a page's lines outside fenced code blocks, inline code blanked out.
func prose(text string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			out = append(out, "")
			continue
		}
		if in {
			out = append(out, "")
			continue
		}
		out = append(out, inlineCode.ReplaceAllString(l, "``"))
	}
	return out
}

// slug is the anchor GitHub gives a heading: lower case, punctuation dropped, spaces
// made hyphens.
func slug(h string) string {
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1") // links keep their text
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors are the fragments a page answers: its headings (repeats get -1, -2, ...)
// and explicit HTML anchors.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	in := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if in {
			continue
		}
		if m := heading.FindStringSubmatch(l); m != nil {
			s := slug(strings.ReplaceAll(m[2], "`", ""))
			if n := seen[s]; n > 0 {
				out[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// links are the targets a page links to, with their line numbers.
func links(text string) (targets []string, lines []int) {
	for i, l := range prose(text) {
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			targets, lines = append(targets, m[1]), append(lines, i+1)
		}
		if m := refLink.FindStringSubmatch(l); m != nil {
			targets, lines = append(targets, m[1]), append(lines, i+1)
		}
	}
	return targets, lines
}

// TestDocLinks: every relative link in README.md and docs/*.md names a file or directory
// that exists, and a #fragment on a Markdown page names one of its headings.
func TestDocLinks(t *testing.T) {
	checked := 0
	for _, page := range pages(t) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		targets, lines := links(string(data))
		for i, target := range targets {
			u, err := url.Parse(target)
			if err != nil {
				t.Errorf("%s:%d: link %q does not parse: %v", page, lines[i], target, err)
				continue
			}
			if u.Scheme != "" || u.Host != "" {
				continue // absolute: not ours to check offline
			}
			file := page
			if u.Path != "" {
				file = filepath.Join(filepath.Dir(page), filepath.FromSlash(u.Path))
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", page, lines[i], target, file)
					continue
				}
			}
			checked++
			if u.Fragment == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			body, err := os.ReadFile(file)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", page, lines[i], target, err)
				continue
			}
			if !anchors(string(body))[u.Fragment] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", page, lines[i], target, file, u.Fragment)
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d relative links found: is the link pattern still right?", checked)
	}
}

// TestSlug pins the anchor rule on headings of the kinds the pages use.
func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"The operator's console":                             "the-operators-console",
		"Jobs: long commands from any client":                "jobs-long-commands-from-any-client",
		"Try it: make run":                                   "try-it-make-run",
		"To change X, open Y":                                "to-change-x-open-y",
		"Production: a wildcard certificate (DNS challenge)": "production-a-wildcard-certificate-dns-challenge",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
	a := anchors("# A\n## B\n```\n# not a heading\n```\n## B\n")
	want := []string{"a", "b", "b-1"}
	var got []string
	for k := range a {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("anchors = %v, want %v", got, want)
	}
}

// TestArchitectureNamesEveryPackage: docs/architecture.md's "to change X, open Y" table
// names every directory that holds a Go package, so a new package gets its line.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(doc), "To change X, open Y")
	if i < 0 {
		t.Fatal(`docs/architecture.md has no "To change X, open Y" table`)
	}
	table := string(doc[i:])
	dirs := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			dirs[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found only %d package directories: %v", len(dirs), dirs)
	}
	for dir := range dirs {
		name := "`" + dir + "`"
		if dir == "." {
			name = "root:"
		}
		if !strings.Contains(table, name) && !strings.Contains(table, "`"+dir+"/`") {
			t.Errorf("docs/architecture.md's table does not name the package %s: add a line for it", dir)
		}
	}
}
