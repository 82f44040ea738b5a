package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// egressUpstream is a loopback HTTP server that records the requests it gets.
type egressUpstream struct {
	*httptest.Server
	port string
	mu   sync.Mutex
	seen []*http.Request
}

func newEgressUpstream(t *testing.T) *egressUpstream {
	u := &egressUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Clone(context.Background()))
		u.mu.Unlock()
		fmt.Fprintf(w, "hello from %s%s\n", r.Host, r.URL.Path)
	}))
	t.Cleanup(u.Close)
	pu, _ := url.Parse(u.URL)
	u.port = pu.Port()
	return u
}

func (u *egressUpstream) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.seen...)
}

func egressDirective(port string, allow ...string) []string {
	return []string{fmt.Sprintf(`egress {
			allow %s
			host allowed.test 127.0.0.1
			host refused.test 127.0.0.1
			credential http://allowed.test:%s/api header X-Api-Key {env.EGRESS_TEST_SECRET}
		}`, strings.Join(allow, " "), port)}
}

// Through a real Caddy: the sandbox has no network of its own; an allowed host answers
// through the proxy with the credential added, a refused one gets 403 and the tool
// result names it, the secret is nowhere in the container, and a reload changes the
// rules of the running sandbox.
func TestEgressThroughCaddy(t *testing.T) {
	up := newEgressUpstream(t)
	secret := "egress-secret-" + testenv.RandomHex(12)
	t.Setenv("EGRESS_TEST_SECRET", secret)
	opts := testsite.Options{Directive: egressDirective(up.port, "allowed.test:"+up.port)}
	s := testsite.Start(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Client(ctx)

	if desc := executeDescription(ctx, s, c); !strings.Contains(desc, "It reaches only these hosts, through the proxy its environment names (HTTP_PROXY): allowed.test:"+up.port+".") {
		t.Fatalf("execute description: %q", desc)
	}
	run := func(cmd string) (string, map[string]any) {
		t.Helper()
		res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": cmd})
		return testsite.ResultText(res), testsite.Structured(t, res)
	}
	// The proxy listens once the agent runs.
	run(`for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && break; sleep 0.1; done`)

	text, out := run("wget -q -O - http://allowed.test:" + up.port + "/api/hello")
	if out["stdout"] != "hello from allowed.test:"+up.port+"/api/hello\n" {
		t.Fatalf("allowed host: %s", text)
	}
	reqs := up.requests()
	if len(reqs) != 1 || reqs[0].Header.Get("X-Api-Key") != secret || reqs[0].Header.Get("Proxy-Authorization") != "" {
		t.Fatalf("the upstream got %+v", reqs)
	}

	text, out = run("wget -q -O - http://refused.test:" + up.port + "/x")
	if out["exit_code"] == 0.0 || !strings.Contains(out["note"].(string), "[blocked: refused.test (not allowed by the operator);") || !strings.Contains(text, "blocked: refused.test") {
		t.Fatalf("refused host: %s", text)
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("the upstream saw the refused request (%d requests)", n)
	}
	// The console counts it.
	req, _ := http.NewRequest("GET", s.URL+"/console/api/sandbox", nil)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var st console.SandboxStatus
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Egress == nil || len(st.Egress.Refused) != 1 || st.Egress.Refused[0] != (console.HostCount{Host: "refused.test", Count: 1}) {
		t.Fatalf("console: %+v, %v", st.Egress, err)
	}

	// The secret is in no environment, file or argument in the container; the pattern
	// is cut in two so that the command itself does not hold it, and put together in
	// /dev/shm, which is not searched.
	half := len(secret) / 2
	grep := fmt.Sprintf(`a=%q; b=%q; printf '%%s%%s\n' "$a" "$b" >/dev/shm/pattern && [ -s /dev/shm/pattern ] || echo no pattern; { ls -d /proc/[0-9]*/environ /proc/[0-9]*/cmdline; find /etc /sandbox /tmp /var/lib/mcp-sandbox -type f; } 2>/dev/null | xargs grep -l -F -f /dev/shm/pattern 2>/dev/null; rm /dev/shm/pattern; echo done`, secret[:half], secret[half:])
	if _, out = run(grep); out["stdout"] != "done\n" {
		t.Fatalf("the secret is in the container: %v", out["stdout"])
	}
	if got := s.ContainerExec(grep); got != "done\n" {
		t.Fatalf("the secret is in the container (docker exec): %q", got)
	}

	// Without the proxy nothing goes out: no name resolves, no address is routed.
	_, out = run("wget -Y off -q -T 5 -O - http://allowed.test:" + up.port + "/; echo rc=$?; (exec 3<>/dev/tcp/192.0.2.1/80) 2>&1; echo rc=$?")
	if o := out["stdout"].(string); strings.Count(o, "rc=0") != 0 {
		t.Fatalf("a direct connection worked: %q", o)
	}

	// When the agent goes (the model killed it), the proxy listens again through the
	// next one.
	run("pkill -9 -f 'sandbox-agen[t].* serve'; echo killed")
	_, out = run("for i in $(seq 100); do wget -q -O - http://allowed.test:" + up.port + "/again 2>/dev/null && break; sleep 0.1; done")
	if out["stdout"] != "hello from allowed.test:"+up.port+"/again\n" {
		t.Fatalf("after the agent was killed: %v", out)
	}

	// A reload with new rules applies to the running sandbox.
	id := s.ContainerID()
	s.Load(testsite.Options{Directive: egressDirective(up.port, "allowed.test:"+up.port, "refused.test:"+up.port)})
	c = s.Client(ctx)
	if _, out = run("wget -q -O - http://refused.test:" + up.port + "/now"); out["stdout"] != "hello from refused.test:"+up.port+"/now\n" {
		t.Fatalf("after the reload: %v", out)
	}
	if s.ContainerID() != id {
		t.Fatal("the reload recreated the container")
	}
}

// executeDescription is the execute tool's description as a client lists it.
func executeDescription(ctx context.Context, s *testsite.Site, c *mcpclient.Client) string {
	s.T.Helper()
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		s.T.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "execute" {
			return tool.Description
		}
	}
	s.T.Fatal("no execute tool")
	return ""
}

