package fleet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/kube"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// The Kubernetes kind as engines/kubernetes registers it in a build; that package
// imports this one, so these tests register their own.
func init() { RegisterKind(KindKubernetes, testKubeKind{}) }

type testKubeKind struct{}

func (testKubeKind) config(e Engine) kube.Config {
	k := e.Kubernetes
	return kube.Config{Name: e.Name, Kubeconfig: k.Kubeconfig, Context: k.Context, Namespace: k.Namespace,
		VolumeSize: k.VolumeSize, EphemeralStorage: k.EphemeralStorage, PullPolicy: k.ImagePullPolicy}
}

func (k testKubeKind) ValidateEngine(e Engine) error { return k.config(e).Validate() }

func (k testKubeKind) NewEngineClient(e Engine, logger *zap.Logger) (sandbox.API, error) {
	c := k.config(e)
	c.Log = KubeLog(logger)
	cli, err := kube.New(c)
	if err != nil {
		return nil, err
	}
	return cli, nil
}

// TestKindNotBuiltIn: in a build without the Kubernetes engine's package, a
// kubernetes engine line is refused with the build line that includes it.
func TestKindNotBuiltIn(t *testing.T) {
	kindsMu.Lock()
	saved := kinds[KindKubernetes]
	delete(kinds, KindKubernetes)
	kindsMu.Unlock()
	t.Cleanup(func() { RegisterKind(KindKubernetes, saved) })
	eng := Engine{Name: "cluster", Kind: KindKubernetes}
	const want = "--with github.com/mcp-sandbox/caddy-mcp-sandbox/engines/kubernetes"
	if err := ValidateEngines([]Engine{eng}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("validating: %v, want the build line", err)
	}
	if _, err := eng.NewClient(zap.NewNop()); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a client: %v, want the build line", err)
	}
}

