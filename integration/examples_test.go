package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	mcpsandbox "github.com/mcp-sandbox/caddy-mcp-sandbox"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// The files under examples/ are documentation that users copy: these tests keep them
// loadable and in step with the plugin.
//
// examples/caddy.json is generated from examples/Caddyfile:
//
//	UPDATE_EXAMPLES=1 go test -run TestExampleCaddyfiles ./integration

// adaptExample adapts a Caddyfile and fails on errors and on warnings.
func adaptExample(t *testing.T, name string, body []byte) []byte {
	t.Helper()
	cfg, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(body, map[string]any{"filename": name})
	if err != nil {
		t.Fatalf("adapting %s: %v", name, err)
	}
	for _, w := range warnings {
		t.Errorf("adapting %s: warning: %s", name, w.String())
	}
	return cfg
}

func readExample(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExampleCaddyfiles(t *testing.T) {
	// The key is a runtime placeholder ({env.SANDBOX_API_KEY}): adapting must not
	// depend on it, but set it as a real deployment would.
	t.Setenv("SANDBOX_API_KEY", testenv.RandomHex(16))

	t.Run("Caddyfile", func(t *testing.T) {
		got := adaptExample(t, "examples/Caddyfile", readExample(t, "../examples/Caddyfile"))
		if os.Getenv("UPDATE_EXAMPLES") == "1" {
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, got, "", "\t"); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			if err := os.WriteFile("../examples/caddy.json", pretty.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want := readExample(t, "../examples/caddy.json")
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatalf("examples/caddy.json is not valid JSON: %v", err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("examples/caddy.json is not what examples/Caddyfile adapts to "+
				"(regenerate with UPDATE_EXAMPLES=1 go test -run TestExampleCaddyfiles ./integration):\n%s", got)
		}

		// The JSON twin configures the handler with the key placeholder, not a value,
		// and every field it sets is one the handler knows.
		h := findHandler(t, w)
		if h["api_key"] != "{env.SANDBOX_API_KEY}" {
			t.Errorf("api_key in caddy.json = %v, want the {env.SANDBOX_API_KEY} placeholder", h["api_key"])
		}
		raw, _ := json.Marshal(h)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		var typed mcpsandbox.Handler
		type withName struct {
			Name string `json:"handler"`
			*mcpsandbox.Handler
		}
		if err := dec.Decode(&withName{Handler: &typed}); err != nil {
			t.Errorf("mcp_sandbox handler in caddy.json: %v", err)
		}

		validateExample(t, want)
	})

	t.Run("Caddyfile.team", func(t *testing.T) {
		cfg := adaptExample(t, "examples/Caddyfile.team", readExample(t, "../examples/Caddyfile.team"))
		// Its keys are files under /etc/caddy/keys: validate it with keys of its own.
		keys := t.TempDir()
		for _, name := range []string{"operator", "alice", "bob", "carol", "carol-github"} {
			if err := os.WriteFile(keys+"/"+name, []byte(testenv.RandomHex(16)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if n := bytes.Count(cfg, []byte("/etc/caddy/keys/")); n < 5 {
			t.Fatalf("examples/Caddyfile.team names %d key files, want every key in a file", n)
		}
		validateExample(t, bytes.ReplaceAll(cfg, []byte("/etc/caddy/keys/"), []byte(keys+"/")))
		var c any
		if err := json.Unmarshal(cfg, &c); err != nil {
			t.Fatal(err)
		}
		people := 0
		var walk func(any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				if v["handler"] == "mcp_sandbox" {
					if ps, ok := v["people"].([]any); ok {
						people = max(people, len(ps))
					}
				}
				for _, x := range v {
					walk(x)
				}
			case []any:
				for _, x := range v {
					walk(x)
				}
			}
		}
		walk(c)
		if people != 3 {
			t.Errorf("examples/Caddyfile.team configures %d people, want alice, bob and carol", people)
		}
	})

	t.Run("Caddyfile.local", func(t *testing.T) {
		cfg := adaptExample(t, "examples/Caddyfile.local", readExample(t, "../examples/Caddyfile.local"))
		var c any
		if err := json.Unmarshal(cfg, &c); err != nil {
			t.Fatal(err)
		}
		validateExample(t, cfg)
		h := findHandler(t, c)
		for k, want := range map[string]any{
			"api_key":   "{env.SANDBOX_API_KEY}",
			"image":     "code-sandbox:latest",
			"container": "mcp-sandbox-dev",
			"volume":    "mcp-sandbox-dev-data",
		} {
			if h[k] != want {
				t.Errorf("%s = %v with no overrides in the environment, want %v", k, h[k], want)
			}
		}
		if !bytes.Contains(cfg, []byte(`:8080"`)) {
			t.Errorf("the local example does not listen on :8080 by default:\n%s", cfg)
		}
	})
}

// validateExample provisions a config without starting it, as `caddy validate` does:
// that checks the handler's settings (Provision does no Docker I/O, so no engine is
// needed). Storage goes to a temporary directory and log files are left out, so nothing
// is written outside the test.
func validateExample(t *testing.T, cfgJSON []byte) {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "logging")
	cfg["admin"] = map[string]any{"disabled": true, "config": map[string]any{"persist": false}}
	cfg["storage"] = map[string]any{"module": "file_system", "root": testsite.StorageDir(t)}
	var c caddy.Config
	b, _ := json.Marshal(cfg)
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&c); err != nil {
		t.Errorf("validating: %v", err)
	}
}

// findHandler returns the one mcp_sandbox handler object in an adapted config.
func findHandler(t *testing.T, cfg any) map[string]any {
	t.Helper()
	var found []map[string]any
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["handler"] == "mcp_sandbox" {
				found = append(found, v)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(cfg)
	if len(found) != 1 {
		t.Fatalf("found %d mcp_sandbox handlers in the config, want 1", len(found))
	}
	return found[0]
}

func TestExampleSystemdUnit(t *testing.T) {
	unit := string(readExample(t, "../examples/mcp-sandbox.service"))
	keys := map[string][]string{}
	section := ""
	for i, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line
		case strings.Contains(line, "=") && section != "":
			k, v, _ := strings.Cut(line, "=")
			keys[section+k] = append(keys[section+k], v)
		default:
			t.Errorf("line %d is neither a section, a setting nor a comment: %q", i+1, line)
		}
	}
	for k, want := range map[string]string{
		"[Service]ExecStart":           "/usr/local/bin/caddy run --config /etc/caddy/Caddyfile",
		"[Service]EnvironmentFile":     "/etc/mcp-sandbox/env",
		"[Service]User":                "caddy",
		"[Service]SupplementaryGroups": "docker",
		"[Service]AmbientCapabilities": "CAP_NET_BIND_SERVICE",
		"[Service]Restart":             "on-failure",
		"[Install]WantedBy":            "multi-user.target",
	} {
		if got := keys[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if got := keys["[Service]ExecReload"]; len(got) != 1 || !strings.Contains(got[0], "caddy reload --config /etc/caddy/Caddyfile") {
		t.Errorf("[Service]ExecReload = %q, want a caddy reload of /etc/caddy/Caddyfile", got)
	}
	// Hardening that would cut the service off from the Docker socket.
	for _, k := range []string{"PrivateUsers", "DynamicUser", "PrivateNetwork"} {
		if v := keys["[Service]"+k]; len(v) > 0 && v[0] != "false" && v[0] != "no" {
			t.Errorf("%s=%s would break access to the Docker socket", k, v[0])
		}
	}
	if v := keys["[Service]RestrictAddressFamilies"]; len(v) > 0 && !strings.Contains(v[0], "AF_UNIX") {
		t.Errorf("RestrictAddressFamilies=%s lacks AF_UNIX, the Docker socket's family", v[0])
	}
	if strings.Contains(strings.Join(keys["[Service]ExecStart"], " "), "--environ") {
		t.Error("caddy run --environ would print SANDBOX_API_KEY to the journal")
	}
}

func TestExampleImageRecipe(t *testing.T) {
	df := string(readExample(t, "../containers/Dockerfile.unified"))
	for _, re := range []string{
		`(?m)^FROM python:\$\{PYTHON_VERSION\}-slim-bookworm$`,
		`(?m)^ARG PYTHON_VERSION=3\.13$`,
		`(?m)^ARG NODE_MAJOR=22$`,
		`(?m)^WORKDIR /sandbox$`,
		`(?m)^CMD \["sleep", "infinity"\]$`,
		`playwright install --with-deps chromium`,
		`docker build -t code-sandbox:latest -f containers/Dockerfile.unified containers/`,
	} {
		if !regexp.MustCompile(re).MatchString(df) {
			t.Errorf("containers/Dockerfile.unified does not match %s", re)
		}
	}
	for _, pkg := range strings.Fields(`numpy pandas scipy matplotlib seaborn plotly scikit-learn
		openpyxl xlsxwriter python-docx python-pptx pypdf pdfplumber reportlab markdown
		beautifulsoup4 lxml requests httpx pillow jinja2 pyyaml tabulate sympy networkx duckdb
		pyarrow playwright
		ffmpeg imagemagick pandoc poppler-utils build-essential git curl wget jq zip unzip
		sqlite3 procps util-linux file less vim-tiny nano fonts-noto-cjk fonts-dejavu
		pnpm yarn bun typescript tsx`) {
		if !regexp.MustCompile(`[\s]` + regexp.QuoteMeta(pkg) + `[\s\\]`).MatchString(df) {
			t.Errorf("containers/Dockerfile.unified does not install %s", pkg)
		}
	}
}

// TestLocalExampleStarts runs examples/Caddyfile.local unchanged in this process (only
// the port, the image and the names come from the environment, as the file allows) and
// checks that the OAuth metadata answers and /mcp asks for a token. It makes no tool
// call, so it needs no Docker engine; a container it might create is removed anyway.
func TestLocalExampleStarts(t *testing.T) {
	port := testsite.FreePort(t)
	name := "mcp-sandbox-test-" + testenv.RandomHex(4)
	t.Setenv("SANDBOX_API_KEY", testenv.RandomHex(16)) // 32 characters
	t.Setenv("SANDBOX_PORT", fmt.Sprint(port))
	t.Setenv("SANDBOX_IMAGE", testengine.Image())
	t.Setenv("SANDBOX_CONTAINER", name)
	t.Setenv("SANDBOX_VOLUME", name+"-data")
	t.Setenv("SANDBOX_NETWORK", "none") // test sandboxes stay off the network

	cfgJSON := adaptExample(t, "examples/Caddyfile.local", readExample(t, "../examples/Caddyfile.local"))
	var cfg map[string]any
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	h := findHandler(t, cfg)
	if h["image"] != testengine.Image() || h["container"] != name {
		t.Fatalf("environment overrides not applied: image %v, container %v", h["image"], h["container"])
	}
	// What the test needs besides the example: no admin endpoint (other Caddy
	// instances may hold :2019) and storage of its own.
	cfg["admin"] = map[string]any{"disabled": true, "config": map[string]any{"persist": false}}
	cfg["storage"] = map[string]any{"module": "file_system", "root": testsite.StorageDir(t)}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		_ = caddy.Stop()
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true})
		_ = cli.VolumeRemove(ctx, name+"-data", true)
	})
	if err := caddy.Load(cfgJSON, true); err != nil {
		t.Fatalf("loading examples/Caddyfile.local: %v", err)
	}

	origin := fmt.Sprintf("http://localhost:%d", port)
	hc := &http.Client{Timeout: 10 * time.Second}
	var resp *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err = hc.Get(origin + "/.well-known/oauth-authorization-server")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Caddy does not answer on %s: %v", origin, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /.well-known/oauth-authorization-server: %s\n%s", resp.Status, body)
	}
	var meta map[string]any
	if err := json.Unmarshal(body, &meta); err != nil {
		t.Fatalf("authorization server metadata is not JSON: %v\n%s", err, body)
	}
	if meta["issuer"] != origin {
		t.Errorf("issuer = %v, want %s", meta["issuer"], origin)
	}

	req, _ := http.NewRequest(http.MethodPost, origin+"/mcp",
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /mcp without a token: %s, want 401", resp.Status)
	}
	wantAuth := `resource_metadata="` + origin + `/.well-known/oauth-protected-resource/mcp"`
	if got := resp.Header.Get("WWW-Authenticate"); !strings.Contains(got, wantAuth) {
		t.Errorf("WWW-Authenticate = %q, want it to contain %s", got, wantAuth)
	}

	// The rest of the site answers with the example's own responses.
	resp, err = hc.Get(origin + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), origin+"/mcp") {
		t.Errorf("GET /: %s %q, want 200 naming %s/mcp", resp.Status, body, origin)
	}
	resp, err = hc.Get(origin + "/nothing-here")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing-here: %s, want 404", resp.Status)
	}
}

