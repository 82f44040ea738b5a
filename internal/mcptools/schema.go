package mcptools

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/mark3labs/mcp-go/mcp"
)

// outputSchema declares a tool's structured result as the JSON schema of its Go type
// T, so the two cannot drift apart: a property per json field, required unless it is
// omitempty, no other properties, the description from the field's `jsonschema` tag,
// and time.Time as a date-time string. tune adds what a tag cannot say (an enum).
//
// Unlike mcp.WithOutputSchema, which prints to stderr and sets no schema when the
// generation fails, this panics: every tool is built when the server is, and a test
// builds them all.
func outputSchema[T any](tune ...func(*jsonschema.Schema)) mcp.ToolOption {
	s, err := schemaOf[T]()
	if err != nil {
		panic(err)
	}
	for _, f := range tune {
		f(s)
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("output schema of %s: %v", reflect.TypeFor[T](), err))
	}
	return mcp.WithRawOutputSchema(b)
}

func schemaOf[T any]() (*jsonschema.Schema, error) {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		return nil, fmt.Errorf("output schema of %s: %w", reflect.TypeFor[T](), err)
	}
	markTimes(reflect.TypeFor[T](), s)
	return s, nil
}

// markTimes gives the time.Time fields of t, at any depth, the date-time format.
func markTimes(t reflect.Type, s *jsonschema.Schema) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
		if s.Items != nil {
			s = s.Items
		}
	}
	if t == reflect.TypeFor[time.Time]() {
		s.Format = "date-time"
		return
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if p := s.Properties[name]; p != nil && f.IsExported() {
			markTimes(f.Type, p)
		}
	}
}