// kubeconfigTo writes a kubeconfig whose one cluster is server, in a directory of the
// test's, and returns its path.
func kubeconfigTo(t *testing.T, server string) string {
	t.Helper()
	doc := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: ` + server + `
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: not-a-real-token
contexts:
- name: here
  context: {cluster: c, user: u, namespace: elsewhere}
current-context: here
`
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNewClientKind: a kubernetes engine's NewClient is the Kubernetes engine's client,
// made from the kubeconfig without asking the API server (nothing listens on
// 127.0.0.1:1); a docker engine's is Docker's; a kubeconfig that is not there fails
// with its path in the error.
func TestNewClientKind(t *testing.T) {
	eng := Engine{Name: "cluster", Kind: KindKubernetes,
		Kubernetes: KubeEngine{Kubeconfig: kubeconfigTo(t, "https://127.0.0.1:1"), Namespace: "sandboxes"}}
	if err := ValidateEngines([]Engine{eng}); err != nil {
		t.Fatal(err)
	}
	cli, err := eng.NewClient(zap.NewNop())
	if err != nil {
		t.Fatalf("kubernetes engine: %v", err)
	}
	defer cli.Close()
	if _, ok := cli.(*kube.Client); !ok {
		t.Fatalf("kubernetes engine: client %T, want *kube.Client", cli)
	}
	if got, want := cli.DaemonHost(), "kubernetes://127.0.0.1:1/sandboxes"; got != want {
		t.Errorf("DaemonHost %q, want %q", got, want)
	}

	docker := Engine{Name: "big", Host: "tcp://127.0.0.1:1"}
	dcli, err := docker.NewClient(zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer dcli.Close()
	if _, ok := dcli.(*kube.Client); ok || dcli.DaemonHost() != "tcp://127.0.0.1:1" {
		t.Errorf("docker engine: client %T for %s", dcli, dcli.DaemonHost())
	}

	missing := eng
	missing.Kubernetes.Kubeconfig = filepath.Join(t.TempDir(), "absent")
	if _, err := missing.NewClient(zap.NewNop()); err == nil || !strings.Contains(err.Error(), missing.Kubernetes.Kubeconfig) {
		t.Errorf("a kubeconfig that is not there: %v, want an error naming it", err)
	}
}

// TestValidateKubeEngines: a kubernetes engine is the only engine line, takes no
// address or TLS files, and its settings pass kube.Config.Validate; kubernetes
// settings on a Docker engine and unknown kinds are refused.
func TestValidateKubeEngines(t *testing.T) {
	kubeEng := Engine{Name: "k", Kind: KindKubernetes}
	for _, c := range []struct {
		engines []Engine
		want    string // "" valid
	}{
		{[]Engine{kubeEng}, ""},
		{[]Engine{{Name: "k", Kind: KindKubernetes, Kubernetes: KubeEngine{Namespace: "a-b", ImagePullPolicy: "Never", VolumeSize: 1 << 30}}}, ""},
		{[]Engine{kubeEng, {Name: "d", Host: "unix:///x.sock"}}, "must be the only engine line"},
		{[]Engine{{Name: "k", Kind: KindKubernetes, Host: "tcp://h:2376"}}, "takes no address"},
		{[]Engine{{Name: "k", Kind: KindKubernetes, TLSCA: "/ca.pem"}}, "takes no address or tls_*"},
		{[]Engine{{Name: "k", Kind: KindKubernetes, Kubernetes: KubeEngine{Namespace: "Big_NS"}}}, `namespace "Big_NS"`},
		{[]Engine{{Name: "k", Kind: KindKubernetes, Kubernetes: KubeEngine{ImagePullPolicy: "Sometimes"}}}, `image_pull_policy "Sometimes"`},
		{[]Engine{{Name: "k", Kind: KindKubernetes, Kubernetes: KubeEngine{EphemeralStorage: 2 << 30}}}, ""},
		{[]Engine{{Name: "k", Kind: KindKubernetes, Kubernetes: KubeEngine{EphemeralStorage: -1}}}, "ephemeral_storage -1 is negative"},
		{[]Engine{{Name: "d", Host: "unix:///x.sock", Kubernetes: KubeEngine{Namespace: "x"}}}, "kubernetes settings on a Docker engine"},
		{[]Engine{{Name: "d", Kind: "nomad", Host: "unix:///x.sock"}}, `kind "nomad": want docker or kubernetes`},
		{[]Engine{{Name: "d", Kind: KindDocker, Host: "unix:///x.sock"}}, ""},
	} {
		err := ValidateEngines(c.engines)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.engines, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want an error with %q", c.engines, err, c.want)
		}
	}
}

// failingStorage fails every call: a placement that touches storage fails.
type failingStorage struct{ calls int }

func (s *failingStorage) fail() error                                  { s.calls++; return errors.New("storage must not be used") }
func (s *failingStorage) Lock(context.Context, string) error           { return s.fail() }
func (s *failingStorage) Unlock(context.Context, string) error         { return s.fail() }
func (s *failingStorage) Store(context.Context, string, []byte) error  { return s.fail() }
func (s *failingStorage) Load(context.Context, string) ([]byte, error) { return nil, s.fail() }
func (s *failingStorage) Delete(context.Context, string) error         { return s.fail() }
func (s *failingStorage) List(context.Context, string, bool) ([]string, error) {
	return nil, s.fail()
}

// TestKubePlacement: with a kubernetes engine a person's sandbox is on it at once:
// no placement record is read or written, no engine is probed (the API server at
// 127.0.0.1:1 would not answer), with storage or without.
func TestKubePlacement(t *testing.T) {
	eng := Engine{Name: "cluster", Kind: KindKubernetes,
		Kubernetes: KubeEngine{Kubeconfig: kubeconfigTo(t, "https://127.0.0.1:1")}}
	st := &failingStorage{}
	f := &Fleet{o: Options{Engines: []Engine{eng}, Storage: st}, logger: zap.NewNop()}
	got, err := f.place(t.Context(), "box-alice")
	if err != nil || got != eng {
		t.Fatalf("place: %+v %v, want the kubernetes engine", got, err)
	}
	if st.calls != 0 {
		t.Errorf("placing on a kubernetes engine used storage %d times", st.calls)
	}
	f.o.Storage = nil
	if got, err := f.place(t.Context(), "box-bob"); err != nil || got != eng {
		t.Errorf("place without storage: %+v %v", got, err)
	}

	// Through the fleet: a person's entry is acquired on the kubernetes engine, and
	// a file storage is left without a placement record.
	fs0 := &certmagic.FileStorage{Path: t.TempDir()}
	p := newPool(t)
	fl, err := New(Options{Base: testBase("kube-place"), People: []Person{{Name: "alice"}}, Engines: []Engine{eng},
		Acquire: p.acquire, Storage: fs0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fl.Close() })
	e, err := fl.Entry(t.Context(), "alice")
	if err != nil {
		t.Fatalf("alice's entry: %v", err)
	}
	if e.Engine() != eng || fl.Operator().Engine() != eng {
		t.Errorf("alice on %+v, the operator on %+v; want both on %s", e.Engine(), fl.Operator().Engine(), eng.Name)
	}
	if _, err := fs0.Load(t.Context(), PlacementPrefix+"kube-place-alice"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("placement record of alice: %v, want none", err)
	}
	// Checkpoints are not offered on it (the tools and the console ask this).
	if fl.HasCheckpoints() {
		t.Error("a fleet on a kubernetes engine has checkpoints")
	}
	docker, err := New(Options{Base: testBase("kube-place-docker"), Acquire: p.acquire})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = docker.Close() })
	if !docker.HasCheckpoints() {
		t.Error("a fleet on Docker has no checkpoints")
	}
}

// TestKubeImageMissing: a missing image on a kubernetes engine starts no build and
// tells the operator to make the image available to the nodes.
func TestKubeImageMissing(t *testing.T) {
	eng := Engine{Name: "cluster", Kind: KindKubernetes,
		Kubernetes: KubeEngine{Kubeconfig: kubeconfigTo(t, "https://127.0.0.1:1")}}
	cli, err := eng.NewClient(zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(cli, testBase("kube-image"), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := NewEntry(EntryOptions{Sandbox: sb, Client: cli, Engine: eng})
	t.Cleanup(func() { _ = e.Destruct() })
	msg := e.ImageMissing([]byte("FROM scratch\n"))
	if !strings.Contains(msg, "registry the nodes pull from") {
		t.Errorf("message %q", msg)
	}
	if started, _, _ := e.ImageBuild(); started {
		t.Error("a build was started on a kubernetes engine")
	}
}

// TestKubeEngineReachesCluster: against the development cluster (MCP_SANDBOX_KUBECONFIG),
// a kubernetes engine line's client answers Ping through the API server, and the same
// line with a context the kubeconfig lacks fails with the context's name.
func TestKubeEngineReachesCluster(t *testing.T) {
	kc := os.Getenv("MCP_SANDBOX_KUBECONFIG")
	switch {
	case testing.Short():
		t.Skip("-short: no Kubernetes cluster")
	case kc == "":
		t.Skip("MCP_SANDBOX_KUBECONFIG is not set: no Kubernetes cluster configured (make test sets it)")
	}
	eng := Engine{Name: "cluster", Kind: KindKubernetes, Kubernetes: KubeEngine{Kubeconfig: kc, Namespace: "default"}}
	cli, err := eng.NewClient(zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := cli.Reachable(ctx); err != nil {
		t.Fatalf("Ping through the API server: %v", err)
	}
	bad := eng
	bad.Kubernetes.Context = "wiring-no-such-context"
	if _, err := bad.NewClient(zap.NewNop()); err == nil || !strings.Contains(err.Error(), "wiring-no-such-context") {
		t.Errorf("a context the kubeconfig lacks: %v", err)
	}
}

// TestKubeLog: client-go's messages land in Caddy's log under "kubernetes", a warning
// when kube says so and at debug level otherwise, with the error as a field.
func TestKubeLog(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	log := KubeLog(zap.New(core))
	log("Copying stdin failed", os.ErrClosed, false)
	log("Observed a panic", nil, true)
	got := logs.AllUntimed()
	if len(got) != 2 {
		t.Fatalf("got %d entries, want 2: %+v", len(got), got)
	}
	if e := got[0]; e.Level != zapcore.DebugLevel || e.LoggerName != "kubernetes" || e.Message != "Copying stdin failed" || e.ContextMap()["error"] != os.ErrClosed.Error() {
		t.Errorf("expected end: %+v, want debug under kubernetes with its error", e)
	}
	if e := got[1]; e.Level != zapcore.WarnLevel || e.Message != "Observed a panic" {
		t.Errorf("panic: %+v, want a warning", e)
	}
	if KubeLog(nil) != nil {
		t.Errorf("KubeLog(nil) is not nil")
	}
}

// noStatsEngine is an engine whose one container runs and which has no usage figures
// (a Kubernetes cluster without the metrics API); every other call fails.
type noStatsEngine struct{ sandbox.API }

func (noStatsEngine) InspectBox(_ context.Context, name string) (boxapi.Box, error) {
	return boxapi.Box{ID: name, Name: name, State: boxapi.BoxState{Status: "running", Running: true}}, nil
}

func (noStatsEngine) BoxUsage(context.Context, string, time.Duration) (boxapi.Usage, error) {
	return boxapi.Usage{}, fmt.Errorf("stats: %w", errNoMetrics{})
}

// errNoMetrics is a not-implemented error as errdefs sees one (its method).
type errNoMetrics struct{}

func (errNoMetrics) Error() string   { return "no metrics API" }
func (errNoMetrics) NotImplemented() {}

func (noStatsEngine) ContainerExecCreate(context.Context, string, container.ExecOptions) (container.ExecCreateResponse, error) {
	return container.ExecCreateResponse{}, errors.New("no exec here")
}

func (noStatsEngine) DaemonHost() string { return "kubernetes://test/default" }

// TestStatusNoUsage: a running sandbox whose engine gives no usage figures is shown so
// (NoUsage), not as an idle one, for a configured person and a removed one alike.
func TestStatusNoUsage(t *testing.T) {
	acquire := func(eng Engine, cfg sandbox.Config) (*Entry, func() error, error) {
		sb, err := sandbox.New(noStatsEngine{}, cfg, nil)
		if err != nil {
			return nil, nil, err
		}
		return NewEntry(EntryOptions{Sandbox: sb, Client: noStatsEngine{}, Engine: eng}), func() error { return nil }, nil
	}
	base := testBase("nousage")
	base.NoAgent = true // commands are plain execs, which fail here
	f, err := New(Options{Base: base, Acquire: acquire})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	st := f.status(t.Context(), "")
	if st.State != "running" || !st.NoUsage {
		t.Errorf("status: state %q NoUsage %v, want running and true", st.State, st.NoUsage)
	}
	rm := f.removedStatus(t.Context(), Existing{Container: sandbox.Container{Name: "nousage-dave", State: "running"}, Person: "dave", Engine: Engine{}})
	if rm.State != "running" || !rm.NoUsage {
		t.Errorf("removed status: state %q NoUsage %v (%v), want running and true", rm.State, rm.NoUsage, rm.Err)
	}
}

// TestStorageLimitText: the model is told of a kubernetes engine's ephemeral_storage
// as a size, and of nothing without one (or on Docker).
func TestStorageLimitText(t *testing.T) {
	k := Engine{Name: "k", Kind: KindKubernetes, Kubernetes: KubeEngine{EphemeralStorage: 2 << 30}}
	if got := k.StorageLimitText(); !strings.Contains(got, "2.0 GiB") || !strings.Contains(got, "under /sandbox") || !strings.Contains(got, "evicted") {
		t.Errorf("2Gi: %q", got)
	}
	for _, e := range []Engine{{Name: "k", Kind: KindKubernetes}, {Name: "d", Host: "unix:///x.sock", Kubernetes: KubeEngine{EphemeralStorage: 1 << 30}}} {
		if got := e.StorageLimitText(); got != "" {
			t.Errorf("%+v: %q, want none", e, got)
		}
	}
}

// TestCustomImageMissing: a missing image that is not ours (no recipe) is not built,
// and the hint says to pull or build it from its own Dockerfile, never to tag it with
// the standard image's recipe.
func TestCustomImageMissing(t *testing.T) {
	eng := Engine{Host: "unix:///nonexistent/docker.sock"}
	cli, err := eng.NewClient(zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	base := testBase("custom-image")
	base.Image = "registry.example/team/python-tools:3"
	sb, err := sandbox.New(cli, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := NewEntry(EntryOptions{Sandbox: sb, Client: cli, Engine: eng})
	t.Cleanup(func() { _ = e.Destruct() })
	msg := e.ImageMissing(nil)
	if !strings.Contains(msg, "docker pull registry.example/team/python-tools:3") || !strings.Contains(msg, "its own Dockerfile") ||
		strings.Contains(msg, "Dockerfile.unified") {
		t.Errorf("message %q", msg)
	}
	if started, _, _ := e.ImageBuild(); started {
		t.Error("a build was started for an image that is not ours")
	}
}
