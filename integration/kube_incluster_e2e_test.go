package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestKubeCaddyInCluster: Caddy itself runs on the test cluster as a Deployment of two
// pods behind a Service, with the in-cluster configuration (the pod's service account,
// holding exactly the Role of docs/kubernetes.md) and one shared storage; one pod is
// deleted (force, no grace) under 20 calls a second, and every call after the Service
// noticed answers.
//
// What stands in for a real cluster's parts (those of
// examples/kubernetes/caddy-deployment.yaml), since nothing here may leave loopback:
//   - The pods use the host's network (hostNetwork; the test cluster's node is this
//     machine), so that the in-cluster configuration reaches the API server on
//     127.0.0.1 (KUBERNETES_SERVICE_HOST and _PORT, which the API server's
//     certificate covers). Two replicas on one node cannot share a TCP port there:
//     each listens on a unix socket named after its pod, in a host directory.
//   - Their shared storage (`storage file_system`) is a host directory: the test
//     cluster's stand-in for a ReadWriteMany claim.
//   - The Service: the cluster has no kube-proxy, and an EndpointSlice refuses the
//     pods' address (127.0.0.1, their node's). A proxy in this test plays it as
//     kube-proxy would: each connection goes to one of the pods that are ready and
//     not being deleted (those a Service's endpoints list), round robin, at its
//     socket; it watches the Deployment's pods to know them. (A balancer Caddy
//     reloaded with each change would reset the connections queued on the
//     listening socket it replaces, which a Service's change does not do.)
//
// The Service noticed the deletion when the proxy dropped the pod. Calls that began
// before then may fail (one under way on the pod as it was killed); every call that
// began after must answer right. A job started on the deleted pod is followed to its
// end through the survivor, and the replacement pod the Deployment makes joins and
// serves calls.
func TestKubeCaddyInCluster(t *testing.T) {
	kubeconfig, sandboxImage := testengine.Kube(t)
	admin := testengine.KubeClient(t)
	apiHost, apiPort := loopbackAPIServer(t)
	began := time.Now()
	bin := caddyBinary(t)
	site := testsite.New(t) // the key and the sandbox's names
	c := &clusterCaddy{
		image:        importCaddyImage(t, site, bin, kubeconfig),
		sandboxImage: sandboxImage,
		apiHost:      apiHost,
		apiPort:      apiPort,
		hostDir:      clusterHostDir(t, kubeconfig),
		site:         site,
		public:       fmt.Sprintf("http://127.0.0.1:%d", testsite.FreePort(t)),
	}
	c.ns, _ = testengine.KubeNamespace(t, documentedRole(t))
	t.Logf("Caddy built and its image imported into the cluster in %v", time.Since(began).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began = time.Now()
	c.deploy(ctx, t, admin)
	var pods []string
	testenv.WaitFor(t, 90*time.Second, "two ready Caddy pods", func() bool {
		pods = readyPods(listPods(ctx, t, admin, c.ns))
		return len(pods) == 2
	})
	t.Logf("two Caddy pods ready %v after the Deployment was made: %v", time.Since(began).Round(time.Millisecond), pods)

	svc := startServiceProxy(t, c, pods)
	svc.follow(ctx, t, admin, c.ns)
	token := (&testsite.Site{T: t, URL: svc.url, Key: site.Key}).OAuthToken(ctx, t, "in-cluster")
	a, b := c.pod(pods[0]), c.pod(pods[1])
	for _, in := range []*instance{a, b} {
		began := time.Now()
		if st, err := in.execute(ctx, token, "echo "+in.name, 45); err != nil || st["stdout"] != in.name+"\n" {
			t.Fatalf("the first call on %s: %v %v", in.name, st, err)
		}
		t.Logf("the first call on %s directly: %v", in.name, time.Since(began).Round(time.Millisecond))
	}
	job := startJobOn(ctx, t, a, token)

	// 20 calls a second through the Service: 3 s with both pods, a's deletion, and
	// on until the replacement has served for 3 s.
	beforeA, beforeB := a.toolCalls(t), b.toolCalls(t)
	stop := make(chan struct{})
	stopLoad := sync.OnceFunc(func() { close(stop) })
	defer stopLoad() // a failure below ends the load too
	results := make(chan []callResult, 1)
	loadBegan := time.Now()
	go func() { results <- callsAtRate(ctx, svc.instance, token, 50*time.Millisecond, stop) }()
	time.Sleep(3 * time.Second)
	servedA, servedB := a.toolCalls(t)-beforeA, b.toolCalls(t)-beforeB
	deleted := time.Now()
	zero := int64(0)
	if err := admin.CoreV1().Pods(c.ns).Delete(ctx, a.name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatalf("deleting pod %s: %v", a.name, err)
	}
	out := followJobOn(ctx, t, b, token, job)
	t.Logf("job %s started on %s, followed to its end through %s: %q, %v after the deletion", job, a.name, b.name, out, time.Since(deleted).Round(time.Millisecond))
	noticed, ok := svc.waitFor(30*time.Second, deleted, func(pods []string) bool { return !slices.Contains(pods, a.name) })
	joined, ok2 := svc.waitFor(90*time.Second, deleted, func(pods []string) bool {
		return len(pods) == 2 && !slices.Contains(pods, a.name)
	})
	if ok2 {
		time.Sleep(3 * time.Second)
	}
	stopLoad()
	calls := <-results
	loadTook := time.Since(loadBegan)
	if !ok || !ok2 {
		t.Fatalf("the Service did not follow the deletion (without %s: %v, a replacement in: %v); its changes: %v", a.name, ok, ok2, svc.history())
	}
	if len(calls) < 20 {
		t.Fatalf("only %d calls were made", len(calls))
	}
	replacement := joined.pods[0]
	if replacement == b.name {
		replacement = joined.pods[1]
	}
	servedRepl := c.pod(replacement).toolCalls(t)

	var before, after, failedBefore, failedAfter int
	for _, r := range calls {
		if r.began.Before(noticed.at) {
			before++
			if r.err != nil {
				failedBefore++
				t.Logf("call #%d, began %v before the Service noticed: %v", r.n, noticed.at.Sub(r.began).Round(time.Millisecond), r.err)
			}
			continue
		}
		after++
		if r.err != nil {
			failedAfter++
			t.Errorf("call #%d, began %v after the Service noticed: %v", r.n, r.began.Sub(noticed.at).Round(time.Millisecond), r.err)
		}
	}
	sent := calls[len(calls)-1].began.Sub(calls[0].began)
	t.Logf("%d calls begun over %v (%.1f a second), the last answered %v after the first began; each took %s; before the deletion %s served %d and %s %d",
		len(calls), sent.Round(time.Millisecond), float64(len(calls)-1)/sent.Seconds(), loadTook.Round(time.Millisecond), latencies(calls), a.name, servedA, b.name, servedB)
	t.Logf("the Service noticed %v after the deletion; %d calls began before, %d of them failed; %d began after, %d failed",
		noticed.at.Sub(deleted).Round(time.Millisecond), before, failedBefore, after, failedAfter)
	t.Logf("the replacement %s joined %v after the deletion and served %d calls", replacement, joined.at.Sub(deleted).Round(time.Millisecond), servedRepl)
	if servedA == 0 || servedB == 0 {
		t.Errorf("before the deletion %s served %d calls and %s %d: want both", a.name, servedA, b.name, servedB)
	}
	if servedRepl == 0 {
		t.Errorf("the replacement %s served no call", replacement)
	}
	if after < 20 {
		t.Errorf("only %d calls began after the Service noticed: the load stopped early", after)
	}
}

// loopbackAPIServer is the host and port of the test cluster's API server, which must
// be on loopback: the Caddy pods use this machine's network.
func loopbackAPIServer(t *testing.T) (host, port string) {
	t.Helper()
	u, err := url.Parse(testengine.KubeRESTConfig(t).Host)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		t.Skipf("the API server is at %s: the Caddy pods reach it on this machine's loopback (the test cluster of scripts/k8s-cluster.sh)", u.Host)
	}
	port = u.Port()
	if port == "" {
		port = "443"
	}
	return u.Hostname(), port
}

