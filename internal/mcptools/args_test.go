package mcptools

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// sampleArgs has an argument of every kind the tools use.
type sampleArgs struct {
	Name  string   `json:"name" arg:"required,nonblank" needs:"a name, e.g. {\"name\": \"x\"}"`
	ID    string   `json:"id" arg:"pattern=^j[0-9a-f]{12}$"`
	Secs  *float64 `json:"secs" arg:"min=0,max=86400" unit:"a number of seconds"`
	Count *int64   `json:"count" arg:"min=1" unit:"a count"`
	Port  int      `json:"port" arg:"min=1,max=65535" unit:"a TCP port"`
	Flag  bool     `json:"flag"`
}

var sampleAbout = map[string]about{
	"name": {desc: "n"}, "id": {desc: "i"}, "secs": {desc: "s"}, "count": {desc: "c"}, "port": {desc: "p"}, "flag": {desc: "f"},
}

// decodeJSON reads args, JSON text as mcp-go hands it on, with spec.
func decodeJSON(t testing.TB, spec *argSpec, args string) (any, string) {
	t.Helper()
	var raw any
	if err := json.Unmarshal([]byte(args), &raw); err != nil {
		t.Fatalf("%s: %v", args, err)
	}
	out := reflect.New(spec.typ)
	msg := spec.decode(raw, out.Elem())
	return out.Elem().Interface(), msg
}

func ptr[T any](v T) *T { return &v }

// TestDecodeArgs: values are read the way models send them (numeric strings, "true",
// null for absent), and every value that cannot be used is refused by name, with
// what it must be and what was sent.
func TestDecodeArgs(t *testing.T) {
	spec, err := specOf(reflect.TypeFor[sampleArgs](), "t", sampleAbout)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args string
		want sampleArgs
	}{
		{`{"name": "a"}`, sampleArgs{Name: "a"}},
		{`{"name": "a", "secs": "2.5", "count": " 7 ", "port": 8000.0, "flag": "True", "id": "j0123456789ab"}`,
			sampleArgs{Name: "a", Secs: ptr(2.5), Count: ptr[int64](7), Port: 8000, Flag: true, ID: "j0123456789ab"}},
		{`{"name": "a", "secs": 0, "count": 9007199254740992}`, sampleArgs{Name: "a", Secs: ptr(0.0), Count: ptr[int64](1 << 53)}},
		{`{"name": "a", "secs": null, "count": null, "flag": null, "id": null}`, sampleArgs{Name: "a"}},
		{`{"name": "a", "flag": " false "}`, sampleArgs{Name: "a"}},
	} {
		got, msg := decodeJSON(t, spec, c.args)
		if msg != "" || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v %q, want %+v", c.args, got, msg, c.want)
		}
	}
	for _, c := range []struct{ args, want string }{
		{`{}`, `t needs "name": a name, e.g. {"name": "x"}`},
		{`{"name": null}`, `t needs "name": a name, e.g. {"name": "x"}`},
		{`{"name": ""}`, `t needs "name": a name, e.g. {"name": "x"}`},
		{`{"name": " \t"}`, `t needs "name": a name, e.g. {"name": "x"}; got " \t"`},
		{`{"name": {"a": [1]}}`, `"name" must be a string, got an object`},
		{`{"name": ["a"]}`, `"name" must be a string, got an array`},
		{`{"name": "a", "id": "j0123456789ab\n"}`, `"id" must be a string matching ^j[0-9a-f]{12}$, got "j0123456789ab\n"`},
		{`{"name": "a", "secs": -1}`, `"secs" must be a number of seconds between 0 and 86400, got -1`},
		{`{"name": "a", "secs": 1e300}`, `"secs" must be a number of seconds between 0 and 86400, got 1e+300`},
		{`{"name": "a", "secs": "NaN"}`, `got "NaN"`},
		{`{"name": "a", "secs": "-Inf"}`, `got "-Inf"`},
		{`{"name": "a", "secs": "1e400"}`, `got "1e400"`},
		{`{"name": "a", "secs": "5s"}`, `"secs" must be a number of seconds between 0 and 86400, got "5s"`},
		{`{"name": "a", "secs": true}`, `got true`},
		{`{"name": "a", "count": 7.5}`, `"count" must be a count, a whole number between 1 and 9007199254740992, got 7.5`},
		{`{"name": "a", "count": 9007199254740994}`, `"count" must be a count between 1 and 9007199254740992`},
		{`{"name": "a", "port": 0}`, `"port" must be a TCP port between 1 and 65535, got 0`},
		{`{"name": "a", "flag": 1}`, `"flag" must be true or false, got 1`},
		{`{"name": "a", "flag": "yes"}`, `"flag" must be true or false, got "yes"`},
		{`{"name": "a", "Secs": 1, "zzz": {}, "jobId": "x"}`, `t does not take the argument "Secs" (use "secs"), "jobId", "zzz"; it accepts: count, flag, id, name, port, secs`},
		{`["a"]`, `t takes its arguments as a JSON object, got an array`},
		{`"a"`, `t takes its arguments as a JSON object, got "a"`},
	} {
		if _, msg := decodeJSON(t, spec, c.args); !strings.HasPrefix(msg, c.want) && !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q, want %q", c.args, msg, c.want)
		}
	}
	// A null in place of the arguments is no arguments.
	var out sampleArgs
	if msg := spec.decode(nil, reflect.ValueOf(&out).Elem()); msg != `t needs "name": a name, e.g. {"name": "x"}` {
		t.Errorf("no arguments: %q", msg)
	}
}

