// Package kubernetes adds the Kubernetes engine to the mcp_sandbox plugin: with it in
// the build, an `engine NAME kubernetes { ... }` line places every sandbox as a pod of
// a cluster, with /sandbox on a persistent volume claim (docs/kubernetes.md). It is a
// Caddy module of its own, mcp_sandbox.engines.kubernetes, so that a build of the
// plugin alone carries none of client-go:
//
//	xcaddy build --with github.com/mcp-sandbox/caddy-mcp-sandbox \
//	  --with github.com/mcp-sandbox/caddy-mcp-sandbox/engines/kubernetes
//
// The repository's cmd/caddy includes it.
package kubernetes

import (
	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/kube"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

func init() {
	caddy.RegisterModule(Engine{})
	fleet.RegisterKind(fleet.KindKubernetes, Engine{})
}

// Engine is the Kubernetes engine kind: it checks an engine line's settings and makes
// its client (internal/kube).
type Engine struct{}

// CaddyModule returns the Caddy module information.
func (Engine) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "mcp_sandbox.engines.kubernetes", New: func() caddy.Module { return Engine{} }}
}

// ValidateEngine reports every problem of e's Kubernetes settings. It does no I/O.
func (Engine) ValidateEngine(e fleet.Engine) error { return Config(e).Validate() }

// NewEngineClient returns e's client, made from its kubeconfig without asking the API
// server, and shared by the engine's sandboxes (kube.Shared).
func (Engine) NewEngineClient(e fleet.Engine, logger *zap.Logger) (sandbox.API, error) {
	kc := Config(e)
	kc.Log = fleet.KubeLog(logger)
	cli, err := kube.Shared(kc)
	if err != nil {
		return nil, err
	}
	return cli, nil
}

// Config is the kube.Config of a Kubernetes engine line.
func Config(e fleet.Engine) kube.Config {
	k := e.Kubernetes
	return kube.Config{Name: e.Name, Kubeconfig: k.Kubeconfig, Context: k.Context, Namespace: k.Namespace,
		StorageClass: k.StorageClass, VolumeSize: k.VolumeSize, EphemeralStorage: k.EphemeralStorage,
		PullPolicy: k.ImagePullPolicy}
}

var (
	_ caddy.Module = Engine{}
	_ fleet.Kind   = Engine{}
)
