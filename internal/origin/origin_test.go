package origin

import (
	"strings"
	"testing"
)

// TestParse: scheme and host, in lower case, with nothing after but an optional "/".
func TestParse(t *testing.T) {
	for raw, want := range map[string]string{
		"https://Sandbox.Example.com":  "https://sandbox.example.com",
		"HTTP://localhost:8080/":       "http://localhost:8080",
		"https://[::1]:8443":           "https://[::1]:8443",
		"https://x.example/mcp":        "",
		"ftp://x.example":              "",
		"https://user@x.example":       "",
		"https://x.example?":           "",
		"https://x.example#":           "",
		"https://x.example/?a=b":       "",
		"x.example":                    "",
		"https://":                     "",
		"https://x.example\t":          "",
		"https://x.example/ extra":     "",
		"mailto:someone@x.example.com": "",
	} {
		got, err := Parse(raw)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("Parse(%q) = %q, %v; want %q", raw, got, err, want)
		}
		if err != nil && !strings.Contains(err.Error(), "must be an origin like https://sandbox.example.com") {
			t.Errorf("Parse(%q): %v does not say what an origin is", raw, err)
		}
	}
}
