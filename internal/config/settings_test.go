package config

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestSetDefaults: empty settings get the documented defaults, set ones are kept, and
// default_output follows a smaller max_output.
func TestSetDefaults(t *testing.T) {
	var s Settings
	s.SetDefaults()
	if s.LinkTTL != caddy.Duration(DefaultLinkTTL) || s.MaxLinkTTL != caddy.Duration(DefaultMaxLinkTTL) ||
		s.Keepalive != caddy.Duration(DefaultKeepalive) || s.YieldAfter == nil || *s.YieldAfter != caddy.Duration(DefaultYield) ||
		s.MaxJobs != sandbox.DefaultMaxJobs || s.MaxTaskTTL != caddy.Duration(DefaultMaxTaskTTL) ||
		s.MaxTasks != DefaultMaxTasks || s.MaxTasksTotal != DefaultTasksTotal || s.DefaultOutput != DefaultOutput {
		t.Fatalf("defaults: %+v", s)
	}

	off := caddy.Duration(0)
	s = Settings{LinkTTL: caddy.Duration(10 * 24 * time.Hour), YieldAfter: &off, MaxTasks: 5000, MaxOutput: 5000, MaxCheckpoints: 2}
	s.SetDefaults()
	if s.MaxLinkTTL != s.LinkTTL || *s.YieldAfter != 0 || s.MaxTasksTotal != 5000 || s.DefaultOutput != 5000 || s.MaxCheckpoints != 2 {
		t.Fatalf("defaults next to set values: %+v", s)
	}

	s = Settings{Memory: "lots"}
	s.SetDefaults()
	if s.DefaultOutput != 0 {
		t.Fatalf("default_output %d with a sandbox that cannot be configured; want it left for Validate", s.DefaultOutput)
	}
}

// TestResolve: placeholders of the keys, public_url and engines are resolved and
// trimmed; the rest is left for later (egress values at each use).
func TestResolve(t *testing.T) {
	t.Setenv("MCP_SANDBOX_TEST_KEY", " 0123456789abcdef-key\n")
	t.Setenv("MCP_SANDBOX_TEST_HOST", "tcp://127.0.0.1:2376")
	s := Settings{
		APIKey:    "{env.MCP_SANDBOX_TEST_KEY}",
		PublicURL: "https://{env.MCP_SANDBOX_TEST_MISSING}x.example",
		People:    []Person{{Name: "alice", Key: "{env.MCP_SANDBOX_TEST_KEY}-a"}},
		Engines:   []fleet.Engine{{Name: "a", Host: "{env.MCP_SANDBOX_TEST_HOST}", TLSCA: " /ca.pem "}},
		Egress:    &EgressConfig{Credentials: []EgressCredential{{Prefix: "https://a.example", Header: "X", Value: "{env.MCP_SANDBOX_TEST_KEY}"}}},
	}
	s.Resolve()
	if s.APIKey != "0123456789abcdef-key" || s.PublicURL != "https://x.example" || s.People[0].Key != "0123456789abcdef-key\n-a" ||
		s.Engines[0].Host != "tcp://127.0.0.1:2376" || s.Engines[0].TLSCA != "/ca.pem" {
		t.Fatalf("resolved: %+v", s)
	}
	if v := s.Egress.Credentials[0].Value; v != "{env.MCP_SANDBOX_TEST_KEY}" {
		t.Fatalf("egress value resolved at provision time: %q", v)
	}
}

// TestSandboxConfigFor: a person's sandbox has their name and limits on top of the
// site's; egress takes every sandbox off the network.
func TestSandboxConfigFor(t *testing.T) {
	s := Settings{Container: "box", Volume: "data", Memory: "2g", CPUs: 2, PidsLimit: 300,
		People: []Person{{Name: "alice", Memory: "1g", PidsLimit: 100}, {Name: "bob"}}}
	op, err := s.SandboxConfigFor("")
	if err != nil || op.Container != "box" || op.Volume != "data" || op.Memory != 2<<30 || op.CPUs != 2 || op.PidsLimit != 300 {
		t.Fatalf("the operator's: %+v %v", op, err)
	}
	a, err := s.SandboxConfigFor("alice")
	if err != nil || a.Container != "box-alice" || a.Volume != "data-alice" || a.Memory != 1<<30 || a.CPUs != 2 || a.PidsLimit != 100 {
		t.Fatalf("alice's: %+v %v", a, err)
	}
	if _, err := s.SandboxConfigFor("carol"); err == nil || !strings.Contains(err.Error(), `no person "carol" is configured`) {
		t.Fatalf("carol's: %v", err)
	}
	s.Egress = &EgressConfig{Allow: []string{"a.example"}}
	b, err := s.SandboxConfigFor("bob")
	if err != nil || b.NetworkMode != "none" || b.ProxyPort != EgressPort || b.CABundle != EgressBundle {
		t.Fatalf("bob's with egress: %+v %v", b, err)
	}
	if keys := (&Settings{}).PeopleKeys(); keys != nil {
		t.Fatalf("keys without people: %v", keys)
	}
}

