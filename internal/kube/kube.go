// Package kube is the Kubernetes engine: it serves the engine the sandbox package asks
// for (sandbox.API, in the sandbox's terms: boxapi) with pods, PersistentVolumeClaims
// and NetworkPolicies in one namespace, through the API server only. A box is a
// ConfigMap that records its settings (a made, not started container) and, while it
// runs, a pod of the same name; stopping it deletes the pod and keeps the claim, so
// the next start brings the files back. Programs run through the pods/exec
// subresource, as client-go's remotecommand does (WebSocket, SPDY as a fallback).
//
// The package never connects to a pod's address, and speaks no Docker: what only a
// Docker engine does (checkpoints, image builds, networks) it does not offer, and its
// Capabilities say so. A call it cannot serve returns an error for which
// errdefs.IsNotImplemented is true, saying why.
//
//	cli, err := kube.New(kube.Config{Name: "cluster", Kubeconfig: "/etc/kube/config", Namespace: "sandboxes"})
//	sb, err := sandbox.New(cli, cfg, logger)
package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	netv1 "k8s.io/client-go/kubernetes/typed/networking/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config is one `engine NAME kubernetes { ... }` block.
type Config struct {
	// Name is the engine's name (the engine line's).
	Name string
	// Kubeconfig is the kubeconfig file; "" uses the in-cluster configuration (Caddy
	// running in a pod with a service account).
	Kubeconfig string
	// Context is the kubeconfig context to use; "" its current one.
	Context string
	// Namespace is where the pods, claims, config maps and network policies go.
	Namespace string
	// StorageClass is the claims' storage class; "" the cluster's default.
	StorageClass string
	// VolumeSize is the size each claim requests, in bytes; 0: DefaultVolumeSize.
	VolumeSize int64
	// EphemeralStorage is each pod's ephemeral-storage request and limit, in bytes:
	// what the container may write outside its volumes (its writable layer: packages
	// installed, /tmp, /root) plus its logs. A pod past it is evicted by the kubelet;
	// the next start makes a new pod, the volumes kept. 0: none asked for and no limit.
	// It applies to pods made after it changes (a running pod cannot be resized in it).
	EphemeralStorage int64
	// PullPolicy is the pods' imagePullPolicy: Always, IfNotPresent or Never; "":
	// IfNotPresent.
	PullPolicy string
	// Log receives client-go's log messages, which would otherwise go to the
	// process's stderr. klog is global: the latest non-nil Log given to New receives
	// the messages of every engine client; nil keeps the one before (none: dropped).
	Log LogFunc
}

// DefaultVolumeSize is the size a claim requests when the configuration names none.
const DefaultVolumeSize = 10 << 30

// dialTimeout bounds connecting to the API server.
const dialTimeout = 10 * time.Second

// apiQPS and apiBurst bound the requests a client sends the API server, a second and
// at once; an engine's sandboxes share its client (Shared), so these bound the engine.
// Every command reads its pod first (is it still running?): client-go's default, 5 a
// second and 10 at once, held a Caddy to 5 commands a second. The API server guards
// itself from a busy client (API Priority and Fairness).
const (
	apiQPS   = 500
	apiBurst = 1000
)

// DefaultNamespace is the namespace used when the configuration names none.
const DefaultNamespace = "default"

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// Validate reports every problem of the configuration at once. It does no I/O.
func (c Config) Validate() error {
	var errs []error
	if c.Namespace != "" && !dnsLabel.MatchString(c.Namespace) {
		errs = append(errs, fmt.Errorf("namespace %q is not a valid Kubernetes namespace (lower-case letters, digits and '-', at most 63)", c.Namespace))
	}
	if c.VolumeSize < 0 {
		errs = append(errs, fmt.Errorf("volume_size %d is negative", c.VolumeSize))
	}
	if c.EphemeralStorage < 0 {
		errs = append(errs, fmt.Errorf("ephemeral_storage %d is negative", c.EphemeralStorage))
	}
	switch c.PullPolicy {
	case "", "Always", "IfNotPresent", "Never":
	default:
		errs = append(errs, fmt.Errorf("image_pull_policy %q: want Always, IfNotPresent or Never", c.PullPolicy))
	}
	return errors.Join(errs...)
}

// Client is a Kubernetes engine. Its methods are safe for concurrent use.
type Client struct {
	cfg  Config
	rest *rest.Config
	core corev1.CoreV1Interface
	net  netv1.NetworkingV1Interface
	ns   string
	host string // DaemonHost: kubernetes://<API server host>/<namespace>
}