// TestArgSpecRefusesBadStructs: a struct the decoder would misread does not become a
// tool: every mistake is found when the server is built.
func TestArgSpecRefusesBadStructs(t *testing.T) {
	check := func(name string, typ reflect.Type, props map[string]about, want string) {
		t.Helper()
		_, err := specOf(typ, "t", props)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, want)
		}
	}
	d := map[string]about{"a": {desc: "x"}}
	check("unknown option", reflect.TypeFor[struct {
		A string `json:"a" arg:"maxLength=3"`
	}](), d, `unknown option "maxLength"`)
	check("bound on a string", reflect.TypeFor[struct {
		A string `json:"a" arg:"min=1"`
	}](), d, "min and max are for numbers")
	check("length of a number", reflect.TypeFor[struct {
		A float64 `json:"a" arg:"minLength=1" unit:"u"`
	}](), d, "minLength and pattern are for strings")
	check("bad bound", reflect.TypeFor[struct {
		A float64 `json:"a" arg:"min=one" unit:"u"`
	}](), d, "arg tag")
	check("bad pattern", reflect.TypeFor[struct {
		A string `json:"a" arg:"pattern=(["`
	}](), d, "arg tag")
	check("required without needs", reflect.TypeFor[struct {
		A string `json:"a" arg:"required"`
	}](), d, "says what it needs")
	check("needs without required", reflect.TypeFor[struct {
		A string `json:"a" needs:"x"`
	}](), d, "says what it needs")
	check("number without unit", reflect.TypeFor[struct {
		A *int `json:"a"`
	}](), d, "without a unit")
	check("map", reflect.TypeFor[struct {
		A map[string]any `json:"a"`
	}](), d, "not an argument type")
	check("pointer to a string", reflect.TypeFor[struct {
		A *string `json:"a"`
	}](), d, "only numbers may be pointers")
	check("no json name", reflect.TypeFor[struct{ A string }](), d, "no json name")
	check("undescribed", reflect.TypeFor[struct {
		A string `json:"a"`
	}](), nil, `"a" has no description`)
	check("described but absent", reflect.TypeFor[struct {
		A string `json:"a"`
	}](), map[string]about{"a": {desc: "x"}, "b": {desc: "y"}}, `"b" is described but is no field`)
	check("not a struct", reflect.TypeFor[int](), nil, "not a struct")
	check("one name twice", reflect.TypeFor[struct {
		fileArg
		P string `json:"path"`
	}](), map[string]about{"path": {desc: "x"}}, `two fields are named "path"`)
}

// validArgs are arguments each tool takes, to change one at a time.
var validArgs = map[string]map[string]any{
	"execute":         {"command": "true"},
	"share_file":      {"path": "a.txt"},
	"job_output":      {"job_id": fakeJob},
	"job_input":       {"job_id": fakeJob, "input": "y"},
	"job_kill":        {"job_id": fakeJob},
	"job_list":        {},
	"upload_link":     {},
	"read_file":       {"path": "a.txt"},
	"write_file":      {"path": "a.txt", "content": "x"},
	"edit_file":       {"path": "a.txt", "old_text": "a", "new_text": "b"},
	"expose_port":     {"port": 8000},
	"unexpose_port":   {"port": 8000},
	"checkpoint":      {"name": "before"},
	"checkpoint_list": {},
	"restore":         {"id": "image"},
}

