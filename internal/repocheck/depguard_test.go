package repocheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// depguardRules reads the depguard rules of .golangci.yml: each rule's name and its
// files patterns, as this repository writes them (an inline list, or a block list).
func depguardRules(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".golangci.yml"))
	if err != nil {
		t.Fatal(err)
	}
	ruleName := regexp.MustCompile(`^        ([a-z-]+):$`)
	inline := regexp.MustCompile(`^          files: \[(.*)\]$`)
	item := regexp.MustCompile(`^            - "?([^"]*)"?$`)
	rules := map[string][]string{}
	var cur string
	block := false
	for _, l := range strings.Split(string(b), "\n") {
		if m := ruleName.FindStringSubmatch(l); m != nil {
			cur, block = m[1], false
			continue
		}
		switch m := inline.FindStringSubmatch(l); {
		case cur == "":
		case m != nil:
			for _, p := range strings.Split(m[1], ",") {
				rules[cur] = append(rules[cur], strings.Trim(strings.TrimSpace(p), `"`))
			}
		case l == "          files:":
			block = true
		case block && item.MatchString(l):
			rules[cur] = append(rules[cur], item.FindStringSubmatch(l)[1])
		default:
			block = false
		}
	}
	return rules
}

// globRE is a depguard files pattern as a regular expression over a path that starts
// with "/": $all and $test, ** any directories (and a final /** all below), * within a
// name.
func globRE(p string) *regexp.Regexp {
	switch p {
	case "$all":
		return regexp.MustCompile(`\.go$`)
	case "$test":
		return regexp.MustCompile(`_test\.go$`)
	}
	q := regexp.QuoteMeta(p)
	q = strings.ReplaceAll(q, `\*\*/`, `(?:.*/)?`)
	q = strings.ReplaceAll(q, `/\*\*`, `/.*`)
	q = strings.ReplaceAll(q, `\*`, `[^/]*`)
	return regexp.MustCompile(`^(?:.*/)?` + strings.TrimPrefix(q, `(?:.*/)?`) + `$`)
}

// covers reports whether the patterns of a rule take in path.
func covers(patterns []string, path string) bool {
	in := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		if globRE(strings.TrimPrefix(p, "!")).MatchString(path) {
			if neg {
				return false
			}
			in = true
		}
	}
	return in
}

// TestEveryFileUnderADepguardRule: each Go file of the module's packages falls under a
// depguard rule that lists what its room may import (the rule that keeps the engine
// kinds out of every build but their own says nothing of a room, so it does not
// count). A new package without its row in .golangci.yml fails here, naming it.
func TestEveryFileUnderADepguardRule(t *testing.T) {
	rules := depguardRules(t)
	if len(rules) < 20 {
		t.Fatalf("read only %d depguard rules from .golangci.yml", len(rules))
	}
	n := 0
	for _, f := range trackedFiles(t) {
		if !strings.HasSuffix(f, ".go") || strings.Contains("/"+f, "/testdata/") {
			continue // testdata holds programs built on their own, not the module's packages
		}
		n++
		found := false
		for name, patterns := range rules {
			if name != "no-engine-kinds" && covers(patterns, "/"+f) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s falls under no depguard rule of .golangci.yml: add its package to the rule of its room (or a rule of its own) with what it may import", f)
		}
	}
	if n < 100 {
		t.Fatalf("checked only %d Go files", n)
	}
}

// TestCovers: the patterns read as depguard reads them.
func TestCovers(t *testing.T) {
	for _, c := range []struct {
		patterns []string
		path     string
		want     bool
	}{
		{[]string{"**/sandbox/*.go", "!$test"}, "/sandbox/exec.go", true},
		{[]string{"**/sandbox/*.go", "!$test"}, "/sandbox/exec_test.go", false},
		{[]string{"**/sandbox/*.go"}, "/internal/sandboxx/a.go", false},
		{[]string{"**/internal/kube/*.go"}, "/internal/kube/kubetest/a.go", false},
		{[]string{"$all", "!**/internal/**"}, "/module.go", true},
		{[]string{"$all", "!**/internal/**"}, "/internal/x/a.go", false},
		{[]string{"$test"}, "/a_test.go", true},
	} {
		if got := covers(c.patterns, c.path); got != c.want {
			t.Errorf("%q over %s: %v, want %v", c.patterns, c.path, got, c.want)
		}
	}
}
