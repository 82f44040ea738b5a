package testenv

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestUndeclared(t *testing.T) {
	var schema map[string]any
	_ = json.Unmarshal([]byte(`{"type":"object","properties":{"a":{"type":"string"},
		"jobs":{"type":"array","items":{"type":"object","properties":{"id":{"type":"string"}}}}}}`), &schema)
	var v any
	_ = json.Unmarshal([]byte(`{"a":"x","note":"y","jobs":[{"id":"1"},{"id":"2","state":"done"}]}`), &v)
	if got, want := Undeclared(schema, v, "$"), []string{"$.jobs[].state", "$.note"}; !slices.Equal(got, want) {
		t.Errorf("Undeclared = %q, want %q", got, want)
	}
	_ = json.Unmarshal([]byte(`{"a":"x","jobs":[]}`), &v)
	if got := Undeclared(schema, v, "$"); len(got) != 0 {
		t.Errorf("a declared value: %q", got)
	}
}