// TestSchemaIsWhatIsChecked: every bound tools/list shows the model is the one a call
// meets: a value at a bound is taken, one past it is refused by name; an argument
// listed as required is asked for when missing, and a string shorter than its
// minLength or off its pattern is refused. Run with yield_after on and off, and
// another max_output and max_link_ttl, since those move bounds.
func TestSchemaIsWhatIsChecked(t *testing.T) {
	for _, h := range []*toolsHarness{
		newToolsHarness(t),
		newToolsHarness(t, func(o *Options) {
			o.Yield, o.Config.MaxOutput, o.DefaultOutput, o.MaxLinkTTL = 0, 50_000, 0, 2*time.Hour
		}),
	} {
		checked := 0
		for _, tool := range h.rpc("tools/list", map[string]any{})["tools"].([]any) {
			tool := tool.(map[string]any)
			name := tool["name"].(string)
			valid, ok := validArgs[name]
			if !ok {
				t.Errorf("%s: no valid arguments to test it with", name)
				continue
			}
			with := func(arg string, v any) map[string]any {
				m := maps.Clone(valid)
				m[arg] = v
				return m
			}
			in := tool["inputSchema"].(map[string]any)
			for arg, p := range in["properties"].(map[string]any) {
				p := p.(map[string]any)
				refused := fmt.Sprintf("%q must be", arg)
				for bound, past := range map[string]float64{"minimum": -1, "maximum": 1} {
					b, ok := p[bound].(float64)
					if !ok {
						continue
					}
					checked++
					if isErr, text, _ := h.call(name, with(arg, b)); isErr && strings.Contains(text, refused) {
						t.Errorf("%s: %s at its %s %s refused: %q", name, arg, bound, fmtNum(b), text)
					}
					if isErr, text, _ := h.call(name, with(arg, b+past)); !isErr || !strings.Contains(text, refused) {
						t.Errorf("%s: %s past its %s %s: error %v %q", name, arg, bound, fmtNum(b), isErr, text)
					}
				}
				if n, ok := p["minLength"].(float64); ok {
					checked++
					if isErr, text, _ := h.call(name, with(arg, strings.Repeat("x", int(n)-1))); !isErr || !strings.Contains(text, strconv.Quote(arg)) {
						t.Errorf("%s: %s shorter than %v: error %v %q", name, arg, n, isErr, text)
					}
				}
				if pat, ok := p["pattern"].(string); ok {
					checked++
					if regexp.MustCompile(pat).MatchString("x") {
						t.Fatalf("%s: %s: the pattern %s takes x", name, arg, pat)
					}
					if isErr, text, _ := h.call(name, with(arg, "x")); !isErr || !strings.Contains(text, strconv.Quote(arg)) {
						t.Errorf("%s: %s off its pattern: error %v %q", name, arg, isErr, text)
					}
				}
			}
			for _, arg := range in["required"].([]any) {
				checked++
				m := maps.Clone(valid)
				delete(m, arg.(string))
				if isErr, text, _ := h.call(name, m); !isErr || !strings.Contains(text, fmt.Sprintf("%s needs %q", name, arg)) {
					t.Errorf("%s without %s: error %v %q", name, arg, isErr, text)
				}
			}
		}
		if checked < 30 {
			t.Errorf("only %d bounds checked", checked)
		}
	}
}

