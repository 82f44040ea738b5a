package mcptools

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// toolFunc is a tool handler that receives the sandbox of the call and its arguments
// already checked against the tool's input schema: no unknown names, an object.
// Returning an error is for the sandbox failing, not for bad input: bad input is a
// tool result made with argError.
type toolFunc func(ctx context.Context, box Box, a args) (*mcp.CallToolResult, error)

// addTool registers a tool whose input schema refuses unknown properties and whose
// handler sees only arguments the schema names. Every tool goes through here, so the
// rule lives in one place.
func (t *Tools) addTool(s *server.MCPServer, tool mcp.Tool, fn toolFunc) {
	tool.InputSchema.AdditionalProperties = false
	names := make([]string, 0, len(tool.InputSchema.Properties))
	for n := range tool.InputSchema.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	s.AddTool(tool, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		a := args{tool: tool.Name}
		if req.Params.Meta != nil {
			a.progress = req.Params.Meta.ProgressToken
		}
		a.task = req.Params.Task != nil
		switch raw := req.Params.Arguments.(type) {
		case nil:
			a.m = map[string]any{}
		case map[string]any:
			a.m = raw
		default:
			return mcp.NewToolResultError(fmt.Sprintf("%s takes its arguments as a JSON object, got %T", tool.Name, raw)), nil
		}
		var unknown []string
		for k := range a.m {
			if !slices.Contains(names, k) {
				u := strconv.Quote(k)
				if alt := argSuggestion(k, names); alt != "" {
					u += fmt.Sprintf(" (use %q)", alt)
				}
				unknown = append(unknown, u)
			}
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			accepted := "none"
			if len(names) > 0 {
				accepted = strings.Join(names, ", ")
			}
			return mcp.NewToolResultError(fmt.Sprintf("%s does not take the argument %s; it accepts: %s",
				tool.Name, strings.Join(unknown, ", "), accepted)), nil
		}
		box, fail := t.boxFor(ctx)
		if fail != nil {
			return fail, nil
		}
		res, err := fn(ctx, box, a)
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

// args are one call's arguments. Its readers accept what models commonly send: numbers
// as numeric strings, booleans as "true"/"false". A JSON null counts as absent.
type args struct {
	tool     string
	m        map[string]any
	progress mcp.ProgressToken // the caller's progress token, nil when it wants none
	task     bool              // a task-augmented call (MCP tasks): the result is fetched later
}

// argError is a tool result for a bad argument, phrased for the model.
func argError(format string, a ...any) *mcp.CallToolResult {
	return mcp.NewToolResultError(fmt.Sprintf(format, a...))
}

// badArg reports an argument that is present but unusable.
type badArg struct{ msg string }

func (e *badArg) Error() string { return e.msg }

// result turns a reader's error into the tool result the model sees.
func (e *badArg) result() *mcp.CallToolResult { return mcp.NewToolResultError(e.msg) }

// has reports whether name was given (and is not null).
func (a args) has(name string) bool {
	v, ok := a.m[name]
	return ok && v != nil
}

// str returns a string argument, or "" when absent.
func (a args) str(name string) (string, *badArg) {
	v, ok := a.m[name]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", &badArg{fmt.Sprintf("%q must be a string, got %s", name, describe(v))}
	}
	return s, nil
}

// num returns a number argument in [lo, hi], accepting numeric strings; ok is false
// when it is absent. unit describes it in errors, e.g. "a number of seconds".
func (a args) num(name, unit string, lo, hi float64) (v float64, ok bool, err *badArg) {
	raw, present := a.m[name]
	if !present || raw == nil {
		return 0, false, nil
	}
	switch x := raw.(type) {
	case float64:
		v = x
	case int:
		v = float64(x)
	case int64:
		v = float64(x)
	case string:
		f, perr := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if perr != nil {
			return 0, false, &badArg{fmt.Sprintf("%q must be %s between %s and %s, got %s", name, unit, fmtNum(lo), fmtNum(hi), describe(raw))}
		}
		v = f
	default:
		return 0, false, &badArg{fmt.Sprintf("%q must be %s between %s and %s, got %s", name, unit, fmtNum(lo), fmtNum(hi), describe(raw))}
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi {
		return 0, false, &badArg{fmt.Sprintf("%q must be %s between %s and %s, got %s", name, unit, fmtNum(lo), fmtNum(hi), describe(raw))}
	}
	return v, true, nil
}

// integer is num for whole numbers.
func (a args) integer(name, unit string, lo, hi int64) (int64, bool, *badArg) {
	v, ok, err := a.num(name, unit, float64(lo), float64(hi))
	if err != nil || !ok {
		return 0, ok, err
	}
	if v != math.Trunc(v) {
		return 0, false, &badArg{fmt.Sprintf("%q must be %s, a whole number between %d and %d, got %s", name, unit, lo, hi, describe(a.m[name]))}
	}
	return int64(v), true, nil
}

// boolean returns a boolean argument, accepting "true" and "false" as strings.
func (a args) boolean(name string) (v, ok bool, err *badArg) {
	raw, present := a.m[name]
	if !present || raw == nil {
		return false, false, nil
	}
	switch x := raw.(type) {
	case bool:
		return x, true, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true":
			return true, true, nil
		case "false":
			return false, true, nil
		}
	}
	return false, false, &badArg{fmt.Sprintf("%q must be true or false, got %s", name, describe(raw))}
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
	}
	return fmt.Sprintf("%v", v)
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

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
