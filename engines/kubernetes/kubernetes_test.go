package kubernetes

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
)

// TestRegistered: the package is a Caddy module, and with it an engine line of kind
// kubernetes is checked by it (its namespace rule) rather than refused.
func TestRegistered(t *testing.T) {
	if _, err := caddy.GetModule("mcp_sandbox.engines.kubernetes"); err != nil {
		t.Fatal(err)
	}
	ok := fleet.Engine{Name: "k", Kind: fleet.KindKubernetes, Kubernetes: fleet.KubeEngine{Namespace: "sandboxes"}}
	if err := fleet.ValidateEngines([]fleet.Engine{ok}); err != nil {
		t.Fatal(err)
	}
	bad := ok
	bad.Kubernetes.Namespace = "Big_NS"
	if err := fleet.ValidateEngines([]fleet.Engine{bad}); err == nil || !strings.Contains(err.Error(), `namespace "Big_NS"`) {
		t.Errorf("a bad namespace: %v", err)
	}
}

// TestConfigKeepsEverySetting: every setting of an engine line reaches kube.Config.
func TestConfigKeepsEverySetting(t *testing.T) {
	e := fleet.Engine{Name: "k", Kind: fleet.KindKubernetes, Kubernetes: fleet.KubeEngine{
		Kubeconfig: "/k", Context: "c", Namespace: "n", StorageClass: "s", VolumeSize: 1 << 30,
		EphemeralStorage: 2 << 30, ImagePullPolicy: "Never"}}
	c := Config(e)
	k := e.Kubernetes
	if c.Name != e.Name || c.Kubeconfig != k.Kubeconfig || c.Context != k.Context || c.Namespace != k.Namespace ||
		c.StorageClass != k.StorageClass || c.VolumeSize != k.VolumeSize || c.EphemeralStorage != k.EphemeralStorage ||
		c.PullPolicy != k.ImagePullPolicy {
		t.Errorf("kube.Config %+v lost a setting of %+v", c, k)
	}
}

// TestPluginAloneHasNoClientGo: the plugin's own package, as an xcaddy build of it
// alone includes it, depends on no k8s.io package; this one does.
func TestPluginAloneHasNoClientGo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs go list")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	deps := func(pkg string) []string {
		cmd := exec.Command("go", "list", "-deps", pkg)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		var k8s []string
		for _, p := range strings.Fields(string(out)) {
			if strings.HasPrefix(p, "k8s.io/") {
				k8s = append(k8s, p)
			}
		}
		return k8s
	}
	if k8s := deps("github.com/mcp-sandbox/caddy-mcp-sandbox"); len(k8s) != 0 {
		t.Errorf("the plugin alone depends on %d k8s.io packages, e.g. %v", len(k8s), k8s[:min(3, len(k8s))])
	}
	if k8s := deps("github.com/mcp-sandbox/caddy-mcp-sandbox/engines/kubernetes"); len(k8s) == 0 {
		t.Error("the Kubernetes engine's package depends on no k8s.io package: the check above proves nothing")
	}
}
