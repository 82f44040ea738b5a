package config

import (
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
)

// TestResolveKube: a kubernetes engine's file and names take placeholders, resolved
// and trimmed like a Docker engine's.
func TestResolveKube(t *testing.T) {
	t.Setenv("MCP_SANDBOX_TEST_KUBECONFIG", " /etc/kube/config\n")
	t.Setenv("MCP_SANDBOX_TEST_NS", "sandboxes")
	s := Settings{Engines: []fleet.Engine{{Name: "k", Kind: fleet.KindKubernetes, Kubernetes: fleet.KubeEngine{
		Kubeconfig: "{env.MCP_SANDBOX_TEST_KUBECONFIG}", Namespace: "{env.MCP_SANDBOX_TEST_NS}", Context: "{env.MCP_SANDBOX_TEST_MISSING}ctx"}}}}
	s.Resolve()
	if k := s.Engines[0].Kubernetes; k.Kubeconfig != "/etc/kube/config" || k.Namespace != "sandboxes" || k.Context != "ctx" {
		t.Fatalf("resolved: %+v", k)
	}
}

// TestParseSize: Kubernetes' binary suffixes and humanize's forms; nothing else.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"10Gi": 10 << 30, "512Mi": 512 << 20, "20GiB": 20 << 30, "500MB": 500e6, "1Ti": 1 << 40, "0": -1, "big": -1, "-1Gi": -1, "": -1} {
		got, err := parseSize(in)
		if want < 0 && err == nil || want >= 0 && (err != nil || got != want) {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}
