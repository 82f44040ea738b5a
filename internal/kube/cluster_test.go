package kube_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/kube"
)

// testImage is the image the development cluster has imported.
const testImage = "k8s.local/code-sandbox-test:latest"

// cluster is a namespace of its own on the cluster MCP_SANDBOX_KUBECONFIG names,
// deleted when the test ends, an admin client and the kubeconfig's path.
type cluster struct {
	admin      kubernetes.Interface
	ns         string
	kubeconfig string
}

func needCluster(t *testing.T) cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Kubernetes cluster; skipped with -short")
	}
	path := os.Getenv("MCP_SANDBOX_KUBECONFIG")
	if path == "" {
		t.Skip("needs a Kubernetes cluster: set MCP_SANDBOX_KUBECONFIG to its kubeconfig (make exports it)")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	admin, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "lifecycle-" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		zero := int64(0)
		_ = admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		if err := admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting namespace %s: %v", ns, err)
		}
	})
	return cluster{admin: admin, ns: ns, kubeconfig: path}
}

func (cl cluster) engine(t *testing.T, pull string) *kube.Client {
	t.Helper()
	c, err := kube.New(kube.Config{Name: "test", Kubeconfig: cl.kubeconfig, Namespace: cl.ns, PullPolicy: pull, VolumeSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const keepAlive = `trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done`

func sandboxSpec(labels map[string]string) boxapi.BoxSpec {
	return boxapi.BoxSpec{Image: testImage, Hostname: "sandbox", User: "root", WorkingDir: "/sandbox",
		Entrypoint: []string{"bash", "-c", keepAlive}, Cmd: []string{"mcp-sandbox"}, Labels: labels}
}

func TestLifecycle(t *testing.T) {
	cl := needCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c := cl.engine(t, "IfNotPresent")
	pods, cms, pvcs := cl.admin.CoreV1().Pods(cl.ns), cl.admin.CoreV1().ConfigMaps(cl.ns), cl.admin.CoreV1().PersistentVolumeClaims(cl.ns)

	if err := c.CreateVolume(ctx, "vol-ann", map[string]string{"mcp-sandbox.managed": "true"}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateVolume(ctx, "vol-ann", nil); err != nil {
		t.Fatalf("creating an existing volume: %v", err)
	}
	if again, err := c.InspectVolume(ctx, "vol-ann"); err != nil || again.Labels["mcp-sandbox.managed"] != "true" {
		t.Fatalf("an existing volume is left as it was: %v %+v", err, again)
	}
	pvc0, err := pvcs.Get(ctx, "vol-ann", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	labels := map[string]string{"mcp-sandbox.managed": "true", "mcp-sandbox.volume": "vol-ann", "mcp-sandbox.person": "Ann Lee!"}
	sp := sandboxSpec(labels)
	sp.Mounts = []boxapi.Mount{{Volume: "vol-ann", Source: "vol-ann", Destination: "/sandbox"}}
	sp.NetworkMode = "none"
	sp.Limits = boxapi.Limits{Memory: 128 << 20, MemorySwap: 128 << 20, NanoCPUs: 500000000, PidsLimit: 256}
	sp.CapDrop, sp.SecurityOpt = []string{"NET_RAW"}, []string{"no-new-privileges"}
	sp.Sysctls = map[string]string{"net.ipv4.ping_group_range": "0 2147483647"}
	sp.RestartPolicy = "unless-stopped"
	id, _, err := c.CreateBox(ctx, "box-ann", sp)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CreateBox(ctx, "box-ann", sp); !cerrdefs.IsConflict(err) {
		t.Fatalf("creating it twice: %v, want a conflict", err)
	}
	info, err := c.InspectBox(ctx, id)
	if err != nil || info.Name != "box-ann" || info.State.Running || info.State.Status != "exited" {
		t.Fatalf("inspect by ID before start: %v %+v", err, info)
	}
	if info.Node != "" {
		t.Errorf("a container without a pod has a node: %q", info.Node)
	}
	if sp := info.Spec; sp.Labels["mcp-sandbox.person"] != "Ann Lee!" || sp.Limits.NanoCPUs != 500000000 || sp.NetworkMode != "none" ||
		len(sp.CapDrop) != 1 || sp.Limits.PidsLimit != 256 || len(sp.Mounts) != 1 || sp.Mounts[0].Volume != "vol-ann" {
		t.Errorf("inspect does not give back the settings: %+v", sp)
	}

	start := func(what string) *v1.Pod {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		t0 := time.Now()
		if err := c.StartBox(sctx, "box-ann"); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s took %v", what, time.Since(t0).Round(time.Millisecond))
		info, err := c.InspectBox(ctx, "box-ann")
		if err != nil || !info.State.Running || info.State.Status != "running" || info.State.StartedAt.IsZero() {
			t.Fatalf("%s: inspect: %v %+v", what, err, info.State)
		}
		node, err := c.NodeName(ctx, "box-ann")
		if err != nil || node == "" {
			t.Fatalf("%s: node name %q: %v", what, node, err)
		}
		p, err := pods.Get(ctx, "box-ann", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != node || info.Node != node {
			t.Errorf("node %q, the pod's %q, inspect's %q", node, p.Spec.NodeName, info.Node)
		}
		return p
	}
	p1 := start("first start")
	if err := c.StartBox(ctx, "box-ann"); err != nil {
		t.Fatalf("starting a running container is a no-op: %v", err)
	}
	if len(p1.Spec.Volumes) != 1 || p1.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "vol-ann" {
		t.Fatalf("pod volumes %+v", p1.Spec.Volumes)
	}
	sc := p1.Spec.Containers[0].SecurityContext
	if *sc.Privileged || *sc.RunAsUser != 0 || sc.Capabilities.Drop[0] != "NET_RAW" || *p1.Spec.AutomountServiceAccountToken {
		t.Errorf("security context %+v", sc)
	}
	if p1.Labels["app.kubernetes.io/managed-by"] != "caddy-mcp-sandbox" || p1.Labels["mcp-sandbox.container"] != "box-ann" {
		t.Errorf("pod labels %v", p1.Labels)
	}
	np, err := cl.admin.NetworkingV1().NetworkPolicies(cl.ns).Get(ctx, "box-ann-no-network", metav1.GetOptions{})
	if err != nil || np.Spec.PodSelector.MatchLabels["mcp-sandbox.pod"] != "box-ann" || p1.Labels["mcp-sandbox.pod"] != "box-ann" {
		t.Errorf("network policy of a container without network: %v", err)
	}

	// Listing: by label (valid on the API server, invalid matched here).
	for _, label := range []string{"mcp-sandbox.volume", "mcp-sandbox.person=Ann Lee!", ""} {
		list, err := c.ListBoxes(ctx, label)
		if err != nil || len(list) != 1 || list[0].Name != "box-ann" || list[0].Status != "running" || list[0].ID != id {
			t.Errorf("list %q: %v %+v", label, err, list)
		}
	}
	if list, err := c.ListBoxes(ctx, "mcp-sandbox.person=Bob"); err != nil || len(list) != 0 {
		t.Errorf("list of another person: %v %+v", err, list)
	}

	// Stats: figures from the metrics API, or NotImplemented saying what is missing.
	if u, err := c.BoxUsage(ctx, "box-ann", time.Second); err != nil {
		if !cerrdefs.IsNotImplemented(err) || !strings.Contains(err.Error(), "metrics-server") {
			t.Errorf("stats: %v", err)
		}
	} else if u.Memory == 0 {
		t.Errorf("usage: %+v", u)
	}

	// Update: recorded, and applied to the running pod in place.
	warnings, err := c.UpdateBox(ctx, "box-ann", boxapi.BoxUpdate{Limits: &boxapi.Limits{Memory: 96 << 20, MemorySwap: 96 << 20, NanoCPUs: 250000000, PidsLimit: 256}})
	if err != nil || len(warnings) != 0 {
		t.Errorf("update: %v %v", err, warnings)
	}
	if p, err := pods.Get(ctx, "box-ann", metav1.GetOptions{}); err != nil || p.UID != p1.UID {
		t.Errorf("the pod after an update: %v (same pod: %v)", err, err == nil && p.UID == p1.UID)
	} else if res := p.Spec.Containers[0].Resources; res.Limits.Memory().Value() != 96<<20 || res.Requests.Cpu().MilliValue() != 250 {
		t.Errorf("the running pod was not resized: %+v", res)
	}

	if err := c.RemoveVolume(ctx, "vol-ann", false); !cerrdefs.IsConflict(err) || !strings.Contains(err.Error(), "box-ann") {
		t.Errorf("removing a volume in use: %v, want a conflict naming the container", err)
	}
	// Stop: the pod goes, the record and the claim stay.
	t0 := time.Now()
	if err := c.StopBox(ctx, "box-ann", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("stop took %v", time.Since(t0).Round(time.Millisecond))
	if _, err := pods.Get(ctx, "box-ann", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod after stop: %v", err)
	}
	if _, err := cms.Get(ctx, "box-ann", metav1.GetOptions{}); err != nil {
		t.Errorf("config map after stop: %v", err)
	}
	info, err = c.InspectBox(ctx, "box-ann")
	if err != nil || info.State.Running || info.State.Status != "exited" || info.Spec.Limits.Memory != 96<<20 {
		t.Errorf("inspect after stop: %v %+v %d", err, info.State, info.Spec.Limits.Memory)
	}
	if list, err := c.ListBoxes(ctx, ""); err != nil || len(list) != 1 || list[0].Status != "exited" {
		t.Errorf("all containers after stop: %v %+v", err, list)
	}
	if err := c.StopBox(ctx, "box-ann", 2*time.Second); err != nil {
		t.Errorf("stopping a stopped container: %v", err)
	}

	// Start again: a new pod on the same claim, with the recorded limits.
	p2 := start("second start")
	if p2.UID == p1.UID || p2.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "vol-ann" {
		t.Errorf("second pod %s (first %s) volumes %+v", p2.UID, p1.UID, p2.Spec.Volumes)
	}
	if pvc, err := pvcs.Get(ctx, "vol-ann", metav1.GetOptions{}); err != nil || pvc.UID != pvc0.UID || pvc.Status.Phase != v1.ClaimBound {
		t.Errorf("claim after restart: %v (same claim: %v)", err, err == nil && pvc.UID == pvc0.UID)
	}
	if m := p2.Spec.Containers[0].Resources.Limits[v1.ResourceMemory]; m.Value() != 96<<20 {
		t.Errorf("second pod's memory limit %s, want the updated 96Mi", m.String())
	}

	// Remove: pod, policy and config map go; the claim stays until removed.
	if err := c.RemoveBox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InspectBox(ctx, "box-ann"); !cerrdefs.IsNotFound(err) {
		t.Errorf("inspect after remove: %v", err)
	}
	if _, err := pods.Get(ctx, "box-ann", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod after remove: %v", err)
	}
	if _, err := cl.admin.NetworkingV1().NetworkPolicies(cl.ns).Get(ctx, "box-ann-no-network", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("network policy after remove: %v", err)
	}
	if err := c.RemoveBox(ctx, "box-ann"); !cerrdefs.IsNotFound(err) {
		t.Errorf("removing it again: %v, want not found", err)
	}
	if err := c.RemoveVolume(ctx, "vol-ann", false); err != nil {
		t.Fatalf("removing the unused volume: %v", err)
	}
	if _, err := c.InspectVolume(ctx, "vol-ann"); !cerrdefs.IsNotFound(err) {
		t.Errorf("volume after remove: %v", err)
	}
}

func TestImageMissing(t *testing.T) {
	cl := needCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := cl.engine(t, "Never")
	sp := sandboxSpec(nil)
	sp.Image = "k8s.local/no-such-image:v1"
	if _, _, err := c.CreateBox(ctx, "box-noimage", sp); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	err := c.StartBox(ctx, "box-noimage")
	if err == nil || !strings.Contains(err.Error(), "ErrImageNeverPull") || !strings.Contains(err.Error(), sp.Image) {
		t.Fatalf("start with a missing image: %v", err)
	}
	t.Logf("failed in %v: %v", time.Since(t0).Round(time.Millisecond), err)
	if _, err := cl.admin.CoreV1().Pods(cl.ns).Get(ctx, "box-noimage", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod left after a failed start: %v", err)
	}
	info, err := c.InspectBox(ctx, "box-noimage")
	if err != nil || info.State.Running {
		t.Errorf("the container stays created: %v %+v", err, info.State)
	}
	if err := c.RemoveBox(ctx, "box-noimage"); err != nil {
		t.Errorf("remove: %v", err)
	}
}

// TestNamedNetwork: a container on a named network (Docker's bridge without
// inter-container traffic) gets a policy that lets nothing connect to its pod.
func TestNamedNetwork(t *testing.T) {
	cl := needCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := cl.engine(t, "IfNotPresent")
	nps := cl.admin.NetworkingV1().NetworkPolicies(cl.ns)
	netSpec := sandboxSpec(nil)
	netSpec.NetworkMode = "mcp-sandbox"
	if _, _, err := c.CreateBox(ctx, "box-net", netSpec); err != nil {
		t.Fatal(err)
	}
	if err := c.StartBox(ctx, "box-net"); err != nil {
		t.Fatal(err)
	}
	np, err := nps.Get(ctx, "box-net-no-ingress", metav1.GetOptions{})
	if err != nil || len(np.Spec.PolicyTypes) != 1 || np.Spec.PodSelector.MatchLabels["mcp-sandbox.pod"] != "box-net" {
		t.Fatalf("policy: %v %+v", err, np)
	}
	if _, err := nps.Get(ctx, "box-net-no-network", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a container with network got the deny-all policy: %v", err)
	}
	if err := c.RemoveBox(ctx, "box-net"); err != nil {
		t.Fatal(err)
	}
	if _, err := nps.Get(ctx, "box-net-no-ingress", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("policy after remove: %v", err)
	}
}

// TestStartFails: a pod that cannot run is given up at once, with the cause.
func TestStartFails(t *testing.T) {
	cl := needCluster(t)
	c := cl.engine(t, "IfNotPresent")
	for _, tc := range []struct {
		name string
		cfg  func(*boxapi.BoxSpec)
		want string
	}{
		{"box-unschedulable", func(sp *boxapi.BoxSpec) { sp.Limits.Memory = 1 << 50 }, "Unschedulable"},
		{"box-crashing", func(sp *boxapi.BoxSpec) { sp.Entrypoint = []string{"false"} }, "exit code 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			sp := sandboxSpec(nil)
			tc.cfg(&sp)
			if _, _, err := c.CreateBox(ctx, tc.name, sp); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			err := c.StartBox(ctx, tc.name)
			if err == nil && tc.name == "box-crashing" {
				// A kubelet that is slow to notice the exit (its relist runs every
				// second, later on a loaded node) can report the container ready past
				// the settle time: the exit must then show in the container's state.
				t.Logf("start passed in %v: the kubelet reported the exit late", time.Since(t0).Round(time.Millisecond))
				exitShows(ctx, t, c, tc.name, 1)
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || ctx.Err() != nil {
				t.Fatalf("start: %v, want an error naming %s before the deadline", err, tc.want)
			}
			t.Logf("failed in %v: %v", time.Since(t0).Round(time.Millisecond), err)
			if _, err := cl.admin.CoreV1().Pods(cl.ns).Get(ctx, tc.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("pod left after a failed start: %v", err)
			}
		})
	}
}

// exitShows waits until container name is seen exited with code.
func exitShows(ctx context.Context, t *testing.T, c *kube.Client, name string, code int) {
	t.Helper()
	for {
		info, err := c.InspectBox(ctx, name)
		if err != nil {
			t.Fatalf("inspect: %v", err)
		}
		if st := info.State; !st.Running && st.ExitCode == code {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("container %s not seen exited with code %d: %+v", name, code, info.State)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func TestForbidden(t *testing.T) {
	cl := needCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sa, err := cl.admin.CoreV1().ServiceAccounts(cl.ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "lifecycle-norights"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exp := int64(600)
	tr, err := cl.admin.CoreV1().ServiceAccounts(cl.ns).CreateToken(ctx, sa.Name, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := clientcmd.LoadFromFile(cl.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := raw.Contexts[raw.CurrentContext]
	server := raw.Clusters[cur.Cluster]
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: u, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, server.Server, caData(t, server.CertificateAuthorityData, server.CertificateAuthority), tr.Status.Token)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := kube.New(kube.Config{Name: "norights", Kubeconfig: path, Namespace: cl.ns})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.CreateBox(ctx, "box-forbidden", sandboxSpec(nil))
	if !cerrdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), `verb "create" on resource "configmaps"`) || !strings.Contains(err.Error(), cl.ns) {
		t.Errorf("create without rights: %v", err)
	}
	_, err = c.ListBoxes(ctx, "")
	if !cerrdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), `verb "list" on resource "configmaps"`) || !strings.Contains(err.Error(), "RBAC Role") {
		t.Errorf("list without rights: %v", err)
	}
	t.Logf("the error: %v", err)
}

// caData is the CA of the kubeconfig's cluster, base64-encoded for a kubeconfig.
func caData(t *testing.T, data []byte, file string) string {
	t.Helper()
	if len(data) == 0 {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("reading the cluster's CA: %v", err)
		}
		data = b
	}
	return base64.StdEncoding.EncodeToString(data)
}
