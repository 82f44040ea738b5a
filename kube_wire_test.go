package mcpsandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	_ "github.com/mcp-sandbox/caddy-mcp-sandbox/engines/kubernetes" // the kubernetes engine kind
)

// TestKubernetesEngineProvisions: a kubernetes engine line provisions without asking
// the API server (its kubeconfig names 127.0.0.1:1, where nothing listens); docker_host
// beside it, or a kubeconfig that is not there, fails at provision time saying what to
// do; its sandboxes get no agent socket directory (the pods share no files with Caddy).
func TestKubernetesEngineProvisions(t *testing.T) {
	const key = "a-long-enough-test-key-0123456789"
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	doc := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n" +
		"users:\n- name: u\n  user: {token: x}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n"
	if err := os.WriteFile(kc, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	site := func(kubeconfig string) string {
		return "a.localhost {\n\tmcp_sandbox {\n\t\tapi_key " + key + "\n\t\tperson alice " + key + "-a\n" +
			"\t\tengine cluster kubernetes {\n\t\t\tkubeconfig " + kubeconfig + "\n\t\t\tnamespace mcp-wiring-test\n\t\t}\n\t}\n}\n"
	}
	validate := func(global, sites string) error {
		cf := "{\n\tadmin off\n\tstorage file_system " + t.TempDir() + "\n" + global + "}\n" + sites
		cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
		if err != nil {
			t.Fatalf("adapt: %v", err)
		}
		return caddy.Validate(mustConfig(t, cfg))
	}
	if err := validate("", site(kc)); err != nil {
		t.Fatalf("a kubernetes engine whose API server does not answer: %v (provisioning must not ask it)", err)
	}
	err := validate("\tmcp_sandbox {\n\t\tdocker_host unix:///var/run/docker.sock\n\t}\n", site(kc))
	if err == nil || !strings.Contains(err.Error(), "engine cluster is a kubernetes engine, which takes the place of Docker: remove docker_host") {
		t.Errorf("docker_host with a kubernetes engine: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "absent")
	if err := validate("", site(missing)); err == nil || !strings.Contains(err.Error(), "kubernetes engine cluster: reading kubeconfig "+missing) {
		t.Errorf("a kubeconfig that is not there: %v", err)
	}

	var h Handler
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("mcp_sandbox {\n\tapi_key " + key + "\n\tengine cluster kubernetes\n}")); err != nil {
		t.Fatal(err)
	}
	if sc, err := h.SandboxConfig(); err != nil || sc.AgentSocketDir != "" {
		t.Errorf("kubernetes engine: AgentSocketDir %q (%v), want none", sc.AgentSocketDir, err)
	}
	var d Handler
	if err := d.UnmarshalCaddyfile(caddyfile.NewTestDispenser("mcp_sandbox {\n\tapi_key " + key + "\n}")); err != nil {
		t.Fatal(err)
	}
	if sc, _ := d.SandboxConfig(); sc.AgentSocketDir == "" {
		t.Error("default engine: no AgentSocketDir")
	}
}