// TestExampleKubernetesDeployment: examples/kubernetes/caddy-deployment.yaml is made of
// valid objects (each decoded strictly), its Role is the one docs/kubernetes.md asks
// for and is bound to the Deployment's account, its two replicas share a ReadWriteMany
// claim where the Caddyfile keeps Caddy's storage, its Service selects them, and its
// Caddyfile adapts with no warning and validates (with a kubeconfig in place of the
// in-cluster configuration, which only a pod has).
func TestExampleKubernetesDeployment(t *testing.T) {
	t.Setenv("SANDBOX_API_KEY", testenv.RandomHex(16))
	var (
		role    rbacv1.Role
		binding rbacv1.RoleBinding
		claim   corev1.PersistentVolumeClaim
		config  corev1.ConfigMap
		deploy  appsv1.Deployment
		service corev1.Service
		account corev1.ServiceAccount
	)
	objects := map[string]any{
		"ServiceAccount": &account, "Role": &role, "RoleBinding": &binding, "PersistentVolumeClaim": &claim,
		"ConfigMap": &config, "Deployment": &deploy, "Service": &service,
	}
	seen := map[string]bool{}
	for i, doc := range strings.Split(string(readExample(t, "../examples/kubernetes/caddy-deployment.yaml")), "\n---\n") {
		doc += "\n" // the separator took it
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("document %d: %v", i+1, err)
		}
		obj, ok := objects[meta.Kind]
		if !ok || seen[meta.Kind] {
			t.Fatalf("document %d: kind %q is not expected, or comes twice", i+1, meta.Kind)
		}
		seen[meta.Kind] = true
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("the %s: %v", meta.Kind, err)
		}
	}
	if len(seen) != len(objects) {
		t.Fatalf("found %v, want every one of %d kinds", seen, len(objects))
	}

	if !reflect.DeepEqual(role.Rules, documentedRole(t)) {
		t.Errorf("the Role's rules are not those of docs/kubernetes.md:\n%+v", role.Rules)
	}
	pod := deploy.Spec.Template.Spec
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != pod.ServiceAccountName ||
		binding.Subjects[0].Name != account.Name || binding.Subjects[0].Namespace != deploy.Namespace {
		t.Errorf("the RoleBinding does not bind Role %s to the Deployment's account %s: %+v", role.Name, pod.ServiceAccountName, binding)
	}
	if deploy.Spec.Replicas == nil || *deploy.Spec.Replicas < 2 {
		t.Errorf("the Deployment has %v replicas, want at least 2", deploy.Spec.Replicas)
	}
	labels := deploy.Spec.Template.Labels
	if !reflect.DeepEqual(deploy.Spec.Selector.MatchLabels, labels) || !reflect.DeepEqual(service.Spec.Selector, labels) {
		t.Errorf("the Deployment's selector %v and the Service's %v are not its pods' labels %v", deploy.Spec.Selector.MatchLabels, service.Spec.Selector, labels)
	}
	if !slices.Contains(claim.Spec.AccessModes, corev1.ReadWriteMany) {
		t.Errorf("the claim's access modes are %v: replicas on several nodes need ReadWriteMany", claim.Spec.AccessModes)
	}
	if len(pod.Containers) != 1 || pod.Containers[0].ReadinessProbe == nil {
		t.Fatal("the Deployment's pod has not one container with a readiness probe")
	}
	mounts := map[string]string{} // volume name -> mount path
	for _, m := range pod.Containers[0].VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	dataAt, configAt := "", ""
	for _, v := range pod.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim.Name:
			dataAt = mounts[v.Name]
		case v.ConfigMap != nil && v.ConfigMap.Name == config.Name:
			configAt = mounts[v.Name]
		}
	}
	if configAt != "/etc/caddy" {
		t.Errorf("the ConfigMap is mounted at %q, want /etc/caddy (where the image's caddy run reads its Caddyfile)", configAt)
	}

	cfgJSON := adaptExample(t, "the ConfigMap's Caddyfile", []byte(config.Data["Caddyfile"]))
	var cfg map[string]any
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	storage, _ := cfg["storage"].(map[string]any)
	if root, _ := storage["root"].(string); dataAt == "" || storage["module"] != "file_system" || !strings.HasPrefix(root, dataAt+"/") {
		t.Errorf("Caddy's storage %v is not on the claim (mounted at %q)", storage, dataAt)
	}
	engines, _ := findHandler(t, cfg)["engines"].([]any)
	engine, _ := engines[0].(map[string]any)
	kube, _ := engine["kubernetes"].(map[string]any)
	if len(engines) != 1 || kube == nil || kube["kubeconfig"] != nil || kube["namespace"] != role.Namespace {
		t.Fatalf("the Caddyfile's engine %v: want one kubernetes engine with no kubeconfig, in namespace %s", engines, role.Namespace)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n"+
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kube["kubeconfig"] = kc
	b, _ := json.Marshal(cfg)
	validateExample(t, b)
}
