// Package mcpsandbox is a Caddy plugin that turns a server with Docker into a remote MCP
// sandbox for AI clients: one persistent Docker container in which the model runs bash
// commands as root, files handed back through signed, expiring links, and an OAuth 2.1
// authorization server so that clients connect with nothing but the URL.
//
// It registers two modules: the app `mcp_sandbox`, which owns the Docker clients and the
// sandboxes (shared across config reloads), and the HTTP handler
// `http.handlers.mcp_sandbox`, which serves `/mcp`, the OAuth endpoints and `/files/...`
// and passes every other request on. With `previews` set, the handler also serves the
// hosts of ports exposed by the model (package preview), and the module
// `tls.permission.mcp_sandbox` approves on-demand certificates for exactly those hosts.
package mcpsandbox

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/facts"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/metrics"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

func init() {
	caddy.RegisterModule(new(App))
	caddy.RegisterModule(new(Handler))
}

// sandboxes holds one entry per (Docker host, container, settings) across config
// reloads: a reload provisions the new config before the old one is cleaned up, so
// the entry, its Docker client and its cleanup loop stay alive while any config uses
// them. The container itself is never stopped or removed by Caddy.
var sandboxes = caddy.NewUsagePool()

// App is the `mcp_sandbox` app. It holds process-wide settings (the Docker host) and
// hands out the sandboxes that handlers use. Its zero value is valid: a handler creates
// it with defaults when no global `mcp_sandbox` block is configured.
type App struct {
	// DockerHost is the Docker engine address, e.g. unix:///var/run/docker.sock.
	// Default: the DOCKER_HOST environment variable, else the local socket.
	DockerHost string `json:"docker_host,omitempty"`

	logger *zap.Logger

	mu      sync.Mutex
	entries map[string]*sandboxEntry // pool keys this config holds
	byName  map[string]sandbox.Config
	pruners []pruner
	warmups []func() // started with the app (see facts.go)
	stop    context.CancelFunc
	stopped chan struct{}
}

// pruner deletes expired OAuth state.
type pruner interface{ Prune(context.Context) error }

// pruneInterval is how often expired OAuth codes, tokens and grants are deleted.
const pruneInterval = time.Hour

// CaddyModule returns the Caddy module information.
func (*App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "mcp_sandbox",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision resolves placeholders. It does no Docker I/O, so `caddy validate` works on
// a machine without Docker.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.DockerHost = caddy.NewReplacer().ReplaceAll(a.DockerHost, "")
	a.entries = make(map[string]*sandboxEntry)
	a.byName = make(map[string]sandbox.Config)
	return nil
}

// Validate checks the Docker host address. It does no I/O.
func (a *App) Validate() error {
	if a.DockerHost == "" {
		return nil
	}
	if _, err := client.ParseHostURL(a.DockerHost); err != nil {
		return fmt.Errorf("docker_host %q: %w", a.DockerHost, err)
	}
	return nil
}

// Start starts the idle-file cleanup loop of every sandbox this config uses (a sandbox
// shared with the previous config keeps the loop it already has) and the loop that
// prunes expired OAuth state.
func (a *App) Start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.entries {
		e.startCleanup()
		if e.egress != nil {
			e.egress.Start()
		}
	}
	for _, w := range a.warmups {
		w()
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stop, a.stopped = cancel, make(chan struct{})
	go a.pruneLoop(ctx, a.pruners)
	return nil
}

