package mcpsandbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
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
		{"bad yield_after", "mcp_sandbox {\n\tyield_after 0\n}", `yield_after: "0" is not a positive duration like 45s, or off`},
		{"bad max_jobs", "mcp_sandbox {\n\tmax_jobs 0\n}", "max_jobs: must be at least 1"},
		{"bad cpus", "mcp_sandbox {\n\tcpus zero\n}", `cpus: "zero" is not a positive number`},
		{"zero cpus", "mcp_sandbox {\n\tcpus 0\n}", `cpus: "0" is not a positive number`},
		{"negative max_output", "mcp_sandbox {\n\tmax_output -5\n}", `max_output: "-5" is not a non-negative whole number`},
		{"bad default_output", "mcp_sandbox {\n\tdefault_output 30k\n}", `default_output: "30k" is not a non-negative whole number`},
		{"bad agent switch", "mcp_sandbox {\n\tagent no\n}", "agent: want on or off"},
		{"bad bearer switch", "mcp_sandbox {\n\tapi_key_bearer maybe\n}", "api_key_bearer: want on or off"},
		{"inline argument", "mcp_sandbox extra", "wrong argument count"},
		{"person without key", "mcp_sandbox {\n\tperson alice\n}", "person takes a name and a key"},
		{"person limit unknown", "mcp_sandbox {\n\tperson alice k {\n\t\tdisk 1g\n\t}\n}", "person alice: unrecognized subdirective disk"},
		{"person bad cpus", "mcp_sandbox {\n\tperson alice k {\n\t\tcpus -1\n\t}\n}", `cpus: "-1" is not a positive number`},
		{"bad max_sandboxes", "mcp_sandbox {\n\tmax_sandboxes 0\n}", "max_sandboxes: must be at least 1"},
		{"engine without address", "mcp_sandbox {\n\tengine big\n}", "engine takes a name and an address"},
		{"engine setting", "mcp_sandbox {\n\tengine big tcp://h:2376 {\n\t\ttls_verify on\n\t}\n}", "engine big: unrecognized setting tls_verify"},
		{"bad idle_stop", "mcp_sandbox {\n\tidle_stop later\n}", `idle_stop: "later" is not a duration`},
		{"egress unknown", "mcp_sandbox {\n\tegress {\n\t\tallowed x.com\n\t}\n}", "unrecognized egress subdirective allowed"},
		{"egress empty allow", "mcp_sandbox {\n\tegress {\n\t\tallow\n\t}\n}", "egress allow needs at least one host"},
		{"egress host", "mcp_sandbox {\n\tegress {\n\t\thost a.example\n\t}\n}", "egress host takes a name and an address"},
		{"egress host twice", "mcp_sandbox {\n\tegress {\n\t\thost a.example 10.0.0.1\n\t\thost a.example 10.0.0.2\n\t}\n}", "mapped twice"},
		{"egress credential", "mcp_sandbox {\n\tegress {\n\t\tcredential https://a.example token x\n\t}\n}", "egress credential takes"},
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

