package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"sigs.k8s.io/yaml"

	_ "github.com/mcp-sandbox/caddy-mcp-sandbox/engines/kubernetes" // the kubernetes engine kind
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// People's sandboxes on a real Kubernetes cluster (the test cluster `make test` starts),
// through a real Caddy: an `engine NAME kubernetes` line, a pod and a claim per person,
// everything through the API server.

// kubeCPUs is each test pod's CPU share, requested and limited: small, so that the
// pods of several tests fit the test cluster's one node.
const kubeCPUs = "0.2"

// kubeSite is a Caddy whose only engine is the test cluster, in a namespace of its own.
type kubeSite struct {
	*testsite.Site
	ns    string
	admin *kubernetes.Clientset // the cluster's administrator, for looking
	keys  map[string]string     // by person; "" the operator's
}

// startKubeSite starts a site with the given people on the test cluster, in a fresh
// namespace that is deleted when the test ends.
func startKubeSite(t testing.TB, people []string, directives ...string) *kubeSite {
	t.Helper()
	return startKubeSiteWith(t, "", people, directives...)
}

// startKubeSiteWith is startKubeSite with more settings in the engine's block
// (settings: lines such as "ephemeral_storage 32Mi").
func startKubeSiteWith(t testing.TB, settings string, people []string, directives ...string) *kubeSite {
	t.Helper()
	_, image := testengine.Kube(t)
	s := testsite.New(t)
	// The engine signs in as a service account with exactly the Role of
	// docs/kubernetes.md: what the documentation asks an operator to grant is enough.
	ns, conf := testengine.KubeNamespace(t, documentedRole(t))
	ks := &kubeSite{Site: s, ns: ns, admin: testengine.KubeClient(t), keys: map[string]string{"": s.Key}}
	engine := fmt.Sprintf("engine cluster kubernetes {\n\t\t\tkubeconfig %s\n\t\t\tnamespace %s\n", conf, ns)
	if settings != "" {
		engine += "\t\t\t" + settings + "\n"
	}
	lines := []string{engine + "\t\t}"}
	for _, name := range people {
		ks.keys[name] = name + "-key-" + testenv.RandomHex(16)
		lines = append(lines, "person "+name+" "+ks.keys[name])
	}
	s.Start(testsite.Options{Image: image, CPUs: kubeCPUs, Address: "http://:%d", Directive: append(lines, directives...), Site: []string{testsite.MetricsRoute}})
	return ks
}

// client is an MCP client signed in as person ("" the operator).
func (k *kubeSite) client(ctx context.Context, person string) *mcpclient.Client {
	k.T.Helper()
	return k.ClientAs(ctx, k.URL, mcp.LATEST_PROTOCOL_VERSION, k.keys[person])
}