// TestEgressOfPerson: a person's rules and trust_ca files are the site's with theirs
// added; Basic credentials become an Authorization header.
func TestEgressOfPerson(t *testing.T) {
	s := Settings{
		Egress: &EgressConfig{Allow: []string{"a.example"}, TrustCA: []string{"/site.pem"}},
		People: []Person{{Name: "alice", Egress: &EgressConfig{
			Allow: []string{"b.example"}, TrustCA: []string{"/alice.pem"},
			Credentials: []EgressCredential{{Prefix: "https://b.example", User: "u", Password: "p"}},
		}}, {Name: "bob"}},
	}
	a := s.EgressRules("alice")
	if strings.Join(a.Allow, " ") != "a.example b.example" || len(a.Credentials) != 1 ||
		a.Credentials[0].Header != "Authorization" || a.Credentials[0].Value != "Basic dTpw" {
		t.Fatalf("alice's rules: %+v", a)
	}
	if b := s.EgressRules("bob"); strings.Join(b.Allow, " ") != "a.example" || len(b.Credentials) != 0 {
		t.Fatalf("bob's rules: %+v", b)
	}
	if got := strings.Join(s.EgressTrust("alice"), " "); got != "/site.pem /alice.pem" {
		t.Fatalf("alice's trust: %s", got)
	}
	if got := strings.Join(s.EgressTrust("bob"), " "); got != "/site.pem" || len(s.Egress.TrustCA) != 1 {
		t.Fatalf("bob's trust: %s (the site's: %v)", got, s.Egress.TrustCA)
	}
}

// TestMaxCheckpoints: the Caddyfile takes a number of at least 1, JSON may leave it
// out (the sandbox's default) but not make it negative.
func TestMaxCheckpoints(t *testing.T) {
	var s Settings
	if err := s.UnmarshalCaddyfile(caddyfile.NewTestDispenser("mcp_sandbox {\n max_checkpoints 3\n}")); err != nil || s.MaxCheckpoints != 3 {
		t.Fatalf("max_checkpoints 3: %d %v", s.MaxCheckpoints, err)
	}
	err := new(Settings).UnmarshalCaddyfile(caddyfile.NewTestDispenser("mcp_sandbox {\n max_checkpoints 0\n}"))
	if err == nil || !strings.Contains(err.Error(), "max_checkpoints: must be at least 1") {
		t.Fatalf("max_checkpoints 0: %v", err)
	}
	s = Settings{APIKey: "0123456789abcdef-key", MaxCheckpoints: -1}
	if err := s.Validate(); err == nil || err.Error() != "max_checkpoints must be at least 1" {
		t.Fatalf("max_checkpoints -1: %v", err)
	}
	s.MaxCheckpoints = 0
	if err := s.Validate(); err != nil {
		t.Fatalf("max_checkpoints left out: %v", err)
	}
}

