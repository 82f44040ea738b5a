package fleet

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"sync"

	"github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// The kinds of engine.
const (
	KindDocker     = "docker"     // a Docker engine (the default)
	KindKubernetes = "kubernetes" // a Kubernetes cluster's API server (engines/kubernetes)
)

// Kind is an engine kind other than Docker, which a package of its own provides
// (engines/kubernetes, a Caddy module): a build without that package carries none of
// its code, and an engine line of its kind is refused with the build line to use.
type Kind interface {
	// ValidateEngine reports what is wrong with e's settings of that kind. No I/O.
	ValidateEngine(e Engine) error
	// NewEngineClient makes e's client from its settings; logger receives what the
	// kind's libraries would print. It does no I/O beyond reading its files.
	NewEngineClient(e Engine, logger *zap.Logger) (sandbox.API, error)
}

var (
	kindsMu sync.RWMutex
	kinds   = map[string]Kind{}
)

// RegisterKind makes engines of kind k's kind possible; the package providing it calls
// it from init.
func RegisterKind(name string, k Kind) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	kinds[name] = k
}

// kindOf returns the registered Kind of e, or an error naming the build line that
// includes it.
func kindOf(e Engine) (Kind, error) {
	kindsMu.RLock()
	k := kinds[e.Kind]
	kindsMu.RUnlock()
	if k == nil {
		return nil, fmt.Errorf("engine %s: this Caddy was built without the %s engine; build it with xcaddy build --with github.com/mcp-sandbox/caddy-mcp-sandbox --with github.com/mcp-sandbox/caddy-mcp-sandbox/engines/%s (the repository's cmd/caddy includes it)", e.Name, e.Kind, e.Kind)
	}
	return k, nil
}

// Engine is one engine the sandboxes are placed on (an `engine` line): a Docker engine,
// or a Kubernetes cluster, which then is the only engine and places the pods itself.
type Engine struct {
	// Name names the engine in the placement record and the container's label.
	Name string `json:"name"`
	// Kind is "docker" or "kubernetes". Default: docker.
	Kind string `json:"kind,omitempty"`
	// Host is a Docker engine's address: unix:///var/run/docker.sock or
	// tcp://host:2376. Empty for a Kubernetes engine.
	Host string `json:"host,omitempty"`
	// TLSCA, TLSCert and TLSKey are files as Docker's --tlscacert, --tlscert and
	// --tlskey: the CA that signed the engine's certificate and the client's own
	// certificate and key. Empty: no TLS.
	TLSCA   string `json:"tls_ca,omitempty"`
	TLSCert string `json:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty"`
	// Kubernetes are a Kubernetes engine's settings (kind kubernetes only).
	Kubernetes KubeEngine `json:"kubernetes,omitzero"`
}

// KubeEngine is how a Kubernetes engine reaches its cluster and what it asks of it
// (kube.Config without the name). A plain value, so that an Engine compares and prints
// the same across configuration reloads.
type KubeEngine struct {
	// Kubeconfig is the kubeconfig file. Empty: the in-cluster configuration (Caddy
	// running in a pod, with its service account).
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Context is the kubeconfig's context to use. Default: its current context.
	Context string `json:"context,omitempty"`
	// Namespace holds the sandboxes' pods, claims, config maps and network policies.
	// Default: default.
	Namespace string `json:"namespace,omitempty"`
	// StorageClass is the storage class of the claims mounted at /sandbox. Default:
	// the cluster's default storage class.
	StorageClass string `json:"storage_class,omitempty"`
	// VolumeSize is the size, in bytes, each claim requests. Default: 10 GiB.
	VolumeSize int64 `json:"volume_size,omitempty"`
	// EphemeralStorage is, in bytes, each pod's ephemeral-storage request and limit:
	// what a sandbox may write outside /sandbox before the kubelet evicts its pod.
	// Default: none (the pods ask for none and have no such limit).
	EphemeralStorage int64 `json:"ephemeral_storage,omitempty"`
	// ImagePullPolicy is the pods' imagePullPolicy: Always, IfNotPresent or Never.
	// Default: IfNotPresent.
	ImagePullPolicy string `json:"image_pull_policy,omitempty"`
}

// IsKubernetes reports whether the engine is a Kubernetes cluster.
func (e Engine) IsKubernetes() bool { return e.Kind == KindKubernetes }

// StorageLimitText is what the model is told of the engine's ephemeral_storage, ""
// when it sets none: writing past it outside /sandbox costs the pod and everything
// outside /sandbox, so large files belong under /sandbox.
func (e Engine) StorageLimitText() string {
	n := e.Kubernetes.EphemeralStorage
	if !e.IsKubernetes() || n <= 0 {
		return ""
	}
	return "Outside /sandbox (installed packages, /tmp, /root, caches) the sandbox may write " + human.Size(n) +
		" in all: past that the pod is evicted and made again, and everything outside /sandbox is lost. Keep downloads, builds and caches under /sandbox."
}

// Kubernetes is the Kubernetes engine among engines: the only one when there is one
// (ValidateEngines); ok false without.
func Kubernetes(engines []Engine) (e Engine, ok bool) {
	for _, e := range engines {
		if e.IsKubernetes() {
			return e, true
		}
	}
	return Engine{}, false
}

// validName is what a person or an engine may be called: short, and safe in Docker
// names and labels and in storage keys.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,31}$`)

