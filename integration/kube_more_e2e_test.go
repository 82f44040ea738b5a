package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// More of the Kubernetes engine through a real Caddy and the test cluster, on one site
// with two people: egress through the proxy on the agent's channel, a preview of a
// server in the pod, an eviction, and the console's restart and recreate.

// TestKubeXMore shares one site (two pods of kubeCPUs) among its parts.
func TestKubeXMore(t *testing.T) {
	up := newEgressUpstream(t)
	k := startKubeSite(t, []string{"ann", "ben"}, "previews localhost", fmt.Sprintf(`egress {
			allow allowed.test:%[1]s
			host allowed.test 127.0.0.1
			host refused.test 127.0.0.1
		}`, up.port))
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ann := k.client(ctx, "ann")
	begin := time.Now()
	k.run(ctx, t, ann, "echo kept > /sandbox/kept")
	t.Logf("ann's first call (pod and claim made) took %v", time.Since(begin).Round(time.Millisecond))

	t.Run("egress", func(t *testing.T) {
		pod := k.pod(t, "ann")
		if pod == nil {
			t.Fatal("ann has no pod")
		}
		checkDenyAll(ctx, t, k, pod)

		run := func(cmd string) (string, map[string]any) {
			t.Helper()
			res := testsite.Call(ctx, t, ann, "execute", map[string]any{"command": cmd})
			return testsite.ResultText(res), testsite.Structured(t, res)
		}
		// The proxy listens in the pod once the agent runs there.
		if _, out := run(`for i in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && echo up && break; sleep 0.1; done`); out["stdout"] != "up\n" {
			t.Fatalf("nothing listens on the proxy's port 127.0.0.1:3128 in the pod: %v", out)
		}
		text, out := run("echo $HTTP_PROXY; wget -q -O - http://allowed.test:" + up.port + "/hello")
		lines := strings.Split(fmt.Sprint(out["stdout"]), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "http://") || !strings.HasSuffix(lines[0], "@127.0.0.1:3128") || lines[1] != "hello from allowed.test:"+up.port+"/hello" {
			t.Fatalf("allowed host: %s", text)
		}
		if n := len(up.requests()); n != 1 {
			t.Fatalf("the upstream saw %d requests, want 1", n)
		}
		text, out = run("wget -q -O - http://refused.test:" + up.port + "/x")
		note, _ := out["note"].(string)
		if out["exit_code"] == 0.0 || !strings.Contains(note, "blocked: refused.test") || strings.Contains(fmt.Sprint(out["stdout"]), "hello from") {
			t.Fatalf("refused host: %s", text)
		}
		if n := len(up.requests()); n != 1 {
			t.Fatalf("the upstream saw the refused request (%d requests)", n)
		}
	})

	t.Run("preview", func(t *testing.T) {
		page := "ann-page-" + testenv.RandomHex(8)
		if got := k.run(ctx, t, ann, "mkdir -p /sandbox/www && echo '"+page+"' > /sandbox/www/index.html && "+
			"(setsid nohup busybox httpd -f -p 127.0.0.1:8000 -h /sandbox/www > /tmp/httpd.log 2>&1 < /dev/null &) && "+
			"for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null && echo up && break; sleep 0.1; done"); got != "up\n" {
			t.Fatalf("busybox httpd in the pod: %q", got)
		}
		res := testsite.Call(ctx, t, ann, "expose_port", map[string]any{"port": 8000})
		if res.IsError {
			t.Fatalf("expose_port: %s", testsite.ResultText(res))
		}
		u, _ := testsite.Structured(t, res)["url"].(string)
		parsed, err := url.Parse(u)
		if err != nil || !strings.HasSuffix(parsed.Hostname(), ".localhost") || parsed.Port() != fmt.Sprint(k.Port) {
			t.Fatalf("preview url %q", u)
		}
		web := testsite.AnyHostClient(k.Port)
		var code int
		var body string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if code, body = getPage(t, web, u); code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Logf("in the pod: %s", k.run(ctx, t, ann, "ps -o pid,args; cat /tmp/httpd.log"))
				t.Fatalf("preview %s: %d %.300q, want 200", u, code, body)
			}
		}
		if strings.TrimSpace(body) != page {
			t.Fatalf("preview %s: %d %q, want %q", u, code, body, page)
		}
		// The page comes from the pod: one written now is what the preview serves next.
		k.run(ctx, t, ann, "echo changed > /sandbox/www/index.html")
		if code, body := getPage(t, web, u); code != 200 || body != "changed\n" {
			t.Fatalf("preview after the page changed: %d %q", code, body)
		}
		// Through the agent's channel: while the preview's connections are open, none of
		// this host's TCP connections goes to the pod's IP.
		pod := k.pod(t, "ann")
		if pod == nil || pod.Status.PodIP == "" {
			t.Fatal("ann's pod has no IP")
		}
		if tcpConnsTo(t, "127.0.0.1") == 0 {
			t.Fatal("no TCP connection to 127.0.0.1 in /proc/self/net/tcp: the count below proves nothing")
		}
		if n := tcpConnsTo(t, pod.Status.PodIP); n != 0 {
			t.Fatalf("%d TCP connections from this host to the pod's IP %s", n, pod.Status.PodIP)
		}
	})

	t.Run("eviction", func(t *testing.T) {
		pod := k.pod(t, "ann")
		if pod == nil {
			t.Fatal("ann has no pod")
		}
		k.run(ctx, t, ann, "echo before-eviction > /sandbox/evicted")
		evictedAt := time.Now()
		err := k.admin.CoreV1().Pods(k.ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: k.ns}})
		if err != nil {
			t.Fatalf("evicting %s: %v", pod.Name, err)
		}
		testenv.WaitFor(t, time.Minute, "the evicted pod to be gone", func() bool {
			p := k.pod(t, "ann")
			return p == nil || p.UID != pod.UID
		})
		t.Logf("the evicted pod was gone %v after the eviction", time.Since(evictedAt).Round(time.Millisecond))
		begin := time.Now()
		if got := k.run(ctx, t, ann, "cat /sandbox/kept /sandbox/evicted"); got != "kept\nbefore-eviction\n" {
			t.Fatalf("after the eviction: %q", got)
		}
		t.Logf("the first call after the eviction took %v (%v from the eviction)", time.Since(begin).Round(time.Millisecond), time.Since(evictedAt).Round(time.Millisecond))
		if p := k.pod(t, "ann"); p == nil || p.UID == pod.UID {
			t.Fatal("no new pod after the eviction")
		}
		if c := k.claim(t, "ann"); c == nil || c.Status.Phase != corev1.ClaimBound {
			t.Fatal("ann's claim is gone or unbound after the eviction")
		}
	})

	t.Run("console restart and recreate", func(t *testing.T) {
		ben := k.client(ctx, "ben")
		k.run(ctx, t, ben, "echo kept > /sandbox/keep.txt; echo outside > /root/x")
		pod := k.pod(t, "ben")
		if pod == nil {
			t.Fatal("ben has no pod")
		}
		var list struct {
			Sandboxes []struct {
				Person string `json:"person"`
				State  string `json:"state"`
				Engine string `json:"engine"`
				Node   string `json:"node"`
			} `json:"sandboxes"`
		}
		if code := kubeConsoleAPI(t, k, "GET", "/sandboxes", &list); code != 200 {
			t.Fatalf("GET /console/api/sandboxes: %d", code)
		}
		found := false
		for _, s := range list.Sandboxes {
			if s.Person != "ben" {
				continue
			}
			found = true
			if s.Node == "" || s.Node != pod.Spec.NodeName || s.State != "running" || s.Engine != "cluster" {
				t.Errorf("ben's sandbox in the console: %+v; the pod runs on node %q", s, pod.Spec.NodeName)
			}
		}
		if !found {
			t.Fatalf("the console does not list ben's sandbox: %+v", list.Sandboxes)
		}
		t.Logf("the console lists ben's sandbox on node %q", pod.Spec.NodeName)

		// Restart deletes the pod and makes it again from the ConfigMap; recreate makes
		// the ConfigMap again too: either way only /sandbox, on the claim, is kept (on
		// Docker a restart keeps the container's files).
		// Restart through the console's pages, as the operator's browser does: the
		// confirmation says what a restart loses on this engine.
		u := newConsoleUser(t, k.URL)
		if resp, _ := u.do("POST", "/console/signin", url.Values{"api_key": {k.Key}}, map[string]string{"Origin": k.URL}); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("console sign-in: %d", resp.StatusCode)
		}
		resp, page := u.do("GET", "/console/confirm?action=sandbox_restart&person=ben", nil, nil)
		m := csrfInput.FindStringSubmatch(page)
		if resp.StatusCode != 200 || m == nil || !strings.Contains(page, "every file written outside /sandbox") {
			t.Fatalf("restart confirmation: %d %.500q", resp.StatusCode, page)
		}
		act := func(action string) time.Duration {
			t.Helper()
			begin := time.Now()
			if action == "restart" {
				form := url.Values{"action": {"sandbox_restart"}, "id": {"ben"}, "back": {"overview"}, "csrf": {m[1]}}
				if resp, body := u.do("POST", "/console/action", form, map[string]string{"Origin": k.URL}); resp.StatusCode != http.StatusSeeOther {
					t.Fatalf("POST /console/action restart: %d %.300q", resp.StatusCode, body)
				}
			} else {
				var out map[string]any
				if code := kubeConsoleAPI(t, k, "POST", "/sandboxes/ben/"+action, &out); code != 200 {
					t.Fatalf("POST /console/api/sandboxes/ben/%s: %d %v", action, code, out)
				}
			}
			return time.Since(begin).Round(time.Millisecond)
		}
		for _, action := range []string{"restart", "recreate"} {
			took := act(action)
			p := k.pod(t, "ben")
			if p == nil || p.UID == pod.UID || p.DeletionTimestamp != nil {
				t.Fatalf("after %s: pod %v (the old UID %s)", action, p != nil, pod.UID)
			}
			got := k.run(ctx, t, ben, "cat /sandbox/keep.txt; cat /root/x 2>/dev/null || echo no-root-x")
			if got != "kept\nno-root-x\n" {
				t.Fatalf("after %s: %q, want /sandbox/keep.txt kept and /root/x gone", action, got)
			}
			t.Logf("%s took %v: a new pod (UID %s), /sandbox kept, /root/x gone", action, took, p.UID)
			pod = p
			k.run(ctx, t, ben, "echo outside > /root/x")
		}
	})
}