// TestProvisionErrors checks configurations that parse but cannot work: they fail at
// provision time (as `caddy validate` and `caddy run` do, without touching Docker) with
// a message that says what to do.
func TestProvisionErrors(t *testing.T) {
	t.Setenv("MCP_SANDBOX_TEST_EMPTY", "")
	t.Setenv("MCP_SANDBOX_TEST_SECRET", "Bearer s3cret")
	const key = "a-long-enough-test-key-0123456789"
	for _, tc := range []struct{ name, sites, want string }{
		{"missing key", "a.localhost {\n\tmcp_sandbox\n}", "api_key is empty"},
		{"empty env key", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key {env.MCP_SANDBOX_TEST_EMPTY}\n\t}\n}", "api_key is empty"},
		{"short key", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key short\n\t}\n}", "shorter than 16 characters"},
		{"bad memory", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tmemory lots\n\t}\n}", "memory"},
		{"max_link_ttl below link_ttl", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tlink_ttl 2d\n\t\tmax_link_ttl 1d\n\t}\n}", "max_link_ttl (24h0m0s) must be at least link_ttl (48h0m0s)"},
		{"default_output above max_output", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tmax_output 100000\n\t\tdefault_output 150000\n\t}\n}", "default_output (150000) must be at most max_output (100000)"},
		{"default_output above the default max_output", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tdefault_output 300000\n\t}\n}", "default_output (300000) must be at most max_output (200000)"},
		{"tiny default_output", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tdefault_output 100\n\t}\n}", "default_output must be at least 1024 bytes"},
		{"public_url with path", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tpublic_url https://x.example/mcp\n\t}\n}", "must be an origin"},
		{"bad person name", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tperson Alice " + key + "-a\n\t}\n}", `person "Alice": a name is 1 to 32 lower-case letters`},
		{"long person name", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tperson " + strings.Repeat("a", 33) + " " + key + "-a\n\t}\n}", "a name is 1 to 32"},
		{"person twice", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tperson alice " + key + "-a\n\t\tperson alice " + key + "-b\n\t}\n}", "person alice is configured twice"},
		{"person empty key", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tperson alice {env.MCP_SANDBOX_TEST_EMPTY}\n\t}\n}", "person alice: the key is empty"},
		{"person short key", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tperson alice short\n\t}\n}", "person alice: the key is shorter than 16 characters"},
		{"person with the api_key", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tperson alice " + key + "\n\t}\n}", "person alice: the key is the api_key"},
		{"two people, one key", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tperson alice " + key + "-a\n\t\tperson bob " + key + "-a\n\t}\n}", "person bob: the key is also person alice's"},
		{"person bad memory", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tperson alice " + key + "-a {\n\t\t\tmemory lots\n\t\t}\n\t}\n}", "person alice: memory"},
		{"person egress without the site's", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tperson alice " + key + "-a {\n\t\t\tegress {\n\t\t\t\tallow a.example\n\t\t\t}\n\t\t}\n\t}\n}", "person alice: egress needs the site's egress block"},
		{"person credential for a host not allowed", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tegress {\n\t\t\tallow a.example\n\t\t}\n\t\tperson alice " + key + "-a {\n\t\t\tegress {\n\t\t\t\tcredential https://b.example header Authorization x\n\t\t\t}\n\t\t}\n\t}\n}", "person alice: egress: credential https://b.example: b.example:443 is not allowed"},
		{"person trust_ca missing", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tegress {\n\t\t\tallow a.example\n\t\t}\n\t\tperson alice " + key + "-a {\n\t\t\tegress {\n\t\t\t\ttrust_ca /nonexistent/alice.pem\n\t\t\t}\n\t\t}\n\t}\n}", "person alice: egress: trust_ca: open /nonexistent/alice.pem"},
		{"idle_stop below 1s", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tidle_stop 500ms\n\t}\n}", "idle_stop must be at least 1s"},
		{"engine named twice", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tengine a unix:///x.sock\n\t\tengine a unix:///y.sock\n\t}\n}", `engine "a" is named twice`},
		{"engine name", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tengine Big unix:///x.sock\n\t}\n}", `engine "Big": a name is 1 to 32`},
		{"engine address", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tengine a ftp://x\n\t}\n}", `engine a: address "ftp://x"`},
		{"TLS on a socket", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tengine a unix:///x.sock {\n\t\t\ttls_ca /ca.pem\n\t\t}\n\t}\n}", "engine a: TLS needs a tcp:// address"},
		{"TLS without CA", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tengine a tcp://h:2376 {\n\t\t\ttls_cert /c.pem\n\t\t\ttls_key /k.pem\n\t\t}\n\t}\n}", "engine a: tls_ca is missing"},
		{"TLS cert without key", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tengine a tcp://h:2376 {\n\t\t\ttls_ca /ca.pem\n\t\t\ttls_cert /c.pem\n\t\t}\n\t}\n}", "engine a: tls_cert and tls_key go together"},
		{"TLS files missing", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tengine a tcp://h:2376 {\n\t\t\ttls_ca /nonexistent/ca.pem\n\t\t}\n\t}\n}", "creating Docker client for engine a (tcp://h:2376)"},
		{"egress with a network", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tnetwork bridge\n\t\tegress {\n\t\t\tallow a.example\n\t\t}\n\t}\n}", "network bridge and egress exclude each other"},
		{"egress odd wildcard", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tegress {\n\t\t\tallow a.*.example\n\t\t}\n\t}\n}", "egress: allow a.*.example: a wildcard is allowed only as the whole first label"},
		{"egress private address", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tegress {\n\t\t\tallow 10.0.0.5\n\t\t}\n\t}\n}", "host NAME 10.0.0.5 and allow NAME"},
		{"egress credential for a host not allowed", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tegress {\n\t\t\tallow a.example\n\t\t\tcredential https://b.example header Authorization {env.MCP_SANDBOX_TEST_SECRET}\n\t\t}\n\t}\n}", "credential https://b.example: b.example:443 is not allowed"},
		{"egress empty credential", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tegress {\n\t\t\tallow a.example\n\t\t\tcredential https://a.example header Authorization {env.MCP_SANDBOX_TEST_EMPTY}\n\t\t}\n\t}\n}", "the value is empty"},
		{"egress trust_ca missing", "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tegress {\n\t\t\tallow a.example\n\t\t\ttrust_ca /nonexistent/ca.pem\n\t\t}\n\t}\n}", "egress: trust_ca: open /nonexistent/ca.pem"},
		{"same container, different settings",
			"a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tmemory 1g\n\t}\n}\nb.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tmemory 2g\n\t}\n}",
			`container "mcp-sandbox-persistent" is configured twice with different settings`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cf := "{\n\tadmin off\n\tstorage file_system " + t.TempDir() + "\n}\n" + tc.sites + "\n"
			cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			err = caddy.Validate(mustConfig(t, cfg))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// The same container with the same settings on two sites is fine.
	ok := "{\n\tadmin off\n\tstorage file_system " + t.TempDir() + "\n}\na.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t}\n}\nb.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t}\n}\n"
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(ok), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(mustConfig(t, cfg)); err != nil {
		t.Fatalf("two sites sharing a container: %v", err)
	}
}

func mustConfig(t *testing.T, raw []byte) *caddy.Config {
	t.Helper()
	var cfg caddy.Config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

// TestAgentSwitch: `agent off` reaches the sandbox as NoAgent; on, or absent, keeps the
// agent.
func TestAgentSwitch(t *testing.T) {
	for _, tc := range []struct {
		line    string
		noAgent bool
	}{{"", false}, {"agent on", false}, {"agent off", true}} {
		cf := "localhost {\nmcp_sandbox {\n\tapi_key 0123456789abcdef0123\n\t" + tc.line + "\n}\n}\n"
		cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Apps struct {
				HTTP struct {
					Servers map[string]struct {
						Routes []struct {
							Handle []struct {
								Routes []struct {
									Handle []json.RawMessage
								}
							}
						}
					}
				}
			}
		}
		if err := json.Unmarshal(cfg, &doc); err != nil {
			t.Fatal(err)
		}
		var h Handler
		if err := json.Unmarshal(doc.Apps.HTTP.Servers["srv0"].Routes[0].Handle[0].Routes[0].Handle[0], &h); err != nil {
			t.Fatal(err)
		}
		sc, err := h.SandboxConfig()
		if err != nil || sc.NoAgent != tc.noAgent {
			t.Errorf("%q: NoAgent %v (%v), want %v", tc.line, sc.NoAgent, err, tc.noAgent)
		}
	}
}

// TestPreviewConfigErrors: malformed preview settings fail when adapting; settings that
// parse but would share an origin (or cookies) with the site fail at provision time,
// without Docker.
func TestPreviewConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"previews without domain", "mcp_sandbox {\n\tpreviews\n}", "previews needs a value"},
		{"bad auth switch", "mcp_sandbox {\n\tpreview_auth maybe\n}", "preview_auth: want on or off"},
		{"bad ttl", "mcp_sandbox {\n\tpreview_ttl soon\n}", `preview_ttl: "soon" is not a duration`},
		{"duplicate previews", "mcp_sandbox {\n\tpreviews a.example\n\tpreviews b.example\n}", "duplicate subdirective previews"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cf := "localhost {\n" + tc.body + "\n}\n"
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	cf := "{\n\ton_demand_tls {\n\t\tpermission mcp_sandbox extra\n\t}\n}\nlocalhost {\n\trespond ok\n}\n"
	if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil); err == nil {
		t.Error("permission mcp_sandbox with an argument was accepted")
	}

	const key = "a-long-enough-test-key-0123456789"
	site := func(lines string) string {
		return "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n" + lines + "\t}\n}"
	}
	for _, tc := range []struct{ name, sites, want string }{
		{"url as domain", site("\t\tpreviews https://p.example.com\n"), "must be a bare domain"},
		{"ip", site("\t\tpreviews 192.0.2.1\n"), "is an IP address"},
		{"wildcard", site("\t\tpreviews *.p.example.com\n"), "must be a bare domain"},
		{"same host as site", site("\t\tpublic_url https://sandbox.example.com\n\t\tpreviews sandbox.example.com\n"), "is the site's own host"},
		{"site under previews", site("\t\tpublic_url https://sandbox.example.com\n\t\tpreviews example.com\n"), "lies under the previews domain"},
		{"duplicate ttl", site("\t\tpreviews p.example.com\n\t\tpreview_ttl 0s\n\t\tpreview_ttl 1s\n"), "duplicate subdirective preview_ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cf := "{\n\tadmin off\n\tstorage file_system " + t.TempDir() + "\n}\n" + tc.sites + "\n"
			cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
			if err == nil {
				err = caddy.Validate(mustConfig(t, cfg))
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// A separate domain, and localhost for local use, are fine.
	for _, lines := range []string{
		"\t\tpublic_url https://sandbox.example.com\n\t\tpreviews sandbox-previews.example.net\n",
		"\t\tpreviews localhost\n",
	} {
		cf := "{\n\tadmin off\n\tstorage file_system " + t.TempDir() + "\n}\n" + site(lines) + "\n"
		cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := caddy.Validate(mustConfig(t, cfg)); err != nil {
			t.Errorf("%q: %v", lines, err)
		}
	}
}