// pod is person's pod, nil when there is none.
func (k *kubeSite) pod(t testing.TB, person string) *corev1.Pod {
	t.Helper()
	p, err := k.admin.CoreV1().Pods(k.ns).Get(context.Background(), k.Container+"-"+person, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// skipWithoutEphemeralStorage skips t when a node reports no ephemeral-storage (a
// kubelet with localStorageCapacityIsolation off): nothing would be evicted there.
func (k *kubeSite) skipWithoutEphemeralStorage(t testing.TB) {
	t.Helper()
	nodes, err := k.admin.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if q, ok := n.Status.Allocatable[corev1.ResourceEphemeralStorage]; !ok || q.Sign() <= 0 {
			t.Skipf("node %s reports no ephemeral-storage (kubelet localStorageCapacityIsolation off): nothing is evicted", n.Name)
		}
	}
}

// claim is person's PersistentVolumeClaim, nil when there is none.
func (k *kubeSite) claim(t testing.TB, person string) *corev1.PersistentVolumeClaim {
	t.Helper()
	c, err := k.admin.CoreV1().PersistentVolumeClaims(k.ns).Get(context.Background(), k.Volume+"-"+person, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run calls execute as person and returns its stdout, failing on an error result.
func (k *kubeSite) run(ctx context.Context, t testing.TB, c *mcpclient.Client, command string) string {
	t.Helper()
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": command})
	if res.IsError {
		t.Fatalf("execute %q: %s", command, testsite.ResultText(res))
	}
	out, _ := testsite.Structured(t, res)["stdout"].(string)
	return out
}

// TestKubePods: a person's first call makes their pod and claim on the cluster, with
// the person's limits and the pod hardened as the issue asks; execute and tty work;
// /sandbox survives deleting the pod; a download link and an upload link work; a job
// outlives the call that started it; two people get two pods and two claims and
// neither reaches the other's files or jobs.
func TestKubePods(t *testing.T) {
	k := startKubeSite(t, []string{"alice", "bob"}, "yield_after 5s")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	alice := k.client(ctx, "alice")

	if k.pod(t, "alice") != nil || k.claim(t, "alice") != nil {
		t.Fatal("alice's pod or claim exists before her first call")
	}
	begin := time.Now()
	if got := k.run(ctx, t, alice, "id -u; echo hi > /sandbox/kept; cat /sandbox/kept"); got != "0\nhi\n" {
		t.Fatalf("first call: %q", got)
	}
	t.Logf("alice's first call (pod and claim made) took %v", time.Since(begin).Round(time.Millisecond))
	pod, claim := k.pod(t, "alice"), k.claim(t, "alice")
	if pod == nil || claim == nil {
		t.Fatalf("after the first call: pod %v, claim %v", pod != nil, claim != nil)
	}
	checkPodSpec(t, pod, claim.Name)

	// tty: true gives the command a terminal.
	res := testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "tty; test -t 1 && echo term", "tty": true})
	if txt := testsite.ResultText(res); res.IsError || !strings.Contains(txt, "/dev/pts/") || !strings.Contains(txt, "term") {
		t.Fatalf("tty: %v %q", res.IsError, txt)
	}

	// A job outlives the call that started it, and a later call reads its output.
	st := testsite.Structured(t, testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "sleep 2; echo late-output", "wait": 0}))
	job, _ := st["job_id"].(string)
	if job == "" || st["running"] != true {
		t.Fatalf("background job: %v", st)
	}
	out, _, last := followJob(ctx, t, alice, testsite.Structured(t, testsite.Call(ctx, t, alice, "job_output", map[string]any{"job_id": job, "wait": 5})))
	if out != "late-output\n" || last["exit_code"] != float64(0) {
		t.Fatalf("job %s: %q %v", job, out, last)
	}

	// A download link streams a file out of the pod; an upload link puts one in.
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	k.run(ctx, t, alice, "head -c 1048576 /dev/zero | tr '\\0' x > /sandbox/share.bin")
	link := testsite.Structured(t, testsite.Call(ctx, t, alice, "share_file", map[string]any{"path": "/sandbox/share.bin"}))["url"].(string)
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(got) != 1<<20 || strings.Trim(string(got), "x") != "" {
		t.Fatalf("download: %d, %d bytes", resp.StatusCode, len(got))
	}
	up := testsite.Structured(t, testsite.Call(ctx, t, alice, "upload_link", map[string]any{"directory": "/sandbox/in"}))["url"].(string)
	if code, body := put(t, up, "up.bin", bytes.NewReader(data), int64(len(data))); code/100 != 2 {
		t.Fatalf("upload: %d %s", code, body)
	}
	if sum := k.run(ctx, t, alice, "sha256sum < /sandbox/in/up.bin | cut -c1-64"); sum != sha256Hex(data)+"\n" {
		t.Fatalf("uploaded file: sha256 %q, want %s", sum, sha256Hex(data))
	}

	// /sandbox survives the pod's deletion: the next call makes the pod again. The
	// deletion is graceful, as the cluster's own are: the pod's object goes once its
	// container has stopped, so no command can still reach the old one.
	if err := k.admin.CoreV1().Pods(k.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the deleted pod to be gone", func() bool {
		p := k.pod(t, "alice")
		return p == nil || p.UID != pod.UID
	})
	begin = time.Now()
	if got := k.run(ctx, t, alice, "cat /sandbox/kept /sandbox/in/up.bin | wc -c"); strings.TrimSpace(got) != fmt.Sprint(3+len(data)) {
		t.Fatalf("after the pod was deleted: %q", got)
	}
	t.Logf("the first call after the pod was deleted took %v", time.Since(begin).Round(time.Millisecond))
	if p := k.pod(t, "alice"); p == nil || p.UID == pod.UID {
		t.Fatal("no new pod after the deletion")
	}

	// Deleted with no grace period, the pod's object goes at once while its node is
	// still killing it: the very next call runs in a new pod, once, with /sandbox back
	// (not sent into the dying one and reported lost with it).
	pod = k.pod(t, "alice")
	zero := int64(0)
	if err := k.admin.CoreV1().Pods(k.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if got := k.run(ctx, t, alice, "echo run >> /sandbox/runs; wc -c < /sandbox/kept"); strings.TrimSpace(got) != "3" {
		t.Fatalf("the first call after the pod was deleted with no grace: %q", got)
	}
	if got := k.run(ctx, t, alice, "cat /sandbox/runs"); got != "run\n" {
		t.Fatalf("the command after the deletion with no grace ran %d times", strings.Count(got, "run"))
	}
	if p := k.pod(t, "alice"); p == nil || p.UID == pod.UID {
		t.Fatal("no new pod after the deletion with no grace")
	}

	// Bob: a pod and a claim of his own; alice's files and jobs are not his.
	bob := k.client(ctx, "bob")
	if got := k.run(ctx, t, bob, "ls /sandbox; echo bob > /sandbox/bobs"); strings.Contains(got, "kept") {
		t.Fatalf("bob sees alice's files: %q", got)
	}
	if k.pod(t, "bob") == nil || k.claim(t, "bob") == nil || k.claim(t, "bob").Name == k.claim(t, "alice").Name {
		t.Fatal("bob has no pod or claim of his own")
	}
	if got := k.run(ctx, t, alice, "ls /sandbox"); strings.Contains(got, "bobs") {
		t.Fatalf("alice sees bob's files: %q", got)
	}
	if res := testsite.Call(ctx, t, bob, "job_output", map[string]any{"job_id": job, "wait": 0}); !res.IsError {
		t.Fatalf("bob read alice's job %s: %s", job, testsite.ResultText(res))
	}
	if res := testsite.Call(ctx, t, bob, "share_file", map[string]any{"path": "/sandbox/kept"}); !res.IsError {
		t.Fatalf("bob shared a file of alice's: %s", testsite.ResultText(res))
	}
}