func (a *App) pruneLoop(ctx context.Context, pruners []pruner) {
	defer close(a.stopped)
	defer func() {
		if v := recover(); v != nil {
			a.logger.Error("panic while pruning OAuth state", zap.Any("panic", v))
		}
	}()
	t := time.NewTicker(pruneInterval)
	defer t.Stop()
	for {
		for _, p := range pruners {
			if err := p.Prune(ctx); err != nil && ctx.Err() == nil {
				a.logger.Warn("pruning expired OAuth state", zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Stop ends this config's prune loop. The sandboxes' cleanup loops belong to the
// pool entries and stop when the last config that uses them is cleaned up; the
// container outlives Caddy by design.
func (a *App) Stop() error {
	if a.stop != nil {
		a.stop()
		<-a.stopped
	}
	return nil
}

// addWarmup adds a function Start calls; it must return at once.
func (a *App) addWarmup(w func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.warmups = append(a.warmups, w)
}

func (a *App) addPruner(p pruner) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pruners = append(a.pruners, p)
}

// acquire returns the sandbox for cfg on the engine eng (the default engine, from
// docker_host, when eng has no name), shared with any earlier config that uses the
// same container with the same settings. Two handlers of one config that name the same
// container with different settings are a configuration error. The caller must
// release the returned key when it is cleaned up.
func (a *App) acquire(eng Engine, cfg sandbox.Config) (*sandboxEntry, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if prev, ok := a.byName[cfg.Container]; ok && prev != cfg {
		return nil, "", fmt.Errorf("container %q is configured twice with different settings (%+v vs %+v); give each site its own container or the same settings", cfg.Container, prev, cfg)
	}
	if eng.Host == "" {
		eng.Host = a.dockerHost()
	}
	key := fmt.Sprintf("%+v\x00%+v", eng, cfg)
	val, _, err := sandboxes.LoadOrNew(key, func() (caddy.Destructor, error) {
		newClient := newEngineClient
		if eng.Name == "" {
			newClient = func(e Engine) (*client.Client, error) { return newDockerClient(e.Host) }
		}
		cli, err := newClient(eng)
		if err != nil {
			return nil, err
		}
		sb, err := sandbox.New(cli, cfg, a.logger.Named("sandbox"))
		if err != nil {
			cli.Close()
			return nil, err
		}
		e := newSandboxEntry(sb, cli, eng, a.logger)
		if cfg.ProxyPort != 0 {
			e.egress = newEgressGateway(sb, a.logger)
		}
		return e, nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("setting up sandbox %q: %w", cfg.Container, err)
	}
	e := val.(*sandboxEntry)
	a.byName[cfg.Container] = cfg
	a.entries[key] = e
	return e, key, nil
}

// configuresOther reports whether a handler of this config other than h uses the
// container name (its operator's sandbox, or one of its people's).
func (a *App) configuresOther(name string, h *Handler) bool {
	a.mu.Lock()
	_, ok := a.byName[name]
	a.mu.Unlock()
	if !ok {
		return false
	}
	if cfg, err := h.sandboxConfig(); err == nil && cfg.Container == name {
		return false
	}
	for _, p := range h.People {
		if c, err := h.sandboxConfigFor(p.Name); err == nil && c.Container == name {
			return false
		}
	}
	return true
}

// release gives back a key acquire returned (none for ""): the entry is destructed
// when no config holds it any more.
func release(key string) error {
	if key == "" {
		return nil
	}
	_, err := sandboxes.Delete(key)
	return err
}

func (a *App) dockerHost() string {
	if a.DockerHost != "" {
		return a.DockerHost
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return client.DefaultDockerHost
}

// newDockerClient makes a client for host. It does no I/O: the API version is
// negotiated on the first request.
func newDockerClient(host string) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("creating Docker client for %s: %w", host, err)
	}
	return cli, nil
}

// sandboxEntry is one pooled sandbox with its Docker client, cleanup loop and image
// build: everything that runs for the sandbox ends in Destruct.
type sandboxEntry struct {
	sb     *sandbox.Sandbox
	cli    *client.Client
	engine Engine // the engine the container is on (no name: the default engine)
	logger *zap.Logger
	facts  facts.Cache     // what is installed in the container, detected once
	egress *egress.Gateway // the egress proxy; nil without an egress block

	idle idleState // activity and idle stops (fleet.go)

	once   sync.Once
	cancel context.CancelFunc
	done   chan struct{}

	buildMu     sync.Mutex
	build       *imageBuild // the latest build of the image, if one was needed
	buildCtx    context.Context
	buildCancel context.CancelFunc
	builds      sync.WaitGroup
}

func newSandboxEntry(sb *sandbox.Sandbox, cli *client.Client, eng Engine, logger *zap.Logger) *sandboxEntry {
	ctx, cancel := context.WithCancel(context.Background())
	e := &sandboxEntry{sb: sb, cli: cli, engine: eng, logger: logger, buildCtx: ctx, buildCancel: cancel}
	e.Touch()
	return e
}

func (e *sandboxEntry) startCleanup() {
	e.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		e.cancel = cancel
		e.done = make(chan struct{})
		go func() {
			defer close(e.done)
			// The sandbox logs each pass; here it is only counted.
			e.sb.RunCleanup(ctx, func(paths []string) {
				metrics.CleanupDeleted.Add(float64(len(paths)))
			})
		}()
	})
}

// Destruct stops the cleanup loop and any image build, and closes the Docker client,
// when the last config lets go. It leaves the container running, and from then on
// nothing still holding the entry (a call or task under way, a background loop) creates
// or starts it again.
func (e *sandboxEntry) Destruct() error {
	e.sb.Close()
	e.once.Do(func() {}) // a loop can no longer start
	if e.cancel != nil {
		e.cancel()
		<-e.done
	}
	e.buildMu.Lock()
	e.buildCancel() // a build can no longer start
	e.buildMu.Unlock()
	e.builds.Wait()
	if e.egress != nil {
		e.egress.Close()
	}
	e.sb.CloseTransfers()
	e.sb.CloseAgent()
	return e.cli.Close()
}

// Interface guards
var (
	_ caddy.App         = (*App)(nil)
	_ caddy.Provisioner = (*App)(nil)
	_ caddy.Validator   = (*App)(nil)
	_ caddy.Destructor  = (*sandboxEntry)(nil)
)
