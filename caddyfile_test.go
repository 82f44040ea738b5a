package mcpsandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddytest"
)

// TestCaddyfileAdapt checks each testdata/caddyfile_adapt/*.caddytest: a Caddyfile, a
// line of dashes, and the JSON it must adapt to.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/caddyfile_adapt/*.caddytest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no adapt tests found: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			in, want, ok := strings.Cut(string(data), "\n----------\n")
			if !ok {
				t.Fatalf("%s: no ---------- separator", f)
			}
			if !caddytest.CompareAdapt(t, f, in+"\n", "caddyfile", strings.TrimRight(want, "\n")) {
				t.Fail()
			}
		})
	}
}

// TestCaddyfileErrors checks that malformed Caddyfiles fail with a message that says
// what is wrong.
func TestCaddyfileErrors(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"unknown subdirective", "mcp_sandbox {\n\tapi_keyy x\n}", "unrecognized subdirective api_keyy"},
		{"duplicate", "mcp_sandbox {\n\timage a\n\timage b\n}", "duplicate subdirective image"},
		{"missing value", "mcp_sandbox {\n\timage\n}", "image needs a value"},
		{"two values", "mcp_sandbox {\n\tmemory 3g 4g\n}", "memory takes one value"},
		{"bad duration", "mcp_sandbox {\n\texec_timeout soon\n}", `exec_timeout: "soon" is not a duration`},
		{"negative duration", "mcp_sandbox {\n\tlink_ttl -1h\n}", `link_ttl: "-1h" is not a duration`},
		{"bad cpus", "mcp_sandbox {\n\tcpus zero\n}", `cpus: "zero" is not a positive number`},
		{"zero cpus", "mcp_sandbox {\n\tcpus 0\n}", `cpus: "0" is not a positive number`},
		{"negative max_output", "mcp_sandbox {\n\tmax_output -5\n}", `max_output: "-5" is not a non-negative whole number`},
		{"bad bearer switch", "mcp_sandbox {\n\tapi_key_bearer maybe\n}", "api_key_bearer: want on or off"},
		{"inline argument", "mcp_sandbox extra", "wrong argument count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cf := "localhost {\n" + tc.body + "\n}\n"
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("adapting\n%s\ngot error %v, want one containing %q", cf, err, tc.want)
			}
		})
	}
}