// checkDenyAll checks that pod's deny-all NetworkPolicy (<container>-no-network)
// selects it and allows nothing either way.
func checkDenyAll(ctx context.Context, t *testing.T, k *kubeSite, pod *corev1.Pod) {
	t.Helper()
	np, err := k.admin.NetworkingV1().NetworkPolicies(k.ns).Get(ctx, pod.Name+"-no-network", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the pod's NetworkPolicy: %v", err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() {
		t.Fatalf("NetworkPolicy %s selects %v (%v)", np.Name, np.Spec.PodSelector, err)
	}
	if !sel.Matches(labels.Set(pod.Labels)) {
		t.Fatalf("NetworkPolicy %s (%v) does not select the pod (labels %v)", np.Name, sel, pod.Labels)
	}
	types := map[networkingv1.PolicyType]bool{}
	for _, ty := range np.Spec.PolicyTypes {
		types[ty] = true
	}
	if !types[networkingv1.PolicyTypeIngress] || !types[networkingv1.PolicyTypeEgress] || len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 {
		t.Fatalf("NetworkPolicy %s is not deny-all: %+v", np.Name, np.Spec)
	}
}

// kubeConsoleAPI calls the console API of k as its operator and decodes the answer.
func kubeConsoleAPI(t *testing.T, k *kubeSite, method, path string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, k.URL+"/console/api"+path, nil)
	req.Header.Set("Authorization", "Bearer "+k.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %.300s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode
}