// Where the agent cannot run, nothing listens for the proxy: the description says the
// sandbox is offline.
func TestEgressWithoutAgentIsOffline(t *testing.T) {
	t.Setenv("EGRESS_TEST_SECRET", "x")
	s := testsite.Start(t, testsite.Options{Directive: append([]string{"agent off"}, egressDirective("80", "allowed.test")...)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if desc := executeDescription(ctx, s, s.Client(ctx)); !strings.Contains(desc, "It is offline") || strings.Contains(desc, "allowed.test") {
		t.Fatalf("execute description: %q", desc)
	}
}

// HTTPS through a real Caddy and the Debian image: a credential host is intercepted
// (a program trusting only the system bundle succeeds, the upstream gets the header),
// an allowed host without a credential passes through untouched (a program trusting
// only the upstream's own CA succeeds, nothing added).
func TestEgressHTTPSThroughCaddy(t *testing.T) {
	upCert, upKey, upRoot := testenv.CA(t, "egress test upstream CA")
	upCA := egress.NewCAIssuer([]*x509.Certificate{upCert}, upKey)
	got := make(chan http.Header, 8)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		fmt.Fprintf(w, "tls hello from %s%s\n", r.Host, r.URL.Path)
	}))
	up.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.Certificate(h.ServerName) }}
	up.StartTLS()
	defer up.Close()
	pu, _ := url.Parse(up.URL)
	port := pu.Port()
	trust := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(trust, upRoot, 0o600); err != nil {
		t.Fatal(err)
	}
	secret := "egress-tls-secret-" + testenv.RandomHex(12)
	t.Setenv("EGRESS_TEST_SECRET", secret)
	s := testsite.Start(t, testsite.Options{Image: "code-sandbox-debian:latest", Directive: []string{fmt.Sprintf(`egress {
			allow cred.test:%[1]s plain.test:%[1]s
			host cred.test 127.0.0.1
			host plain.test 127.0.0.1
			credential https://cred.test:%[1]s/api header Authorization {env.EGRESS_TEST_SECRET}
			trust_ca %[2]s
		}`, port, trust)}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	run := func(cmd string) map[string]any {
		t.Helper()
		return testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": cmd}))
	}
	run(`for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && [ -s /var/lib/mcp-sandbox/egress/ca-bundle.pem ] && break; sleep 0.1; done`)
	fetch := `python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode(), end="")' `

	out := run(fetch + "https://cred.test:" + port + "/api/x")
	if out["stdout"] != "tls hello from cred.test:"+port+"/api/x\n" {
		t.Fatalf("intercepted host: %v", out)
	}
	if h := <-got; h.Get("Authorization") != secret {
		t.Fatalf("the upstream got %v", h)
	}

	testsite.Call(ctx, t, c, "write_file", map[string]any{"path": "/sandbox/upstream-ca.pem", "content": string(upRoot)})
	out = run("SSL_CERT_FILE=/sandbox/upstream-ca.pem " + fetch + "https://plain.test:" + port + "/api/x")
	if out["stdout"] != "tls hello from plain.test:"+port+"/api/x\n" {
		t.Fatalf("pass-through host: %v", out)
	}
	if h := <-got; h.Get("Authorization") != "" {
		t.Fatalf("the pass-through upstream got %v", h)
	}
	// The bundle holds the image's roots and ours; the secret is nowhere.
	half := len(secret) / 2
	out = run(fmt.Sprintf(`grep -c 'BEGIN CERTIFICATE' /var/lib/mcp-sandbox/egress/ca-bundle.pem; a=%q; b=%q; printf '%%s%%s\n' "$a" "$b" >/dev/shm/p; { ls -d /proc/[0-9]*/environ /proc/[0-9]*/cmdline; find /etc /sandbox /tmp /var/lib/mcp-sandbox -type f; } 2>/dev/null | xargs grep -l -F -f /dev/shm/p 2>/dev/null; rm /dev/shm/p; echo done`, secret[:half], secret[half:]))
	lines := strings.Split(out["stdout"].(string), "\n")
	if n, _ := strconv.Atoi(lines[0]); n < 50 || out["stdout"] != lines[0]+"\ndone\n" {
		t.Fatalf("bundle and secret: %q", out["stdout"])
	}
}

// git clone over HTTPS from a host whose Basic credentials the proxy adds: the
// repository is cloned, the server saw the credentials, and the clone's config holds
// none.
func TestEgressGitCloneWithBasicCredentials(t *testing.T) {
	backend, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git on this machine")
	}
	repos := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "--bare", filepath.Join(repos, "r.git")},
		{"-C", filepath.Join(repos, "r.git"), "config", "http.receivepack", "false"},
	} {
		if out, err := exec.Command(backend, args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	work := t.TempDir()
	for _, args := range [][]string{
		{"-C", work, "init", "-q"},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "hello through the proxy"},
		{"-C", work, "push", "-q", filepath.Join(repos, "r.git"), "HEAD:refs/heads/main"},
		{"-C", filepath.Join(repos, "r.git"), "symbolic-ref", "HEAD", "refs/heads/main"},
	} {
		if out, err := exec.Command(backend, args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	upCert, upKey, upRoot := testenv.CA(t, "egress test git CA")
	upCA := egress.NewCAIssuer([]*x509.Certificate{upCert}, upKey)
	auth := make(chan string, 64)
	gitHandler := &cgi.Handler{Path: backend, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1"}}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		select {
		case auth <- user + ":" + pass:
		default:
		}
		if !ok || user != "x-access-token" || pass != os.Getenv("EGRESS_TEST_SECRET") {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		gitHandler.ServeHTTP(w, r)
	}))
	up.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.Certificate(h.ServerName) }}
	up.StartTLS()
	defer up.Close()
	pu, _ := url.Parse(up.URL)
	trust := filepath.Join(t.TempDir(), "git-ca.pem")
	if err := os.WriteFile(trust, upRoot, 0o600); err != nil {
		t.Fatal(err)
	}
	secret := "egress-git-secret-" + testenv.RandomHex(12)
	t.Setenv("EGRESS_TEST_SECRET", secret)
	s := testsite.Start(t, testsite.Options{Image: "code-sandbox-debian:latest", Directive: []string{fmt.Sprintf(`egress {
			allow git.test:%[1]s
			host git.test 127.0.0.1
			credential https://git.test:%[1]s basic x-access-token {env.EGRESS_TEST_SECRET}
			trust_ca %[2]s
		}`, pu.Port(), trust)}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	out := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": `for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && [ -s /var/lib/mcp-sandbox/egress/ca-bundle.pem ] && break; sleep 0.1; done
git clone -q https://git.test:` + pu.Port() + `/r.git /sandbox/r && git -C /sandbox/r log --format=%s && cat /sandbox/r/.git/config`}))
	if !strings.HasPrefix(out["stdout"].(string), "hello through the proxy\n") || strings.Contains(out["stdout"].(string), "x-access-token") {
		t.Fatalf("git clone: %v", out)
	}
	if got := <-auth; got != "x-access-token:"+secret {
		t.Fatalf("the git server got %q", got)
	}
}
