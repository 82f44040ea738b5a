package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestStructuredContentDeclared: through a real Caddy, every field of every tool's
// structuredContent is declared in the outputSchema that tools/list gives for the
// tool (execute's for the job tools, which return its result), and the content
// validates against that schema. Every tool that declares an
// output schema is called at least once, in each of its result shapes (a command that
// ends, a running job, a directory share). The execute schema once lacked `note`.
func TestStructuredContentDeclared(t *testing.T) {
	s := testsite.Start(t, testsite.Options{Directive: []string{"previews localhost"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]map[string]any{}
	validators := map[string]*jsonschema.Schema{}
	for _, tool := range list.Tools {
		b, _ := json.Marshal(tool)
		var m struct {
			OutputSchema map[string]any `json:"outputSchema"`
		}
		if err := json.Unmarshal(b, &m); err != nil || m.OutputSchema == nil {
			continue
		}
		schemas[tool.Name] = m.OutputSchema
		comp := jsonschema.NewCompiler()
		if err := comp.AddResource(tool.Name+".json", m.OutputSchema); err != nil {
			t.Fatalf("%s: %v", tool.Name, err)
		}
		if validators[tool.Name], err = comp.Compile(tool.Name + ".json"); err != nil {
			t.Fatalf("the outputSchema of %s does not compile: %v", tool.Name, err)
		}
	}
	if len(schemas) < 6 {
		t.Fatalf("only %d tools declare an output schema", len(schemas))
	}
	// The job tools return execute's result; tools/list carries its schema once.
	for _, tool := range []string{"job_output", "job_input", "job_kill"} {
		if schemas[tool] != nil {
			t.Errorf("%s repeats an output schema", tool)
		}
		schemas[tool], validators[tool] = schemas["execute"], validators["execute"]
	}

	called := map[string]bool{}
	check := func(tool string, args map[string]any) map[string]any {
		t.Helper()
		res := testsite.Call(ctx, t, c, tool, args)
		if res.IsError {
			t.Fatalf("%s %v: %s", tool, args, testsite.ResultText(res))
		}
		b, _ := json.Marshal(res.StructuredContent)
		var v any
		if err := json.Unmarshal(b, &v); err != nil || v == nil {
			t.Fatalf("%s has no structuredContent: %s", tool, b)
		}
		called[tool] = true
		if extra := testenv.Undeclared(schemas[tool], v, tool); len(extra) > 0 {
			t.Errorf("%s returns fields its outputSchema does not declare: %s", tool, strings.Join(extra, ", "))
		}
		if err := validators[tool].Validate(v); err != nil {
			t.Errorf("the structuredContent of %s does not validate against its outputSchema: %v\n%s", tool, err, b)
		}
		m, _ := v.(map[string]any)
		return m
	}

	check("execute", map[string]any{"command": "mkdir -p /sandbox/d && echo hi > /sandbox/d/a.txt && echo warn >&2; exit 3"})
	running := check("execute", map[string]any{"command": "cat", "interactive": true, "wait": 0})
	id, _ := running["job_id"].(string)
	if running["running"] != true || id == "" {
		t.Fatalf("execute with wait 0 returned %v", running)
	}
	check("job_input", map[string]any{"job_id": id, "input": "hello", "wait": 1})
	check("job_output", map[string]any{"job_id": id, "wait": 0})
	check("job_list", nil)
	check("job_kill", map[string]any{"job_id": id})
	check("share_file", map[string]any{"path": "/sandbox/d/a.txt"})
	check("share_file", map[string]any{"path": "/sandbox/d"})
	check("upload_link", map[string]any{"directory": "/sandbox/in"})
	check("expose_port", map[string]any{"port": 8000})
	check("unexpose_port", map[string]any{"port": 8000})
	t.Cleanup(func() { removeCheckpoints(s.Docker, s.Container) })
	saved := check("checkpoint", map[string]any{"name": "schema"})
	check("checkpoint_list", nil)
	check("restore", map[string]any{"id": saved["id"]})
	for name := range schemas {
		if !called[name] {
			t.Errorf("%s declares an output schema but this test never calls it: add a call", name)
		}
	}
}
