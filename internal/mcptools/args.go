package mcptools

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// A tool's arguments are the fields of a struct, which states each argument once: its
// name, its type, whether it is required and which values it takes. The input schema
// the model sees and the reading of a call's arguments both come from it, so they
// cannot disagree. The tags of a field:
//
//	json:"name"        the argument's name
//	arg:"required,min=1,max=86400,minLength=1,nonblank,pattern=^re$"
//	                   what it takes (pattern last: it runs to the end of the tag);
//	                   nonblank is minLength=1 that spaces alone do not meet
//	unit:"a number of seconds"
//	                   how errors name a number
//	needs:"..."        what a required argument is, told the model when it is missing
//	                   or unusable
//
// Field types: string, bool, float64, int, int64, and pointers to the numbers, nil
// when the argument is absent. The tool's definition adds each argument's description
// and what depends on the configuration (see about).
//
// Values are read the way models send them: numbers also as numeric strings, booleans
// also as "true" and "false"; a JSON null counts as absent.

// call is what a handler knows of its call besides the arguments.
type call struct {
	tool     string
	progress mcp.ProgressToken // the caller's progress token, nil when it wants none
	task     bool              // a task-augmented call (MCP tasks): the result is fetched later
}

// toolFunc is a tool handler that receives the sandbox of the call and its arguments,
// already read into T and checked against the bounds T states. Returning an error is
// for the sandbox failing, not for bad input: bad input is a tool result made with
// argError.
type toolFunc[T any] func(ctx context.Context, box Box, c call, in T) (*mcp.CallToolResult, error)

// toolDef is a tool whose arguments are read into T.
type toolDef[T any] struct {
	tool mcp.Tool
	args *argSpec
}

// about is what a tool's definition says of one argument besides its field's tags:
// its description, and what depends on the configuration.
type about struct {
	desc     string
	min, max *float64 // replace the tag's bounds
	unit     string   // replaces the tag's unit
	must     string   // replaces "<unit> between <min> and <max>" in errors
}

// bound is a bound of about.
func bound[N int | int64 | float64](n N) *float64 {
	f := float64(n)
	return &f
}

// define gives tool the input schema of T, each argument described by props. It
// panics on a struct it cannot read or an argument without a description: every
// tool is built when the server is, and a test builds them all.
func define[T any](tool mcp.Tool, props map[string]about) toolDef[T] {
	spec, err := specOf(reflect.TypeFor[T](), tool.Name, props)
	if err != nil {
		panic(err)
	}
	tool.InputSchema = spec.schema()
	return toolDef[T]{tool: tool, args: spec}
}

// addTool registers a tool whose input schema refuses unknown properties and whose
// handler sees only arguments the schema names, read into T. Every tool goes through
// here, so the rules live in one place.
func addTool[T any](t *Tools, s *server.MCPServer, def toolDef[T], fn toolFunc[T]) {
	s.AddTool(def.tool, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c := call{tool: def.tool.Name, task: req.Params.Task != nil}
		if req.Params.Meta != nil {
			c.progress = req.Params.Meta.ProgressToken
		}
		var in T
		if msg := def.args.decode(req.Params.Arguments, reflect.ValueOf(&in).Elem()); msg != "" {
			return mcp.NewToolResultError(msg), nil
		}
		box, fail := t.boxFor(ctx)
		if fail != nil {
			return fail, nil
		}
		if req.Params.RequestState != "" || len(req.Params.InputResponses) > 0 {
			// The retry of a call that returned input_required (protocol 2026-07-28).
			if _, ok := any(in).(waiter); !ok || c.task {
				return mcp.NewToolResultError(def.tool.Name + " asks no question: leave requestState and inputResponses out and call again."), nil
			}
			return shapeResult(ctx, t.resume(ctx, box, c, req, in)), nil
		}
		res, err := fn(ctx, box, c, in)
		return shapeResult(ctx, res), err
	})
}

// title is the tool's display name, top-level (MCP 2025-06-18) and among the
// annotations, where clients of earlier versions look for it.
func title(t string) mcp.ToolOption {
	return func(tool *mcp.Tool) {
		tool.Title = t
		tool.Annotations.Title = t
	}
}