// caddyImageName is the image of the Caddy pods in the local Docker engine; the
// cluster knows it as k8s.local/<name>.
const caddyImageName = "mcp-sandbox-caddy-test:latest"

// importCaddyImage builds the image of the Caddy pods around bin
// (containers/build-caddy-image.sh) and imports it into the test cluster, whose run
// directory holds kubeconfig (scripts/k8s-cluster.sh import), and returns its name
// there. The image leaves the local Docker engine once imported.
func importCaddyImage(t *testing.T, site *testsite.Site, bin, kubeconfig string) string {
	t.Helper()
	run := func(env []string, name string, args ...string) {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run(nil, "../containers/build-caddy-image.sh", bin, caddyImageName)
	inCluster := "k8s.local/" + caddyImageName
	defer func() {
		for _, ref := range []string{caddyImageName, inCluster} {
			_, _ = site.Docker.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	}()
	run([]string{"K8S_HOME=" + filepath.Dir(kubeconfig)}, "../scripts/k8s-cluster.sh", "import", caddyImageName)
	return inCluster
}

// clusterHostDir makes a directory that the Caddy pods mount from the host and this
// test reaches by the same path, with sockets/ (the pods' listeners) and storage/
// (their shared storage). It is in the cluster's run directory (where kubeconfig
// is), not under /tmp: the kubelet resolves host paths in the cluster's own mount
// namespace, where /tmp is another directory (scripts/k8s-cluster.sh). It is removed
// when the test ends, after the pods.
func clusterHostDir(t *testing.T, kubeconfig string) string {
	t.Helper()
	dir := filepath.Join(filepath.Dir(kubeconfig), "caddy-"+testenv.RandomHex(4))
	// A pod's socket is sockets/<deployment>-<10>-<5>.sock; a unix socket's path
	// has at most 107 bytes.
	if n := len(filepath.Join(dir, "sockets", "caddy-0123456789-abcde.sock")); n > 107 {
		t.Fatalf("the pods' sockets under %s would have %d-byte paths, over the 107 a unix socket allows: run the cluster in a shorter K8S_HOME", dir, n)
	}
	for _, sub := range []string{"sockets", "storage"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// clusterCaddy is the Deployment of Caddy on the test cluster and what it is made of.
type clusterCaddy struct {
	ns           string
	image        string // Caddy's, as the cluster knows it
	sandboxImage string
	apiHost      string // the API server, for the in-cluster configuration
	apiPort      string
	hostDir      string // see clusterHostDir
	site         *testsite.Site
	public       string // the Service's URL (the proxy's), the site's public_url
}

// The Deployment's name (and its Secret's and ConfigMap's), and its pods' label.
const (
	clusterCaddyName     = "caddy"
	clusterCaddySelector = "app.kubernetes.io/name=mcp-sandbox-caddy"
)

// inClusterCPUs is the sandbox's CPU share: 20 commands a second need more than the
// other tests' pods have (at 0.2 CPU each call queued for seconds; at 1, 80 ms).
const inClusterCPUs = "1"

// caddyfile is the pods' Caddyfile: that of examples/kubernetes/caddy-deployment.yaml,
// but listening on a unix socket named after the pod, in plain HTTP, and with the test
// site's sandbox settings.
func (c *clusterCaddy) caddyfile() string {
	return fmt.Sprintf(`{
	admin off
	persist_config off
	auto_https off
	storage file_system /data/caddy
	log {
		output stderr
	}
}

http:// {
	bind unix//run/caddy/{$POD_NAME}.sock
	mcp_sandbox {
		api_key {env.SANDBOX_API_KEY}
		public_url %s
		image %s
		container %s
		volume %s
		network none
		memory 1g
		cpus %s
		engine cluster kubernetes {
			namespace %s
			image_pull_policy Never
		}
	}
	%s
	respond "the next handler" 200
}
`, c.public, c.sandboxImage, c.site.Container, c.site.Volume, inClusterCPUs, c.ns, testsite.MetricsRoute)
}

// socket is the host path of pod's listener.
func (c *clusterCaddy) socket(pod string) string {
	return filepath.Join(c.hostDir, "sockets", pod+".sock")
}

// pod is the Caddy of pod, reached directly on its socket.
func (c *clusterCaddy) pod(name string) *instance {
	path := c.socket(name)
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}
	return &instance{name: name, url: "http://" + name, http: &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 2 * time.Minute}}
}

// deploy makes the Secret (the API key), the ConfigMap (the Caddyfile) and the
// Deployment. When the test ends, the Deployment goes first and its pods are waited
// for, so that no Caddy still uses the host directory when it is removed; the
// namespace takes the rest (the sandbox's pod and claim among them).
func (c *clusterCaddy) deploy(ctx context.Context, t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	name, value, _ := strings.Cut(clusterCaddySelector, "=")
	labels := map[string]string{name: value}
	if _, err := admin.CoreV1().Secrets(c.ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: clusterCaddyName},
		StringData: map[string]string{"api-key": c.site.Key},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the Secret: %v", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(c.ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: clusterCaddyName},
		Data:       map[string]string{"Caddyfile": c.caddyfile()},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the ConfigMap: %v", err)
	}
	t.Cleanup(func() { c.remove(t, admin) })
	if _, err := admin.AppsV1().Deployments(c.ns).Create(ctx, c.deployment(labels), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the Deployment: %v", err)
	}
}

// deployment is the Deployment of two Caddy pods, as in
// examples/kubernetes/caddy-deployment.yaml but for the test cluster: the host's
// network, the API server named on loopback, host directories for the sockets and the
// storage, an exec probe (an HTTP probe cannot reach a unix socket).
func (c *clusterCaddy) deployment(labels map[string]string) *appsv1.Deployment {
	replicas, grace := int32(2), int64(5)
	hostDir := func(name, sub string) corev1.Volume {
		dir := corev1.HostPathDirectory
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(c.hostDir, sub), Type: &dir}}}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: clusterCaddyName},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            "tester", // testengine.KubeNamespace's, with the documented Role
					HostNetwork:                   true,
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name:            "caddy",
						Image:           c.image,
						ImagePullPolicy: corev1.PullNever,
						Env: []corev1.EnvVar{
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
							{Name: "SANDBOX_API_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
								LocalObjectReference: corev1.LocalObjectReference{Name: clusterCaddyName}, Key: "api-key"}}},
							// The in-cluster configuration's API server: the kubelet would
							// give the address of the Service kubernetes, which nothing
							// routes here.
							{Name: "KUBERNETES_SERVICE_HOST", Value: c.apiHost},
							{Name: "KUBERNETES_SERVICE_PORT", Value: c.apiPort},
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "config", MountPath: "/etc/caddy"},
							{Name: "sockets", MountPath: "/run/caddy"},
							{Name: "storage", MountPath: "/data"},
						},
						// Ready once Caddy listens: its socket is there. (An HTTP probe
						// cannot reach a unix socket.)
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", `test -S "/run/caddy/$POD_NAME.sock"`}}},
							PeriodSeconds: 1,
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: clusterCaddyName}}}},
						hostDir("sockets", "sockets"),
						hostDir("storage", "storage"),
					},
				},
			},
		},
	}
}