// TestMaxCheckpointBytes: the Caddyfile takes a size, which reaches the sandboxes;
// left out, they get the sandbox's default; not a size is refused saying what is.
func TestMaxCheckpointBytes(t *testing.T) {
	var s Settings
	if err := s.UnmarshalCaddyfile(caddyfile.NewTestDispenser("mcp_sandbox {\n max_checkpoint_bytes 2GiB\n}")); err != nil || s.MaxCheckpointBytes != 2<<30 {
		t.Fatalf("max_checkpoint_bytes 2GiB: %d %v", s.MaxCheckpointBytes, err)
	}
	s.APIKey = "0123456789abcdef-key"
	cfg, err := s.SandboxConfig()
	if err != nil || cfg.MaxCheckpointBytes != 2<<30 {
		t.Fatalf("the sandbox's bound: %d %v", cfg.MaxCheckpointBytes, err)
	}
	if cfg, err := (&Settings{APIKey: s.APIKey}).SandboxConfig(); err != nil || cfg.MaxCheckpointBytes != sandbox.DefaultMaxCheckpointBytes {
		t.Fatalf("left out: %d %v", cfg.MaxCheckpointBytes, err)
	}
	err = new(Settings).UnmarshalCaddyfile(caddyfile.NewTestDispenser("mcp_sandbox {\n max_checkpoint_bytes lots\n}"))
	if err == nil || !strings.Contains(err.Error(), "like 10GiB") {
		t.Fatalf("max_checkpoint_bytes lots: %v", err)
	}
}

// TestRuntime: `runtime` site-wide and in a person block reaches each sandbox's
// configuration, a person's overriding the site's; a name Docker could not know is
// refused under the setting's name.
func TestRuntime(t *testing.T) {
	var s Settings
	err := s.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`mcp_sandbox {
		api_key 0123456789abcdef-key
		runtime runc
		person alice 0123456789abcdef-alice {
			runtime runsc
		}
		person bob 0123456789abcdef-bob
	}`))
	if err != nil {
		t.Fatal(err)
	}
	for person, want := range map[string]string{"": "runc", "alice": "runsc", "bob": "runc"} {
		if cfg, err := s.SandboxConfigFor(person); err != nil || cfg.Runtime != want {
			t.Errorf("person %q: runtime %q (%v), want %q", person, cfg.Runtime, err, want)
		}
	}
	s.Runtime = ""
	if cfg, err := s.SandboxConfigFor("bob"); err != nil || cfg.Runtime != "" {
		t.Errorf("no runtime anywhere: %q (%v), want the engine's default", cfg.Runtime, err)
	}
	s.People[0].Runtime = "run/sc"
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), `person alice: invalid sandbox configuration: runtime "run/sc" is not a runtime's name`) {
		t.Errorf("a bad name: %v", err)
	}
	err = new(Settings).UnmarshalCaddyfile(caddyfile.NewTestDispenser("mcp_sandbox {\n runtime\n}"))
	if err == nil || !strings.Contains(err.Error(), "runtime needs a value") {
		t.Errorf("runtime without a name: %v", err)
	}
}

// TestKeepProcesses: `keep_processes` site-wide and per person reaches each sandbox's
// configuration, a person's overriding the site's; it is refused without a runtime
// that can save memory, on a Kubernetes engine, and with a value other than on or off.
func TestKeepProcesses(t *testing.T) {
	var s Settings
	err := s.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`mcp_sandbox {
		api_key 0123456789abcdef-key
		runtime runsc
		keep_processes on
		person alice 0123456789abcdef-alice {
			keep_processes off
		}
		person bob 0123456789abcdef-bob
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	for person, want := range map[string]bool{"": true, "alice": false, "bob": true} {
		if cfg, err := s.SandboxConfigFor(person); err != nil || cfg.KeepProcesses != want {
			t.Errorf("person %q: keep_processes %v (%v), want %v", person, cfg.KeepProcesses, err, want)
		}
	}
	s.Runtime = ""
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "keep_processes needs a runtime that can save a sandbox's memory: set `runtime runsc`") {
		t.Errorf("keep_processes without a runtime: %v", err)
	}
	s.Runtime, s.KeepProcesses = "runsc", false
	on := true
	s.People[1].KeepProcesses = &on
	s.Engines = []fleet.Engine{{Name: "k", Kind: "kubernetes"}}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "keep_processes: a Kubernetes engine cannot save a pod's memory") {
		t.Errorf("keep_processes on Kubernetes: %v", err)
	}
	err = new(Settings).UnmarshalCaddyfile(caddyfile.NewTestDispenser("mcp_sandbox {\n keep_processes yes\n}"))
	if err == nil || !strings.Contains(err.Error(), `keep_processes: want on or off, got "yes"`) {
		t.Errorf("keep_processes yes: %v", err)
	}
}