// New makes a client for the engine. It reads the kubeconfig file and does no other
// I/O: the API server is first asked on the first call.
func New(c Config) (*Client, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("kubernetes engine %s: %w", c.Name, err)
	}
	var rc *rest.Config
	var err error
	if c.Kubeconfig == "" {
		rc, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes engine %s: no kubeconfig is set and Caddy is not running in a pod (%w); set kubeconfig PATH in the engine block", c.Name, err)
		}
	} else {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: c.Kubeconfig}
		over := &clientcmd.ConfigOverrides{CurrentContext: c.Context}
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, over).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes engine %s: reading kubeconfig %s: %w", c.Name, c.Kubeconfig, err)
		}
	}
	ns := c.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	setLog(c.Log)
	rc.UserAgent = "caddy-mcp-sandbox"
	rc.QPS, rc.Burst = apiQPS, apiBurst
	rc.WarningHandlerWithContext = warningLog{}
	if rc.Dial == nil {
		// An API server that does not answer fails a call in dialTimeout, not when
		// the caller's context ends.
		rc.Dial = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	}
	core, err := corev1.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes engine %s: %w", c.Name, err)
	}
	nc, err := netv1.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes engine %s: %w", c.Name, err)
	}
	return &Client{cfg: c, rest: rc, core: core, net: nc, ns: ns, host: "kubernetes://" + hostOf(rc.Host) + "/" + ns}, nil
}

// shared holds the clients Shared made, by sharedKey.
var shared struct {
	sync.Mutex
	m map[string]*Client
}

// Shared returns a client for the engine, made once per configuration and kubeconfig
// file as it is now (an edited kubeconfig gets a client of its own from then on), so
// that an engine's sandboxes share its connections to the API server: client-go keeps a
// connection pool per client made as New makes them. Log, when not nil, becomes the
// receiver of client-go's messages as with New.
func Shared(c Config) (*Client, error) {
	key := sharedKey(c)
	shared.Lock()
	defer shared.Unlock()
	if cli := shared.m[key]; cli != nil {
		setLog(c.Log)
		return cli, nil
	}
	cli, err := New(c)
	if err != nil {
		return nil, err
	}
	if shared.m == nil {
		shared.m = map[string]*Client{}
	}
	shared.m[key] = cli
	return cli, nil
}

// sharedKey is what makes two engines' clients the same: every setting but Log, and
// the kubeconfig file's modification time and size.
func sharedKey(c Config) string {
	c.Log = nil
	key := fmt.Sprintf("%#v", c)
	if c.Kubeconfig != "" {
		if st, err := os.Stat(c.Kubeconfig); err == nil {
			key += fmt.Sprintf("@%d/%d", st.ModTime().UnixNano(), st.Size())
		}
	}
	return key
}

// hostOf is the host[:port] of the API server's URL.
func hostOf(h string) string {
	if u, err := url.Parse(h); err == nil && u.Host != "" {
		return u.Host
	}
	return h
}

// Close releases nothing: client-go keeps no connection that must be closed.
func (c *Client) Close() error { return nil }

// DaemonHost is kubernetes://<API server host>/<namespace>.
func (c *Client) DaemonHost() string { return c.host }

// Capabilities: none beyond a pod and programs in it. No checkpoints (no image of a
// pod's system), no second pod on a sandbox's ReadWriteOnce claim, no pause, no pids
// of execs, and no files of this machine in a pod.
func (c *Client) Capabilities() boxapi.Capabilities { return boxapi.Capabilities{} }

// Reachable asks the API server for its version.
func (c *Client) Reachable(ctx context.Context) error {
	if err := c.core.RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return c.wrap(err, "asking the API server")
	}
	return nil
}

// EngineInfo says nothing the sandbox could use: its CPU count is unknown (a
// sandbox's cpus stay as configured; the cluster enforces its own limits), and a
// runtime class the cluster lacks is refused when the pod is made.
func (c *Client) EngineInfo(ctx context.Context) (boxapi.EngineInfo, error) {
	return boxapi.EngineInfo{}, nil
}

// notImplemented is the error of a call this engine does not serve.
func notImplemented(what string) error {
	return fmt.Errorf("%s is not supported on a Kubernetes engine: %w", what, cerrdefs.ErrNotImplemented)
}
