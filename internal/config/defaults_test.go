package config_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/config"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestDefaultsStatedOnce: sandbox.DefaultConfig is where the sandbox's defaults live;
// the configuration reference, the Caddyfile syntax in UnmarshalCaddyfile's doc comment
// and the Settings' field comments must say the same.
func TestDefaultsStatedOnce(t *testing.T) {
	d := sandbox.DefaultConfig()
	// want checks one documented value of a setting against DefaultConfig.
	want := map[string]func(string) bool{
		"image":     func(v string) bool { return v == d.Image },
		"container": func(v string) bool { return v == d.Container },
		"volume":    func(v string) bool { return v == d.Volume },
		"network":   func(v string) bool { return v == d.NetworkMode },
		"memory": func(v string) bool {
			m, err := sandbox.ParseMemory(v)
			return err == nil && m == d.Memory
		},
		"cpus": func(v string) bool {
			f, err := strconv.ParseFloat(v, 64)
			return err == nil && f == d.CPUs
		},
		"pids_limit":     func(v string) bool { return v == strconv.FormatInt(d.PidsLimit, 10) },
		"max_output":     func(v string) bool { return v == strconv.Itoa(d.MaxOutput) },
		"default_output": func(v string) bool { return v == strconv.Itoa(config.DefaultOutput) },
		"exec_timeout":   func(v string) bool { return durationIs(v, d.ExecTimeout) },
		"file_ttl":       func(v string) bool { return durationIs(v, d.FileTTL) },
		"cleanup_interval": func(v string) bool {
			return durationIs(v, d.CleanupInterval)
		},
	}
	check := func(source string, got map[string]string) {
		t.Helper()
		for name, ok := range want {
			v, found := got[name]
			if !found {
				t.Errorf("%s does not state the default of %s", source, name)
			} else if !ok(v) {
				t.Errorf("%s says the default of %s is %q; sandbox.DefaultConfig says otherwise", source, name, v)
			}
		}
	}

	// "name <arg> # default: value ..." lines of the Caddyfile syntax blocks.
	syntaxLine := regexp.MustCompile(`(?m)^\W*([a-z_]+)\s+<[^>]*>\s+# default: ([^\s;,(]+)`)
	fromSyntax := func(text string) map[string]string {
		got := map[string]string{}
		for _, m := range syntaxLine.FindAllStringSubmatch(text, -1) {
			got[m[1]] = m[2]
		}
		return got
	}
	readme := string(readFile(t, "../../docs/configuration.md"))
	check("docs/configuration.md (Caddyfile block)", fromSyntax(readme))
	check("UnmarshalCaddyfile's doc comment", fromSyntax(string(readFile(t, "caddyfile.go"))))

	// The README table of the original settings: | `VAR` | `name` | `value` ... |
	table := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `[A-Z_]+` \\| `([a-z_]+)` \\| `([^`]+)`").FindAllStringSubmatch(readme, -1) {
		table[m[1]] = m[2]
	}
	for name, v := range table {
		if ok := want[name]; ok != nil && !ok(v) {
			t.Errorf("docs/configuration.md's table says the default of %s is %q; sandbox.DefaultConfig says otherwise", name, v)
		}
	}

	// Settings field comments: "... Default: value." with the JSON name as the setting.
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "settings.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Settings" {
			return true
		}
		for _, fld := range ts.Type.(*ast.StructType).Fields.List {
			if fld.Tag == nil || fld.Doc == nil {
				continue
			}
			tag, _ := strconv.Unquote(fld.Tag.Value)
			name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
			doc := fld.Doc.Text()
			if _, v, ok := strings.Cut(doc, "Default: "); ok {
				fields[name] = strings.TrimRight(strings.Fields(v)[0], ".")
			}
		}
		return false
	})
	check("Settings field comments", fields)
}

func durationIs(v string, d time.Duration) bool {
	got, err := caddy.ParseDuration(v)
	return err == nil && got == d
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