// FuzzDecodeArgs: whatever arguments arrive (nested, huge or tiny numbers, NaN-like
// strings, unknown keys), reading them never panics, gives the same answer twice, and
// either refuses them naming an argument or fills the struct with values within the
// bounds the schema shows.
func FuzzDecodeArgs(f *testing.F) {
	h := newToolsHarness(f)
	tl := h.tools
	sample, err := specOf(reflect.TypeFor[sampleArgs](), "t", sampleAbout)
	if err != nil {
		f.Fatal(err)
	}
	specs := []*argSpec{sample, tl.executeTool().args, tl.shareFileTool().args, tl.jobOutputTool().args,
		tl.jobInputTool().args, tl.jobKillTool().args, tl.jobListTool().args, tl.uploadLinkTool().args,
		tl.readFileTool().args, tl.writeFileTool().args, tl.editFileTool().args, tl.exposePortTool().args}
	for _, s := range []string{
		`{"name": "a", "secs": "2.5", "count": " 7 ", "port": 8000.0, "flag": "True", "id": "j0123456789ab"}`,
		`{"command": "ls", "timeout": "NaN", "wait": "Infinity", "max_output": "1e400"}`,
		`{"command": {"command": {"command": ["ls"]}}, "cwd": [[[]]]}`,
		`{"port": 1e308, "count": -1e-308, "secs": 5e-324, "offset": 9007199254740993, "limit": -0}`,
		`{"job_id": "j0123456789ab", "wait": "0x1p4", "input": "\u0000\ufffd"}`,
		`{"path": "", "expires_in": "  +60  ", "Path": 1, "file-path": null, "": ""}`,
		`{"old_text": "a", "new_text": null, "directory": "\n", "interactive": "TRUE", "tty": "1"}`,
		`[1, 2]`, `"args"`, `null`, `3`,
	} {
		for i := range specs {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, args string) {
		var raw any
		if json.Unmarshal([]byte(args), &raw) != nil {
			return // mcp-go answers malformed JSON itself
		}
		spec := specs[int(which)%len(specs)]
		out := reflect.New(spec.typ).Elem()
		msg := spec.decode(raw, out)
		again := reflect.New(spec.typ).Elem()
		if msg2 := spec.decode(raw, again); msg2 != msg {
			t.Fatalf("two answers: %q, then %q", msg, msg2)
		}
		m, isMap := raw.(map[string]any)
		if msg != "" {
			named := !isMap && strings.Contains(msg, "JSON object")
			for k := range m {
				named = named || strings.Contains(msg, strconv.Quote(k))
			}
			for _, f := range spec.fields {
				named = named || f.required && strings.Contains(msg, fmt.Sprintf("needs %q", f.name))
			}
			if !named {
				t.Fatalf("%s: refused without naming an argument: %q", args, msg)
			}
			return
		}
		if !isMap && raw != nil {
			t.Fatalf("%s taken as arguments", args)
		}
		for k := range m {
			if !slices.Contains(spec.names, k) {
				t.Fatalf("unknown %q taken", k)
			}
		}
		schema := spec.schema()
		for _, f := range spec.fields {
			v, present := m[f.name]
			present = present && v != nil
			if f.required && !present {
				t.Fatalf("required %q missing, yet taken", f.name)
			}
			fv := out.FieldByIndex(f.index)
			p := schema.Properties[f.name].(map[string]any)
			switch f.kind {
			case reflect.String:
				s := fv.String()
				if present && (len(s) < f.minLength || f.re != nil && !f.re.MatchString(s) || f.nonblank && strings.TrimSpace(s) == "") {
					t.Fatalf("%q = %q taken against the schema %v", f.name, s, p)
				}
			case reflect.Float64, reflect.Int64:
				if f.ptr {
					if fv.IsNil() == present {
						t.Fatalf("%q: present %v, set %v", f.name, present, !fv.IsNil())
					}
					if fv.IsNil() {
						continue
					}
					fv = fv.Elem()
				}
				if !present {
					continue
				}
				var n float64
				if f.kind == reflect.Int64 {
					n = float64(fv.Int())
				} else {
					n = fv.Float()
				}
				lo, hi := f.bounds()
				if math.IsNaN(n) || n < lo || n > hi {
					t.Fatalf("%q = %v taken outside [%v, %v]", f.name, n, lo, hi)
				}
				if mn, ok := p["minimum"].(float64); ok && n < mn {
					t.Fatalf("%q = %v below the schema's minimum %v", f.name, n, mn)
				}
				if mx, ok := p["maximum"].(float64); ok && n > mx {
					t.Fatalf("%q = %v above the schema's maximum %v", f.name, n, mx)
				}
			}
		}
	})
}

// TestJobIDPattern: the job_id pattern the tools check is the sandbox's own rule.
func TestJobIDPattern(t *testing.T) {
	f := reflect.TypeFor[jobRef]().Field(0)
	field, err := fieldOf(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{fakeJob, "j0123456789ab", "jabcdefabcdef", "J0123456789ab", "j0123456789ab\n", "\nj0123456789ab",
		"j0123456789a", "j0123456789abc", "j0123456789aB", "j0123456789ag", "k0123456789ab", "", "j"} {
		if got, want := field.re.MatchString(id), boxapi.ValidJobID(id); got != want {
			t.Errorf("%q: the pattern says %v, boxapi.ValidJobID %v", id, got, want)
		}
	}
}