// checkPodSpec checks what the issue asks of a sandbox's pod.
func checkPodSpec(t testing.TB, pod *corev1.Pod, claim string) {
	t.Helper()
	spec := pod.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || (sc.Privileged != nil && *sc.Privileged) {
		t.Error("the container is privileged or has no security context")
	}
	if sc != nil && (sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
		if ps := spec.SecurityContext; ps == nil || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Error("seccomp is not RuntimeDefault")
		}
	}
	dropped := false
	if sc != nil && sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			dropped = dropped || d == "NET_RAW" || d == "ALL"
		}
	}
	if !dropped {
		t.Error("NET_RAW is not dropped")
	}
	if c.Resources.Limits.Memory().Value() != 1<<30 || c.Resources.Requests.Memory().Value() != 1<<30 {
		t.Errorf("memory requests/limits %v / %v, want 1Gi (the site's memory)", c.Resources.Requests.Memory(), c.Resources.Limits.Memory())
	}
	if c.Resources.Limits.Cpu().MilliValue() != 200 || c.Resources.Requests.Cpu().MilliValue() != 200 {
		t.Errorf("cpu requests/limits %v / %v, want 200m (the site's cpus)", c.Resources.Requests.Cpu(), c.Resources.Limits.Cpu())
	}
	mounted := false
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			for _, m := range c.VolumeMounts {
				mounted = mounted || (m.Name == v.Name && m.MountPath == "/sandbox")
			}
		}
	}
	if !mounted {
		t.Errorf("/sandbox is not on the claim %s", claim)
	}
}