// remove deletes the Deployment and waits until its pods are gone; when the test
// failed, it logs the end of each pod's log first.
func (c *clusterCaddy) remove(t *testing.T, admin kubernetes.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list := func() []corev1.Pod {
		pods, err := admin.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: clusterCaddySelector})
		if err != nil {
			t.Errorf("listing the Caddy pods: %v", err)
			return nil
		}
		return pods.Items
	}
	if t.Failed() {
		tail := int64(40)
		for _, p := range list() {
			raw, err := admin.CoreV1().Pods(c.ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
			t.Logf("pod %s (%s), last lines of its log (%v):\n%s", p.Name, p.Status.Phase, err, raw)
		}
	}
	err := admin.AppsV1().Deployments(c.ns).Delete(ctx, clusterCaddyName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting the Deployment: %v", err)
	}
	for len(list()) > 0 {
		if ctx.Err() != nil {
			t.Errorf("the Caddy pods are still there a minute after their Deployment was deleted")
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// listPods is the Deployment's pods.
func listPods(ctx context.Context, t *testing.T, admin kubernetes.Interface, ns string) []*corev1.Pod {
	t.Helper()
	list, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: clusterCaddySelector})
	if err != nil {
		t.Fatalf("listing the Caddy pods: %v", err)
	}
	var out []*corev1.Pod
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out
}

// readyPods names the pods that a Service would send calls to, sorted: ready, and
// not being deleted, as the EndpointSlice controller lists them.
func readyPods(pods []*corev1.Pod) []string {
	var names []string
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				names = append(names, p.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}

// serviceProxy plays the Service as kube-proxy does: it forwards each connection it
// accepts on loopback to one of the Deployment's ready pods, round robin (here to the
// pod's socket), and nothing more: no retry, no HTTP. The pods it picks from follow
// the cluster (see follow).
type serviceProxy struct {
	*instance // its HTTP client opens a connection per call, so that calls spread
	c         *clusterCaddy

	mu      sync.Mutex
	pods    []string
	next    int
	changes []upstreamChange
	open    map[net.Conn]bool // the connections it relays, closed when the test ends
	closed  bool
}

// upstreamChange is one change of the pods the proxy picks from.
type upstreamChange struct {
	at   time.Time // connections from then on go to pods
	pods []string
}

// startServiceProxy listens on c.public's port, forwarding to pods until the test ends.
func startServiceProxy(t *testing.T, c *clusterCaddy, pods []string) *serviceProxy {
	t.Helper()
	u, err := url.Parse(c.public)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", u.Host)
	if err != nil {
		t.Fatalf("the Service's stand-in: %v", err)
	}
	p := &serviceProxy{
		instance: &instance{name: "service", url: c.public, http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Minute}},
		c:        c,
		pods:     pods,
		open:     map[net.Conn]bool{},
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		p.closed = true
		for conn := range p.open {
			conn.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.forward(conn)
			}()
		}
	}()
	return p
}