// getPage GETs u through c and returns the status and (at most 64 KiB of) the body.
func getPage(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b)
}

// tcpConnsTo counts this host's TCP connections (IPv4, any state but LISTEN) whose
// remote address is ip, from /proc/self/net/tcp. It dials nothing.
func tcpConnsTo(t *testing.T, ip string) int {
	t.Helper()
	addr, err := netip.ParseAddr(ip)
	if err != nil || !addr.Is4() {
		t.Fatalf("pod IP %q is not IPv4 (%v)", ip, err)
	}
	b := addr.As4()
	want := fmt.Sprintf("%02X%02X%02X%02X", b[3], b[2], b[1], b[0]) // little-endian, as the kernel writes it
	data, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 4 {
			continue
		}
		remote, _, ok := strings.Cut(f[2], ":")
		if ok && remote == want && f[3] != "0A" {
			n++
		}
	}
	return n
}

// TestKubeXKubeletEviction: a kubelet's eviction (node pressure, or a pod past its
// ephemeral-storage limit) does not delete the pod as the Eviction API does: it leaves
// it ended (Failed, or Succeeded when the main process exits 0 on the kill), its
// container not restarted. Here the kubelet evicts an idle sandbox for what it wrote
// outside /sandbox; the next call must make the pod again with /sandbox intact.
func TestKubeXKubeletEviction(t *testing.T) {
	k := startKubeSiteWith(t, "ephemeral_storage 32Mi", []string{"eve"})
	k.skipWithoutEphemeralStorage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eve := k.client(ctx, "eve")
	k.run(ctx, t, eve, "echo kept > /sandbox/kept; dd if=/dev/zero of=/root/big bs=1M count=64 2>/dev/null; sync")
	pod := k.pod(t, "eve")
	if pod == nil {
		t.Fatal("eve has no pod")
	}
	begin := time.Now()
	testenv.WaitFor(t, 2*time.Minute, "the kubelet to evict eve's pod", func() bool {
		p := k.pod(t, "eve")
		if p == nil || p.UID != pod.UID {
			t.Fatal("eve's pod was replaced before a call asked for it")
		}
		cs := p.Status.ContainerStatuses
		ended := p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
		return ended && len(cs) == 1 && cs[0].State.Terminated != nil
	})
	if p := k.pod(t, "eve"); p != nil {
		t.Logf("evicted %.1f s after the write: phase %s, reason %q, message %q", time.Since(begin).Seconds(), p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	begin = time.Now()
	res := testsite.Call(ctx, t, eve, "execute", map[string]any{"command": "cat /sandbox/kept"})
	t.Logf("the first call after a kubelet eviction took %v", time.Since(begin).Round(time.Millisecond))
	if res.IsError || testsite.Structured(t, res)["stdout"] != "kept\n" {
		t.Errorf("the first call after a kubelet eviction: %s", testsite.ResultText(res))
		if got := k.run(ctx, t, eve, "cat /sandbox/kept"); got != "kept\n" {
			t.Fatalf("the second call: %q", got)
		}
		t.Log("the second call works")
	}
	if p := k.pod(t, "eve"); p == nil || p.UID == pod.UID || p.Status.Phase != corev1.PodRunning {
		t.Fatal("no new running pod after the kubelet eviction")
	}
}