// ValidName reports whether name may name a person or an engine: 1 to 32 lower-case
// letters, digits, '_', '.' or '-', starting with a letter or digit.
func ValidName(name string) bool { return validName.MatchString(name) }

func (e Engine) tls() bool { return e.TLSCA != "" || e.TLSCert != "" || e.TLSKey != "" }

// ValidateEngines reports every engine line that cannot work. It does no I/O.
func ValidateEngines(engines []Engine) error {
	var errs []error
	seen := map[string]bool{}
	for _, e := range engines {
		if !ValidName(e.Name) {
			errs = append(errs, fmt.Errorf("engine %q: a name is 1 to 32 of a-z, 0-9, '_', '.', '-', starting with a letter or digit", e.Name))
		}
		if seen[e.Name] {
			errs = append(errs, fmt.Errorf("engine %q is named twice", e.Name))
		}
		seen[e.Name] = true
		switch e.Kind {
		case "", KindDocker:
			if e.Kubernetes != (KubeEngine{}) {
				errs = append(errs, fmt.Errorf("engine %s: kubernetes settings on a Docker engine; set kind kubernetes (`engine %s kubernetes { ... }`) or remove them", e.Name, e.Name))
			}
		case KindKubernetes:
			if len(engines) > 1 {
				errs = append(errs, fmt.Errorf("engine %s: a kubernetes engine must be the only engine line: the cluster places the sandboxes on its nodes; remove the other engine lines (their sandboxes stay on those Docker engines)", e.Name))
			}
			if e.Host != "" || e.tls() {
				errs = append(errs, fmt.Errorf("engine %s: a kubernetes engine takes no address or tls_* settings; the kubeconfig says how to reach the API server", e.Name))
			}
			if k, err := kindOf(e); err != nil {
				errs = append(errs, err)
			} else if err := k.ValidateEngine(e); err != nil {
				errs = append(errs, fmt.Errorf("engine %s: %w", e.Name, err))
			}
			continue
		default:
			errs = append(errs, fmt.Errorf("engine %s: kind %q: want docker or kubernetes", e.Name, e.Kind))
			continue
		}
		u, err := client.ParseHostURL(e.Host)
		if err != nil {
			errs = append(errs, fmt.Errorf("engine %s: address %q: %w", e.Name, e.Host, err))
			continue
		}
		if u.Scheme != "unix" && u.Scheme != "tcp" && u.Scheme != "npipe" {
			errs = append(errs, fmt.Errorf("engine %s: address %q: want unix://, tcp:// or npipe:// (the Docker Go client does not speak ssh://)", e.Name, e.Host))
			continue
		}
		if e.tls() {
			switch {
			case u.Scheme != "tcp":
				errs = append(errs, fmt.Errorf("engine %s: TLS needs a tcp:// address, not %s", e.Name, e.Host))
			case e.TLSCA == "":
				errs = append(errs, fmt.Errorf("engine %s: tls_ca is missing: without it the engine's certificate is not checked", e.Name))
			case (e.TLSCert == "") != (e.TLSKey == ""):
				errs = append(errs, fmt.Errorf("engine %s: tls_cert and tls_key go together", e.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// NewClient makes a client for a named engine: a Docker client, or for a Kubernetes
// engine its registered Kind's (engines/kubernetes). Unlike the default engine's, it
// takes nothing from the environment (DOCKER_CERT_PATH would apply to every engine). A
// Docker client is shared by the callers for one engine (sandbox.SharedDocker). It
// reads the TLS files or the kubeconfig and does no other I/O. logger receives a
// Kubernetes engine's client-go messages (KubeLog).
func (e Engine) NewClient(logger *zap.Logger) (sandbox.API, error) {
	if e.IsKubernetes() {
		k, err := kindOf(e)
		if err != nil {
			return nil, err
		}
		return k.NewEngineClient(e, logger)
	}
	opts := []client.Opt{client.WithHost(e.Host), client.WithAPIVersionNegotiation()}
	if e.tls() {
		opts = append(opts, client.WithTLSClientConfig(e.TLSCA, e.TLSCert, e.TLSKey))
	}
	// One client per engine and TLS files as they are now: a certificate renewed on
	// disk gets a client of its own from then on.
	key := "engine\x00" + e.Host
	for _, f := range []string{e.TLSCA, e.TLSCert, e.TLSKey} {
		if f == "" {
			continue
		}
		key += "\x00" + f
		if st, err := os.Stat(f); err == nil {
			key += fmt.Sprintf("@%d/%d", st.ModTime().UnixNano(), st.Size())
		}
	}
	cli, err := sandbox.SharedDocker(key, func() (*client.Client, error) { return client.NewClientWithOpts(opts...) })
	if err != nil {
		return nil, fmt.Errorf("creating Docker client for engine %s (%s): %w", e.Name, e.Host, err)
	}
	return cli, nil
}

// KubeLog is the Kubernetes engine's log function (kube.LogFunc) that writes
// client-go's messages to logger (named "kubernetes"): a warning when kube says it is
// one, else at debug level (the expected end of an exec's stream, informational
// messages).
func KubeLog(logger *zap.Logger) func(msg string, err error, warn bool) {
	if logger == nil {
		return nil
	}
	logger = logger.Named("kubernetes")
	return func(msg string, err error, warn bool) {
		fields := []zap.Field{zap.String("from", "client-go")}
		if err != nil {
			fields = append(fields, zap.Error(err))
		}
		if warn {
			logger.Warn(msg, fields...)
		} else {
			logger.Debug(msg, fields...)
		}
	}
}