// forward relays conn to the next pod's socket until both sides are done; a pod that
// does not take the connection resets it, as a Service's gone endpoint does.
func (p *serviceProxy) forward(conn net.Conn) {
	p.mu.Lock()
	pod := p.pods[p.next%len(p.pods)]
	p.next++
	p.mu.Unlock()
	up, err := net.Dial("unix", p.c.socket(pod))
	if err != nil {
		conn.Close()
		return
	}
	p.mu.Lock()
	p.open[conn], p.open[up] = true, true
	if p.closed {
		conn.Close() // the test ended while it connected
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.open, conn)
		delete(p.open, up)
		p.mu.Unlock()
		conn.Close()
		up.Close()
	}()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, conn)
		_ = up.(*net.UnixConn).CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(conn, up)
	_ = conn.(*net.TCPConn).CloseWrite()
	<-done
}

// follow watches the Deployment's pods until the test ends, and makes the proxy pick
// from the ready ones, as a Service's endpoints follow its pods.
func (p *serviceProxy) follow(ctx context.Context, t *testing.T, admin kubernetes.Interface, ns string) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := p.watch(ctx, admin, ns); err != nil && ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond) // the API server restarting: list again
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// watch lists the Deployment's pods and follows them until the watch ends.
func (p *serviceProxy) watch(ctx context.Context, admin kubernetes.Interface, ns string) error {
	api := admin.CoreV1().Pods(ns)
	opts := metav1.ListOptions{LabelSelector: clusterCaddySelector}
	list, err := api.List(ctx, opts)
	if err != nil {
		return err
	}
	current := map[string]*corev1.Pod{}
	for i := range list.Items {
		current[list.Items[i].Name] = &list.Items[i]
	}
	sync := func() {
		var all []*corev1.Pod
		for _, pod := range current {
			all = append(all, pod)
		}
		p.sync(readyPods(all))
	}
	sync()
	opts.ResourceVersion = list.ResourceVersion
	w, err := api.Watch(ctx, opts)
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		pod, ok := ev.Object.(*corev1.Pod)
		switch {
		case !ok:
			return fmt.Errorf("watching the Caddy pods: %v", ev.Object) // an expired version: list again
		case ev.Type == watch.Deleted:
			delete(current, pod.Name)
		default:
			current[pod.Name] = pod
		}
		sync()
	}
	return nil
}

