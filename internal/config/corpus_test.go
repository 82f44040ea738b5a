package config_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	mcpsandbox "github.com/mcp-sandbox/caddy-mcp-sandbox"
	_ "github.com/mcp-sandbox/caddy-mcp-sandbox/engines/kubernetes" // the kubernetes engine kind
)

// The settings are a contract: the JSON a Caddyfile adapts to, and the words of every
// error a Caddyfile can get. These tests hold the whole plugin to golden files:
// testdata/corpus (the examples, the docs' Caddyfiles, the adapt tests' inputs, and one
// with every setting), testdata/bad.txtar (Caddyfiles that do not adapt) and
// testdata/invalid.txtar (ones that adapt but do not validate). Rewrite them with
//
//	go test ./internal/config -run Corpus -update
//
// and read the diff: a change there is a change users see.

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// adaptEnv pins the environment adapting reads ({$VAR:default}) and the placeholders
// the invalid corpus resolves at provision time.
func adaptEnv(t *testing.T) {
	for _, v := range []string{"SANDBOX_PORT", "SANDBOX_IMAGE", "SANDBOX_CONTAINER", "SANDBOX_VOLUME", "SANDBOX_NETWORK"} {
		if old, ok := os.LookupEnv(v); ok {
			os.Unsetenv(v)
			t.Cleanup(func() { os.Setenv(v, old) })
		}
	}
	t.Setenv("MCP_SANDBOX_TEST_EMPTY", "")
	t.Setenv("MCP_SANDBOX_TEST_SECRET", "Bearer s3cret")
}

func adapt(name string, body []byte) ([]byte, []caddyconfig.Warning, error) {
	return caddyconfig.GetAdapter("caddyfile").Adapt(body, map[string]any{"filename": name})
}

// TestCorpusAdapts: each Caddyfile of testdata/corpus adapts, without warnings, to the
// JSON beside it.
func TestCorpusAdapts(t *testing.T) {
	adaptEnv(t)
	files, err := filepath.Glob("testdata/corpus/*.caddyfile")
	if err != nil || len(files) < 20 {
		t.Fatalf("the corpus has %d Caddyfiles (%v), want every one of testdata/corpus", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out, warnings, err := adapt(filepath.Base(f), body)
			if err != nil {
				t.Fatalf("adapting: %v", err)
			}
			for _, w := range warnings {
				t.Errorf("warning: %s", w.String())
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, out, "", "\t"); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			golden := strings.TrimSuffix(f, ".caddyfile") + ".json"
			if *update {
				if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (write it with -update)", err)
			}
			if !bytes.Equal(pretty.Bytes(), want) {
				t.Errorf("%s adapts to\n%s\nwant %s", f, pretty.Bytes(), golden)
			}
			roundTrip(t, out)
		})
	}
}

// TestCorpusBad: each Caddyfile of testdata/bad.txtar fails to adapt with exactly the
// message that follows it.
func TestCorpusBad(t *testing.T) {
	adaptEnv(t)
	checkArchive(t, "testdata/bad.txtar", func(t *testing.T, name string, body []byte) string {
		_, _, err := adapt(name, body)
		if err == nil {
			t.Fatalf("%s adapts; want an error", name)
		}
		return err.Error()
	})
}

// TestCorpusInvalid: each Caddyfile of testdata/invalid.txtar adapts, and Caddy's
// Validate (provisioning, without Docker) fails with exactly the message that follows
// it.
func TestCorpusInvalid(t *testing.T) {
	adaptEnv(t)
	checkArchive(t, "testdata/invalid.txtar", func(t *testing.T, name string, body []byte) string {
		storage := t.TempDir()
		global := "{\n\tadmin off\n\tstorage file_system " + storage + "\n}\n"
		out, _, err := adapt(name, append([]byte(global), body...))
		if err != nil {
			t.Fatalf("adapting %s: %v", name, err)
		}
		var cfg caddy.Config
		if err := json.Unmarshal(out, &cfg); err != nil {
			t.Fatal(err)
		}
		err = caddy.Validate(&cfg)
		if err == nil {
			t.Fatalf("%s validates; want an error", name)
		}
		return strings.ReplaceAll(err.Error(), storage, "$STORAGE")
	})
}

// checkArchive runs got on each NAME.caddyfile section of the archive at path and
// compares the result with the NAME.err section (or, with -update, writes it).
func checkArchive(t *testing.T, path string, got func(t *testing.T, name string, body []byte) string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	comment, sections := parseArchive(data)
	want := map[string]string{}
	for _, s := range sections {
		if n, ok := strings.CutSuffix(s.name, ".err"); ok {
			want[n] = strings.TrimSuffix(string(s.data), "\n")
		}
	}
	var rewritten bytes.Buffer
	rewritten.Write(comment)
	n := 0
	for _, s := range sections {
		name, ok := strings.CutSuffix(s.name, ".caddyfile")
		if !ok {
			continue
		}
		n++
		msg := ""
		t.Run(name, func(t *testing.T) {
			msg = got(t, s.name, s.data)
			if w, ok := want[name]; !*update && (!ok || msg != w) {
				t.Errorf("error:\n%s\nwant:\n%s", msg, w)
			}
		})
		rewritten.WriteString("-- " + s.name + " --\n")
		rewritten.Write(s.data)
		rewritten.WriteString("-- " + name + ".err --\n" + msg + "\n")
	}
	if n < 30 {
		t.Fatalf("%s holds %d Caddyfiles; want the whole corpus", path, n)
	}
	if *update {
		if err := os.WriteFile(path, rewritten.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type section struct {
	name string
	data []byte
}

// parseArchive reads the txtar format: a comment, then files, each after a line
// "-- name --".
func parseArchive(data []byte) (comment []byte, files []section) {
	lines := bytes.SplitAfter(data, []byte("\n"))
	cur := -1
	for _, l := range lines {
		s := strings.TrimSuffix(string(l), "\n")
		if name, ok := strings.CutPrefix(s, "-- "); ok && strings.HasSuffix(name, " --") {
			files = append(files, section{name: strings.TrimSuffix(name, " --")})
			cur = len(files) - 1
			continue
		}
		if cur < 0 {
			comment = append(comment, l...)
		} else {
			files[cur].data = append(files[cur].data, l...)
		}
	}
	return comment, files
}

// roundTrip decodes each mcp_sandbox handler of an adapted config into the Handler,
// refusing unknown fields, and encodes it again: the same JSON, so every field the
// Caddyfile writes is one of config.Settings, read and written at the top level.
func roundTrip(t *testing.T, cfg []byte) {
	t.Helper()
	var doc any
	if err := json.Unmarshal(cfg, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["handler"] == "mcp_sandbox" {
				n++
				delete(v, "handler")
				raw, _ := json.Marshal(v)
				dec := json.NewDecoder(bytes.NewReader(raw))
				dec.DisallowUnknownFields()
				var h mcpsandbox.Handler
				if err := dec.Decode(&h); err != nil {
					t.Errorf("decoding %s: %v", raw, err)
					return
				}
				again, err := json.Marshal(&h)
				if err != nil {
					t.Fatal(err)
				}
				settings, _ := json.Marshal(&h.Settings)
				var back any
				if err := json.Unmarshal(again, &back); err != nil || !reflect.DeepEqual(back, any(v)) || !bytes.Equal(again, settings) {
					t.Errorf("the handler %s encodes again as %s (its settings alone: %s)", raw, again, settings)
				}
				return
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	if n == 0 {
		t.Error("no mcp_sandbox handler in the config")
	}
}
