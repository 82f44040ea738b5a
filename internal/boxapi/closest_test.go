package boxapi

import "testing"

func TestClosest(t *testing.T) {
	const file = "package main\n\nfunc main() {\n\tfmt.Println(\"hello\")\n\treturn\n}\n"
	for _, c := range []struct {
		name, old string
		want      *Near
	}{
		{"second line differs", "func main() {\n\tfmt.Println(\"hi\")\n", &Near{Line: 4, FileLine: "\tfmt.Println(\"hello\")", TextLine: "\tfmt.Println(\"hi\")", Matched: 1}},
		{"indentation", "    fmt.Println(\"hello\")\n", &Near{Line: 4, FileLine: "\tfmt.Println(\"hello\")", TextLine: "    fmt.Println(\"hello\")", Whitespace: true}},
		{"indentation after a match", "func main() {\n    fmt.Println(\"hello\")", &Near{Line: 4, FileLine: "\tfmt.Println(\"hello\")", TextLine: "    fmt.Println(\"hello\")", Matched: 1, Whitespace: true}},
		{"a long shared start", "fmt.Println(\"goodbye\")", &Near{Line: 4, FileLine: "\tfmt.Println(\"hello\")", TextLine: "fmt.Println(\"goodbye\")"}},
		{"nothing alike", "import os\n", nil},
		{"only blanks", "\n\n\n\n", nil},
	} {
		got := Closest(file, c.old)
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: Closest = %+v, want %+v", c.name, got, c.want)
		}
	}
}