// hints states what a tool does, for clients that ask before risky calls: whether it
// only reads, may destroy, gives the same result when repeated, and reaches beyond
// the sandbox.
func hints(readOnly, destructive, idempotent, openWorld bool) mcp.ToolOption {
	return func(t *mcp.Tool) {
		for _, o := range []mcp.ToolOption{mcp.WithReadOnlyHintAnnotation(readOnly), mcp.WithDestructiveHintAnnotation(destructive),
			mcp.WithIdempotentHintAnnotation(idempotent), mcp.WithOpenWorldHintAnnotation(openWorld)} {
			o(t)
		}
	}
}

// argError is a tool result for a bad argument, phrased for the model.
func argError(format string, a ...any) *mcp.CallToolResult {
	return mcp.NewToolResultError(fmt.Sprintf(format, a...))
}

// maxWhole is the largest whole number a JSON number carries exactly; whole-number
// arguments without a maximum stop there.
const maxWhole = 1 << 53

// argField is one argument as its struct field states it.
type argField struct {
	name      string
	index     []int
	kind      reflect.Kind // String, Bool, Float64, or Int64 for every whole number
	ptr       bool         // a pointer field: nil when absent
	required  bool
	nonblank  bool
	minLength int
	pattern   string
	re        *regexp.Regexp
	min, max  *float64
	unit      string
	must      string
	needs     string
	desc      string
}

// argSpec is the arguments of one tool, the fields of typ.
type argSpec struct {
	tool   string
	typ    reflect.Type
	fields []argField
	names  []string // sorted, for errors
}

// specOf reads the argument struct t of tool.
func specOf(t reflect.Type, tool string, props map[string]about) (*argSpec, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("arguments of %s: %s is not a struct", tool, t)
	}
	spec := &argSpec{tool: tool, typ: t}
	for _, sf := range reflect.VisibleFields(t) {
		if sf.Anonymous || !sf.IsExported() {
			continue
		}
		f, err := fieldOf(sf)
		if err != nil {
			return nil, fmt.Errorf("arguments of %s: %s: %w", tool, sf.Name, err)
		}
		if slices.Contains(spec.names, f.name) {
			return nil, fmt.Errorf("arguments of %s: two fields are named %q", tool, f.name)
		}
		p, ok := props[f.name]
		if !ok || p.desc == "" {
			return nil, fmt.Errorf("arguments of %s: %q has no description", tool, f.name)
		}
		f.desc = p.desc
		if p.min != nil {
			f.min = p.min
		}
		if p.max != nil {
			f.max = p.max
		}
		if p.unit != "" {
			f.unit = p.unit
		}
		f.must = p.must
		if (f.kind == reflect.Float64 || f.kind == reflect.Int64) && f.unit == "" {
			return nil, fmt.Errorf("arguments of %s: %q is a number without a unit", tool, f.name)
		}
		spec.fields = append(spec.fields, f)
		spec.names = append(spec.names, f.name)
	}
	for name := range props {
		if !slices.Contains(spec.names, name) {
			return nil, fmt.Errorf("arguments of %s: %q is described but is no field of %s", tool, name, t)
		}
	}
	slices.Sort(spec.names)
	return spec, nil
}