// sync makes pods the ones the proxy picks from. An empty set is kept out: a call
// fails either way.
func (p *serviceProxy) sync(pods []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(pods) == 0 || slices.Equal(pods, p.pods) {
		return
	}
	p.pods = pods
	p.changes = append(p.changes, upstreamChange{at: time.Now(), pods: pods})
}

// waitFor returns the first change of the proxy's pods after since whose pods satisfy
// want, waiting up to d for it.
func (p *serviceProxy) waitFor(d time.Duration, since time.Time, want func(pods []string) bool) (upstreamChange, bool) {
	for deadline := time.Now().Add(d); ; {
		p.mu.Lock()
		for _, ch := range p.changes {
			if ch.at.After(since) && want(ch.pods) {
				p.mu.Unlock()
				return ch, true
			}
		}
		p.mu.Unlock()
		if time.Now().After(deadline) {
			return upstreamChange{}, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// history is the proxy's changes of pods, for a message.
func (p *serviceProxy) history() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, ch := range p.changes {
		out = append(out, fmt.Sprintf("%s %v", ch.at.Format("15:04:05.000"), ch.pods))
	}
	return out
}

// latencies sums up how long calls took: median, 95th percentile and longest.
func latencies(calls []callResult) string {
	took := make([]time.Duration, 0, len(calls))
	for _, r := range calls {
		took = append(took, r.took)
	}
	slices.Sort(took)
	at := func(q float64) time.Duration { return took[int(q*float64(len(took)-1))].Round(time.Millisecond) }
	return fmt.Sprintf("%v median, %v at the 95th percentile, %v at most", at(0.5), at(0.95), at(1))
}

// callResult is one call of callsAtRate.
type callResult struct {
	n     int
	began time.Time
	took  time.Duration
	err   error // nil: it answered its own output
}

// callsAtRate starts `execute("echo n")` through in every interval, each in a
// goroutine of its own so that a slow call does not hold the next, until stop is
// closed or ctx ends; it returns every call's result once all have ended.
func callsAtRate(ctx context.Context, in *instance, token string, every time.Duration, stop <-chan struct{}) []callResult {
	var (
		mu  sync.Mutex
		out []callResult
		wg  sync.WaitGroup
	)
	ended := func() []callResult {
		wg.Wait()
		slices.SortFunc(out, func(a, b callResult) int { return a.n - b.n })
		return out
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-stop:
			return ended()
		case <-ctx.Done():
			return ended()
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := callResult{n: n, began: time.Now()}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			st, err := in.execute(cctx, token, fmt.Sprintf("echo %d", n), 30)
			if err == nil && (st["stdout"] != fmt.Sprintf("%d\n", n) || st["exit_code"] != 0.0) {
				err = fmt.Errorf("answered %v", st)
			}
			r.err, r.took = err, time.Since(r.began)
			mu.Lock()
			out = append(out, r)
			mu.Unlock()
		}()
	}
}
