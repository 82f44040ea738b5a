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

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
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
	entries map[string]*fleet.Entry // pool keys this config holds
	held    map[string]int          // how many times, by pool key (acquire, less its releases)
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
	a.entries = make(map[string]*fleet.Entry)
	a.held = make(map[string]int)
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

// Start starts the idle-file cleanup loop and egress gateway of every sandbox this
// config uses (a sandbox shared with the previous config keeps those it already has)
// and the loop that prunes expired OAuth state.
func (a *App) Start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.entries {
		e.Start()
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
// docker_host, when eng has no name; a Kubernetes engine's client from its kubeconfig,
// fleet.Engine.NewClient), shared with any earlier config that uses the
// same container with the same settings, and the function that gives it back (the
// entry is destructed when no config holds it any more). Two handlers of one config
// that name the same container with different settings are a configuration error.
func (a *App) acquire(eng fleet.Engine, cfg sandbox.Config) (*fleet.Entry, func() error, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if prev, ok := a.byName[cfg.Container]; ok && prev != cfg {
		return nil, nil, fmt.Errorf("container %q is configured twice with different settings (%+v vs %+v); give each site its own container or the same settings", cfg.Container, prev, cfg)
	}
	if eng.Host == "" && !eng.IsKubernetes() {
		eng.Host = a.dockerHost()
	}
	key := fmt.Sprintf("%+v\x00%+v", eng, cfg)
	val, _, err := sandboxes.LoadOrNew(key, func() (caddy.Destructor, error) {
		cli, err := a.engineClient(eng)
		if err != nil {
			return nil, err
		}
		sb, err := sandbox.New(cli, cfg, a.logger.Named("sandbox"))
		if err != nil {
			cli.Close()
			return nil, err
		}
		o := fleet.EntryOptions{Sandbox: sb, Client: cli, Engine: eng, Logger: a.logger,
			Cleaned: func(paths []string) { metrics.CleanupDeleted.Add(float64(len(paths))) }}
		if cfg.ProxyPort != 0 {
			o.Sidecar = newEgressGateway(sb, a.logger)
		}
		return fleet.NewEntry(o), nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("setting up sandbox %q: %w", cfg.Container, err)
	}
	e := val.(*fleet.Entry)
	a.byName[cfg.Container] = cfg
	a.entries[key] = e
	a.held[key]++
	var once sync.Once
	return e, func() (err error) {
		once.Do(func() {
			_, err = sandboxes.Delete(key)
			a.let(key, cfg)
		})
		return err
	}, nil
}

// let forgets the config's hold on the pool key of cfg once nothing of the config
// holds it any more: the container's name may then be acquired with other settings
// (a person's sandbox made afresh after a warm sandbox could not be taken).
func (a *App) let(key string, cfg sandbox.Config) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held[key]--; a.held[key] > 0 {
		return
	}
	delete(a.held, key)
	delete(a.entries, key)
	if a.byName[cfg.Container] == cfg {
		delete(a.byName, cfg.Container)
	}
}

// acquireWarm returns the warm sandboxes' pool of the site whose sandbox
// configuration is base on the engine eng, n of them, shared with any earlier config
// with the same settings, and the function that gives it back: the pool, and with it
// the warm sandboxes nobody took, is removed when no config holds it any more (a
// reload without warm_sandboxes, Caddy's stop). It does no Docker I/O.
func (a *App) acquireWarm(eng fleet.Engine, base sandbox.Config, n int) (*fleet.WarmPool, func() error, error) {
	if eng.Host == "" {
		eng.Host = a.dockerHost()
	}
	base.Engine = eng.Name
	key := fmt.Sprintf("warm\x00%d\x00%+v\x00%+v", n, eng, base)
	val, _, err := sandboxes.LoadOrNew(key, func() (caddy.Destructor, error) {
		cli, err := a.engineClient(eng)
		if err != nil {
			return nil, err
		}
		return fleet.NewWarmPool(fleet.WarmOptions{Base: base, Engine: eng, Client: cli, N: n, Logger: a.logger}), nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("setting up warm sandboxes of %q: %w", base.Container, err)
	}
	return val.(*fleet.WarmPool), func() error { _, err := sandboxes.Delete(key); return err }, nil
}

// engineClient makes a client of eng: the default engine's from its address, a named
// engine's from its line (fleet.Engine.NewClient). It does no I/O.
func (a *App) engineClient(eng fleet.Engine) (sandbox.API, error) {
	if eng.Name == "" {
		return newDockerClient(eng.Host)
	}
	return eng.NewClient(a.logger)
}

// claimed reports whether a handler of this config uses the container name.
func (a *App) claimed(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.byName[name]
	return ok
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

// newDockerClient is the client for host, shared by the sandboxes on it
// (sandbox.SharedDocker). It does no I/O: the API version is negotiated on the first
// request.
func newDockerClient(host string) (sandbox.API, error) {
	cli, err := sandbox.SharedDocker("default\x00"+host, func() (*client.Client, error) {
		return client.NewClientWithOpts(client.FromEnv, client.WithHost(host), client.WithAPIVersionNegotiation())
	})
	if err != nil {
		return nil, fmt.Errorf("creating Docker client for %s: %w", host, err)
	}
	return cli, nil
}

// Interface guards
var (
	_ caddy.App         = (*App)(nil)
	_ caddy.Provisioner = (*App)(nil)
	_ caddy.Validator   = (*App)(nil)
	_ caddy.Destructor  = (*fleet.Entry)(nil)
)