// fieldOf reads one field's tags.
func fieldOf(sf reflect.StructField) (argField, error) {
	f := argField{index: sf.Index, unit: sf.Tag.Get("unit"), needs: sf.Tag.Get("needs")}
	f.name, _, _ = strings.Cut(sf.Tag.Get("json"), ",")
	if f.name == "" || f.name == "-" {
		return f, fmt.Errorf("no json name")
	}
	t := sf.Type
	if t.Kind() == reflect.Pointer {
		f.ptr, t = true, t.Elem()
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Float64:
		f.kind = t.Kind()
	case reflect.Int, reflect.Int64:
		f.kind = reflect.Int64
	default:
		return f, fmt.Errorf("type %s is not an argument type", sf.Type)
	}
	if f.ptr && (f.kind == reflect.String || f.kind == reflect.Bool) {
		return f, fmt.Errorf("type %s: only numbers may be pointers", sf.Type)
	}
	tag := sf.Tag.Get("arg")
	for tag != "" {
		var opt string
		if strings.HasPrefix(tag, "pattern=") {
			opt, tag = tag, ""
		} else {
			opt, tag, _ = strings.Cut(tag, ",")
		}
		key, val, _ := strings.Cut(opt, "=")
		var err error
		switch key {
		case "required":
			f.required = true
		case "nonblank":
			f.nonblank, f.minLength = true, max(f.minLength, 1)
		case "minLength":
			f.minLength, err = strconv.Atoi(val)
		case "pattern":
			f.pattern = val
			f.re, err = regexp.Compile(val)
		case "min", "max":
			var v float64
			if v, err = strconv.ParseFloat(val, 64); err == nil {
				if key == "min" {
					f.min = &v
				} else {
					f.max = &v
				}
			}
		default:
			err = fmt.Errorf("unknown option %q", key)
		}
		if err != nil {
			return f, fmt.Errorf("arg tag: %w", err)
		}
	}
	isNum := f.kind == reflect.Float64 || f.kind == reflect.Int64
	switch {
	case (f.min != nil || f.max != nil) && !isNum:
		return f, fmt.Errorf("min and max are for numbers")
	case (f.minLength > 0 || f.re != nil) && f.kind != reflect.String:
		return f, fmt.Errorf("minLength and pattern are for strings")
	case f.required != (f.needs != ""):
		return f, fmt.Errorf("a required argument, and only one, says what it needs")
	}
	return f, nil
}

// schema is the input schema of the arguments: a property per argument, no others.
func (s *argSpec) schema() mcp.ToolInputSchema {
	in := mcp.ToolInputSchema{Type: "object", Properties: map[string]any{}, Required: []string{}, AdditionalProperties: false}
	for _, f := range s.fields {
		p := map[string]any{"description": f.desc}
		switch f.kind {
		case reflect.String:
			p["type"] = "string"
		case reflect.Bool:
			p["type"] = "boolean"
		default:
			// "number" for whole numbers too: models send 5.0, and the error says "whole".
			p["type"] = "number"
		}
		if f.min != nil {
			p["minimum"] = *f.min
		}
		if f.max != nil {
			p["maximum"] = *f.max
		}
		if f.minLength > 0 {
			p["minLength"] = f.minLength
		}
		if f.pattern != "" {
			p["pattern"] = f.pattern
		}
		in.Properties[f.name] = p
		if f.required {
			in.Required = append(in.Required, f.name)
		}
	}
	return in
}

// decode reads a call's arguments into out, a settable typ; failing, it returns what to tell the
// model: every unknown argument by name (with the name it likely means), or the
// first argument, in the struct's order, that cannot be used.
func (s *argSpec) decode(raw any, out reflect.Value) string {
	var m map[string]any
	switch x := raw.(type) {
	case nil:
	case map[string]any:
		m = x
	default:
		return fmt.Sprintf("%s takes its arguments as a JSON object, got %s", s.tool, describe(raw))
	}
	if msg := s.unknown(m); msg != "" {
		return msg
	}
	for i := range s.fields {
		if msg := s.fields[i].read(s.tool, m[s.fields[i].name], out.FieldByIndex(s.fields[i].index)); msg != "" {
			return msg
		}
	}
	return ""
}

// unknown refuses the arguments the tool does not take, naming what it accepts.
func (s *argSpec) unknown(m map[string]any) string {
	var unknown []string
	for k := range m {
		if !slices.Contains(s.names, k) {
			u := strconv.Quote(k)
			if alt := argSuggestion(k, s.names); alt != "" {
				u += fmt.Sprintf(" (use %q)", alt)
			}
			unknown = append(unknown, u)
		}
	}
	if len(unknown) == 0 {
		return ""
	}
	slices.Sort(unknown)
	accepted := "none"
	if len(s.names) > 0 {
		accepted = strings.Join(s.names, ", ")
	}
	return fmt.Sprintf("%s does not take the argument %s; it accepts: %s", s.tool, strings.Join(unknown, ", "), accepted)
}