// TestKubeIdleStop: idle stop deletes the pod and keeps the claim; the next call makes
// the pod again with the files.
func TestKubeIdleStop(t *testing.T) {
	k := startKubeSite(t, []string{"carol"}, "idle_stop 2s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := k.client(ctx, "carol")
	k.run(ctx, t, c, "echo kept > /sandbox/f")
	testenv.WaitFor(t, time.Minute, "the idle pod to be deleted", func() bool { return k.pod(t, "carol") == nil })
	if k.claim(t, "carol") == nil {
		t.Fatal("the idle stop deleted the claim")
	}
	begin := time.Now()
	if got := k.run(ctx, t, c, "cat /sandbox/f"); got != "kept\n" {
		t.Fatalf("after the idle stop: %q", got)
	}
	t.Logf("the first call after the idle stop (a new pod on the kept claim) took %v", time.Since(begin).Round(time.Millisecond))
	if k.pod(t, "carol") == nil {
		t.Fatal("no pod after the call")
	}
}

// TestKubeTypeScriptSDK: the official TypeScript SDK, signing in as a person through
// its own OAuth client, works a kubernetes site as it works a Docker one (execute with
// progress, share_file and the download), on that person's pod.
func TestKubeTypeScriptSDK(t *testing.T) {
	k := startKubeSite(t, []string{"dana"}, "api_key_bearer off")
	res, err := tsClient(k.Site, "oauth", k.keys["dana"])
	if err != nil {
		t.Fatal(err)
	}
	checkTSResult(t, res)
	if k.pod(t, "dana") == nil {
		t.Fatal("dana's calls made no pod")
	}
}

// TestKubeBadInput: an API server that does not answer, a namespace the engine's account
// has no rights in, and an image the node does not have each give a clear error that
// names the cause, and leave nothing half-made.
func TestKubeBadInput(t *testing.T) {
	kubeconfig, image := testengine.Kube(t)
	admin := testengine.KubeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	call := func(t *testing.T, s *testsite.Site) string {
		t.Helper()
		res := testsite.Call(ctx, t, s.Client(ctx), "execute", map[string]any{"command": "echo no"})
		if !res.IsError {
			t.Fatalf("the call worked: %s", testsite.ResultText(res))
		}
		return testsite.ResultText(res)
	}

	t.Run("api server down", func(t *testing.T) {
		dead := filepath.Join(t.TempDir(), "dead.kubeconfig")
		conf, err := clientcmd.LoadFromFile(kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		port := testsite.FreePort(t)
		for _, c := range conf.Clusters {
			c.Server = fmt.Sprintf("https://127.0.0.1:%d", port)
		}
		if err := clientcmd.WriteToFile(*conf, dead); err != nil {
			t.Fatal(err)
		}
		s := testsite.New(t)
		s.Start(testsite.Options{Image: image, CPUs: kubeCPUs, Directive: []string{fmt.Sprintf("engine cluster kubernetes {\n\t\t\tkubeconfig %s\n\t\t}", dead)}})
		begin := time.Now()
		txt := call(t, s)
		t.Logf("%v: %s", time.Since(begin).Round(time.Millisecond), txt)
		if !strings.Contains(txt, "the Kubernetes API server did not answer") {
			t.Errorf("error %q does not say the API server did not answer", txt)
		}
		// The operator's log names the address that did not answer.
		log, err := os.ReadFile(filepath.Join(s.Storage, "caddy.log"))
		if err != nil || !strings.Contains(string(log), fmt.Sprintf("127.0.0.1:%d", port)) {
			t.Errorf("Caddy's log does not name 127.0.0.1:%d (%v)", port, err)
		}
	})

	t.Run("namespace without rights", func(t *testing.T) {
		ns, conf := testengine.KubeNamespace(t, nil) // a service account with no rights in ns
		s := testsite.New(t)
		s.Start(testsite.Options{Image: image, CPUs: kubeCPUs, Directive: []string{fmt.Sprintf("engine cluster kubernetes {\n\t\t\tkubeconfig %s\n\t\t\tnamespace %s\n\t\t}", conf, ns)}})
		txt := call(t, s)
		t.Log(txt)
		if !strings.Contains(txt, "forbidden") && !strings.Contains(txt, "Forbidden") {
			t.Errorf("error %q does not say the account is forbidden", txt)
		}
		if !strings.Contains(txt, ns) {
			t.Errorf("error %q does not name the namespace", txt)
		}
	})

	t.Run("image missing", func(t *testing.T) {
		ns, conf := testengine.KubeNamespace(t, documentedRole(t))
		s := testsite.New(t)
		image := "k8s.local/no-such-image:" + testenv.RandomHex(4)
		s.Start(testsite.Options{Image: image, CPUs: kubeCPUs, Directive: []string{fmt.Sprintf("engine cluster kubernetes {\n\t\t\tkubeconfig %s\n\t\t\tnamespace %s\n\t\t\timage_pull_policy Never\n\t\t}", conf, ns)}})
		txt := call(t, s)
		t.Log(txt)
		if !strings.Contains(txt, image) {
			t.Errorf("error %q does not name the image", txt)
		}
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 0 {
			t.Errorf("%d pods left after the failed start", len(pods.Items))
		}
	})
}

// BenchmarkKubeExecute runs 50 execute("true") calls one after the other through Caddy
// on a pod, next to 50 raw execs of `true` through the API server in the same run, and
// reports the ratio (the target: at most 1.2).
func BenchmarkKubeExecute(b *testing.B) {
	const n = 50
	k := startKubeSite(b, []string{"dora"})
	ctx := context.Background()
	c := k.client(ctx, "dora")
	k.run(ctx, b, c, "true")
	pod := k.Container + "-dora"
	rc := testengine.KubeRESTConfig(b)
	var raw, full time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		for range n {
			if out, err := podExec(ctx, rc, k.ns, pod, "true"); err != nil {
				b.Fatalf("raw exec: %v %q", err, out)
			}
		}
		t1 := time.Now()
		for range n {
			res := testsite.Call(ctx, b, c, "execute", map[string]any{"command": "true"})
			if res.IsError || testsite.Structured(b, res)["exit_code"] != float64(0) {
				b.Fatalf("execute: %s", testsite.ResultText(res))
			}
		}
		t2 := time.Now()
		raw += t1.Sub(t0)
		full += t2.Sub(t1)
	}
	b.StopTimer()
	b.ReportMetric(raw.Seconds()/float64(b.N), "raw-s/50")
	b.ReportMetric(full.Seconds()/float64(b.N), "caddy-s/50")
	b.ReportMetric(full.Seconds()/raw.Seconds(), "ratio")
}

// podExec runs argv in pod's container through the API server's exec subresource, as
// kubectl exec does (WebSocket, SPDY as the fallback), and returns its output.
func podExec(ctx context.Context, rc *rest.Config, ns, pod string, argv ...string) (string, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return "", err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "sandbox", Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(rc, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	spdy, err := remotecommand.NewSPDYExecutor(rc, "POST", req.URL())
	if err != nil {
		return "", err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure)
	if err != nil {
		return "", err
	}
	// Two buffers: client-go copies stdout and stderr in goroutines of their own.
	var out, errOut bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
	return out.String() + errOut.String(), err
}

// documentedRole is the Role that docs/kubernetes.md asks an operator to grant the
// engine's service account, read from the document itself.
func documentedRole(t testing.TB) []rbacv1.PolicyRule {
	t.Helper()
	doc, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range strings.Split(string(doc), "---") {
		i := strings.Index(part, "kind: Role\n")
		if i < 0 {
			continue
		}
		body := part[strings.LastIndex(part[:i], "\n")+1:]
		if j := strings.Index(body, "```"); j >= 0 {
			body = body[:j]
		}
		var role rbacv1.Role
		if err := yaml.UnmarshalStrict([]byte(body), &role); err != nil {
			t.Fatalf("the Role in docs/kubernetes.md: %v", err)
		}
		if len(role.Rules) == 0 {
			t.Fatal("the Role in docs/kubernetes.md has no rules")
		}
		return role.Rules
	}
	t.Fatal("docs/kubernetes.md has no Role")
	return nil
}

// TestKubeEphemeralStorage: with ephemeral_storage a person's pod is limited outside
// /sandbox; a command that writes past it gets the pod evicted, and the next call has
// /sandbox as it was on a new pod, without what was written outside it.
func TestKubeEphemeralStorage(t *testing.T) {
	k := startKubeSiteWith(t, "ephemeral_storage 32Mi", []string{"alice"})
	k.skipWithoutEphemeralStorage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alice := k.client(ctx, "alice")
	k.run(ctx, t, alice, "echo kept > /sandbox/keep")
	p := k.pod(t, "alice")
	if q := p.Spec.Containers[0].Resources.Limits[corev1.ResourceEphemeralStorage]; q.String() != "32Mi" {
		t.Fatalf("alice's pod's ephemeral-storage limit %q, want 32Mi", q.String())
	}
	begin := time.Now()
	res := testsite.Call(ctx, t, alice, "execute", map[string]any{"command": "dd if=/dev/zero of=/root/big bs=1M count=64 2>&1; sync; sleep 60; echo slept", "timeout": 90})
	text := testsite.ResultText(res)
	t.Logf("the command that wrote 64 MiB outside /sandbox ended after %.1f s (error %v): %s", time.Since(begin).Seconds(), res.IsError, text)
	if strings.Contains(text, "slept") {
		t.Fatalf("the command ran to its end: the pod was not evicted: %s", text)
	}
	begin = time.Now()
	out := k.run(ctx, t, alice, "cat /sandbox/keep; ls /root/big 2>&1; true")
	t.Logf("the next call took %.1f s", time.Since(begin).Seconds())
	if !strings.HasPrefix(out, "kept\n") || !strings.Contains(out, "No such file") {
		t.Errorf("after the eviction: %q, want /sandbox/keep kept and /root/big gone", out)
	}
	if np := k.pod(t, "alice"); np == nil || np.UID == p.UID {
		t.Errorf("alice's pod was not replaced")
	}
}