// read sets dst from the argument's value v (nil when absent), or says why it cannot.
func (f *argField) read(tool string, v any, dst reflect.Value) string {
	if v == nil {
		if f.required {
			return f.needed(tool, nil)
		}
		return ""
	}
	switch f.kind {
	case reflect.String:
		s, ok := v.(string)
		switch {
		case !ok:
			return fmt.Sprintf("%q must be a string, got %s", f.name, describe(v))
		case len(s) < f.minLength, f.nonblank && strings.TrimSpace(s) == "", f.re != nil && !f.re.MatchString(s):
			if f.required {
				return f.needed(tool, v)
			}
			return fmt.Sprintf("%q must be %s, got %s", f.name, f.stringRule(), describe(v))
		}
		dst.SetString(s)
	case reflect.Bool:
		b, ok := boolOf(v)
		if !ok {
			return fmt.Sprintf("%q must be true or false, got %s", f.name, describe(v))
		}
		dst.SetBool(b)
	default:
		n, ok := numberOf(v)
		lo, hi := f.bounds()
		if !ok || n < lo || n > hi {
			return fmt.Sprintf("%q must be %s, got %s", f.name, f.rule(false), describe(v))
		}
		if f.kind == reflect.Int64 && n != math.Trunc(n) {
			return fmt.Sprintf("%q must be %s, got %s", f.name, f.rule(true), describe(v))
		}
		if f.ptr {
			p := reflect.New(dst.Type().Elem())
			dst.Set(p)
			dst = p.Elem()
		}
		if f.kind == reflect.Int64 {
			dst.SetInt(int64(n))
		} else {
			dst.SetFloat(n)
		}
	}
	return ""
}

// needed says what a required argument, missing or unusable, should be.
func (f *argField) needed(tool string, got any) string {
	what := fmt.Sprintf("%s needs %q", tool, f.name)
	if f.kind != reflect.String {
		what += " (" + f.rule(f.kind == reflect.Int64) + ")"
	}
	what += ": " + f.needs
	if got != nil && got != "" {
		what += "; got " + describe(got)
	}
	return what
}

// bounds are the numbers an argument takes, whole numbers no further than JSON carries
// them exactly.
func (f *argField) bounds() (lo, hi float64) {
	lo, hi = math.Inf(-1), math.Inf(1)
	if f.kind == reflect.Int64 {
		lo, hi = -maxWhole, maxWhole
	}
	if f.min != nil {
		lo = *f.min
	}
	if f.max != nil {
		hi = *f.max
	}
	return lo, hi
}

// rule says which numbers an argument takes, as "must be" goes on.
func (f *argField) rule(whole bool) string {
	if f.must != "" {
		return f.must
	}
	lo, hi := f.bounds()
	if whole {
		return fmt.Sprintf("%s, a whole number between %s and %s", f.unit, fmtNum(lo), fmtNum(hi))
	}
	return fmt.Sprintf("%s between %s and %s", f.unit, fmtNum(lo), fmtNum(hi))
}

// stringRule says which strings an optional argument takes.
func (f *argField) stringRule() string {
	switch {
	case f.re != nil:
		return "a string matching " + f.pattern
	case f.nonblank:
		return "a string that is not blank"
	}
	return fmt.Sprintf("a string of at least %d bytes", f.minLength)
}

// numberOf reads a number as models send it: a JSON number or a numeric string; never
// NaN or infinite.
func numberOf(v any) (float64, bool) {
	var n float64
	switch x := v.(type) {
	case float64:
		n = x
	case int:
		n = float64(x)
	case int64:
		n = float64(x)
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, false
		}
		n = f
	default:
		return 0, false
	}
	return n, !math.IsNaN(n) && !math.IsInf(n, 0)
}

// boolOf reads a boolean as models send it: true, false, or those as strings.
func boolOf(v any) (value, ok bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	return false, false
}

// describe shows a JSON value in an error the way the model sent it.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(human.Clip(x, 80))
	case float64:
		return fmtNum(x)
	case bool:
		return strconv.FormatBool(x)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case nil:
		return "null"
	}
	return human.Clip(fmt.Sprintf("%v", v), 80)
}

// fmtNum writes a number as JSON would, in exponent form only when huge or tiny, so
// that an error quoting 1e300 is not 300 digits long.
func fmtNum(f float64) string {
	if a := math.Abs(f); a != 0 && (a >= 1e21 || a < 1e-6) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// argAliases are the names models commonly give arguments, from other tools' schemas
// (start_line, workdir, old_string, ...), with the names they may mean here, first
// match first.
var argAliases = map[string][]string{
	"start_line": {"offset"}, "line": {"offset", "input"}, "start": {"offset"}, "from": {"offset"},
	"line_number": {"offset"}, "first_line": {"offset"}, "line_offset": {"offset"}, "start_line_number": {"offset"},
	"lines": {"limit"}, "num_lines": {"limit"}, "line_count": {"limit"}, "max_lines": {"limit"}, "count": {"limit"},
	"n": {"limit"}, "end_line": {"limit"}, "length": {"limit"},
	"workdir": {"cwd"}, "work_dir": {"cwd"}, "working_dir": {"cwd"}, "working_directory": {"cwd"}, "dir": {"cwd", "directory"},
	"directory": {"cwd"}, "cd": {"cwd"}, "folder": {"directory"}, "dest": {"directory"}, "destination": {"directory"},
	"target_dir": {"directory"}, "upload_dir": {"directory"}, "path": {"directory", "cwd"},
	"cmd": {"command"}, "script": {"command"}, "code": {"command"}, "bash": {"command"}, "shell": {"command"},
	"commands": {"command"}, "command_line": {"command"}, "run": {"command"},
	"timeout_seconds": {"timeout"}, "timeout_sec": {"timeout"}, "timeout_s": {"timeout"}, "time_limit": {"timeout"},
	"timeout_ms":   {"timeout"},
	"wait_seconds": {"wait"}, "wait_time": {"wait"}, "wait_for": {"wait"}, "yield": {"wait"}, "block": {"wait"},
	"file": {"path"}, "filename": {"path"}, "file_path": {"path"}, "filepath": {"path"}, "file_name": {"path"},
	"target_file": {"path"}, "target_path": {"path"}, "target": {"path"}, "name": {"path"},
	"contents": {"content"}, "text": {"content", "input", "new_text"}, "data": {"content", "input"}, "body": {"content"},
	"file_text": {"content"}, "new_content": {"content", "new_text"},
	"old_string": {"old_text"}, "old_str": {"old_text"}, "old": {"old_text"}, "search": {"old_text"}, "find": {"old_text"},
	"original": {"old_text"}, "new_string": {"new_text"}, "new_str": {"new_text"}, "new": {"new_text"},
	"replace": {"new_text"}, "replacement": {"new_text"},
	"stdin": {"input"}, "keys": {"input"}, "send": {"input"}, "message": {"input"},
	"id": {"job_id"}, "job": {"job_id"}, "task_id": {"job_id"},
	"max_bytes": {"max_output"}, "output_limit": {"max_output"}, "max_output_bytes": {"max_output"},
	"ttl": {"expires_in"}, "expires": {"expires_in"}, "expiry": {"expires_in"}, "expiration": {"expires_in"},
	"expires_after": {"expires_in"}, "lifetime": {"expires_in"},
	"port_number": {"port"}, "pty": {"tty"},
}

// argSuggestion is the accepted argument an unknown name most likely means, or "":
// its snake_case form (jobId, start-line), or a common alias of it.
func argSuggestion(name string, accepted []string) string {
	var b strings.Builder
	for i, r := range name {
		switch {
		case r == '-' || r == ' ':
			r = '_'
		case r >= 'A' && r <= 'Z':
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	n := strings.ReplaceAll(b.String(), "__", "_")
	if slices.Contains(accepted, n) {
		return n
	}
	for _, alt := range argAliases[n] {
		if slices.Contains(accepted, alt) {
			return alt
		}
	}
	return ""
}
