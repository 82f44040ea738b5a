package mcpsandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/certmagic"
	"github.com/mark3labs/mcp-go/server"
	"go.uber.org/zap"

	"github.com/caddyserver/caddy/v2/modules/caddypki"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/config"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/links"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcphttp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/origin"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/oauth"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/preview"
)

const mcpPath = "/mcp"

// Handler is the `http.handlers.mcp_sandbox` module. It serves the MCP endpoint
// (`/mcp`), the OAuth 2.1 endpoints, signed downloads (`/files/...`) and the
// operator's console (`/console`); every other request goes to the next handler.
type Handler struct {
	// Settings are the module's JSON fields (package config), at the top level.
	config.Settings

	publicOrigin   string   // PublicURL normalised, "" when unset
	allowedOrigins []string // AllowedOrigins normalised

	storage certmagic.Storage
	logger  *zap.Logger
	app     *App
	fleet   *fleet.Fleet // the operator's sandbox and the people's (fleet_wire.go)
	// releaseWarm gives back the warm sandboxes' pool (warm_sandboxes); nil without.
	releaseWarm func() error

	ownersOnce   sync.Once
	owners       map[string]string // preview owner -> person (people.go)
	auth         *oauth.Server
	mcp          *server.StreamableHTTPServer
	sessionIDs   mcphttp.SessionIDs // MCP session ids bound to their person
	replies      *mcphttp.Replies   // clients' replies to elicitations, to the instance that asked
	tools        *mcptools.Tools
	askTools     atomic.Pointer[mcptools.Tools] // tools, for egress questions from other goroutines
	approvals    *egress.ApprovalStore          // hosts people allowed always (with an egress block)
	approvalsKey string
	refusals     map[string]*egress.RefusalLog // each sandbox's egress refusals, by person, shared across reloads
	refusalKeys  []string
	signer       *links.Signer
	links        *links.Server

	guesses    *oauth.GuessLimiter // wrong keys per address, shared across reloads (guesses.go)
	guessKey   string
	keyHistory *oauth.KeyHistory // the keys accepted within 30 days, per storage (guesses.go)
	historyKey string

	console     *console.Console
	audit       *console.AuditLog
	linkReg     *console.LinkRegistry
	consoleKeys []string

	previews *preview.Server // nil when previews are off

	egressCA  *caddypki.CA  // the egress proxy's own CA; nil without an egress block
	egressCtx caddy.Context // the config's, for renewing that CA
}

// CaddyModule returns the Caddy module information.
func (*Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.mcp_sandbox",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision resolves placeholders, applies defaults, and wires the sandbox, the OAuth
// server and the MCP server together. It does no Docker I/O. Settings that are wrong are
// left for Validate to report (Caddy calls it next, and Cleanup when it fails); what
// depends on them is then simply not built.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.Resolve()
	h.SetDefaults()
	h.publicOrigin, _ = origin.Parse(h.PublicURL)
	h.allowedOrigins = nil
	for _, o := range h.AllowedOrigins {
		if n, err := origin.Parse(o); err == nil {
			h.allowedOrigins = append(h.allowedOrigins, n)
		}
	}
	h.storage = ctx.Storage()
	if h.StorageRaw != nil {
		val, err := ctx.LoadModule(h, "StorageRaw")
		if err != nil {
			return fmt.Errorf("loading storage module: %w", err)
		}
		st, err := val.(caddy.StorageConverter).CertMagicStorage()
		if err != nil {
			return fmt.Errorf("setting up storage: %w", err)
		}
		h.storage = st
	}
	if h.Validate() != nil {
		return nil
	}

	cfg, _ := h.SandboxConfig()
	appIface, err := ctx.App("mcp_sandbox")
	if err != nil {
		return fmt.Errorf("loading mcp_sandbox app: %w", err)
	}
	h.app = appIface.(*App)
	if eng, ok := fleet.Kubernetes(h.Engines); ok && h.app.DockerHost != "" {
		return fmt.Errorf("engine %s is a kubernetes engine, which takes the place of Docker: remove docker_host %s from the global mcp_sandbox options (or the kubernetes engine line)", eng.Name, h.app.DockerHost)
	}
	if err := h.provisionFleet(cfg); err != nil {
		return err
	}
	if h.Egress != nil {
		h.provisionApprovals()
		h.provisionRefusals()
	}
	entry := h.fleet.Operator()
	if egressOf(entry) != nil {
		if h.egressCA, err = provisionEgressCA(ctx, h.logger.Named("egress")); err != nil {
			return err
		}
		h.egressCtx = ctx
		if err := h.setupEgress(entry, ""); err != nil {
			return err
		}
	}
	h.app.addWarmup(h.warmFacts)
	h.app.addWarmup(h.fleet.Start)
	h.app.addWarmup(h.fleet.StartCheckpointSweeps)

	if err := h.provisionGuesses(); err != nil {
		return err
	}
	h.auth, err = oauth.New(oauth.Options{
		APIKey:                         h.APIKey,
		People:                         h.PeopleKeys(),
		Storage:                        h.storage,
		PublicURL:                      h.publicOrigin,
		ResourcePath:                   mcpPath,
		APIKeyBearer:                   h.APIKeyBearer == nil || *h.APIKeyBearer,
		AllowPrivateClientMetadataURLs: h.AllowPrivateClientMetadata,
		Logger:                         h.logger.Named("oauth"),
		ClientIP:                       clientIP,
		Guesses:                        h.guesses,
		KeyHistory:                     h.keyHistory,
	})
	if err != nil {
		return fmt.Errorf("setting up OAuth: %w", err)
	}
	h.app.addPruner(h.auth)
	if h.MaxUpload == 0 {
		h.MaxUpload = links.DefaultMaxUpload
	}
	if h.MaxUpload < 0 {
		return errors.New("max_upload must be positive")
	}
	if err := h.provisionConsole(); err != nil {
		return err
	}
	h.signer = links.NewSigner(h.APIKey)
	h.links = links.New(links.Options{
		Signer: h.signer, FilesOf: h.linkFiles, MaxUpload: h.MaxUpload,
		Revoked: h.linkReg.Revoked, Audit: h.audit,
		Origin: h.auth.Origin, ClientIP: clientIP, Logger: h.logger.Named("links"),
	})
	if h.Previews != "" {
		if err := h.provisionPreviews(ctx); err != nil {
			return err
		}
	}
	h.mcp = h.newMCPServer()
	return registerMetrics(ctx.GetMetricsRegistry())
}

// Validate reports every setting that cannot work, by its Caddyfile name. It changes
// nothing and does no I/O.
func (h *Handler) Validate() error { return h.Settings.Validate() }

// clientIP is the client address as Caddy sees it (honouring trusted_proxies), so
// that sign-in limits count people, not the proxy in front. Empty (outside Caddy) makes
// the OAuth server fall back to the peer address.
func clientIP(r *http.Request) string {
	ip, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	return ip
}

// Cleanup ends this config's MCP streams (clients reconnect to the new config) and
// releases its hold on the sandbox.
func (h *Handler) Cleanup() error {
	h.releaseApprovals()
	h.releaseRefusals()
	if h.previews != nil {
		_ = h.previews.Cleanup()
	}
	if h.mcp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h.mcp.CloseSessions(ctx)
		cancel()
	}
	if h.tools != nil {
		h.tools.Close()
	}
	var fleetErr error
	if h.fleet != nil {
		fleetErr = h.fleet.Close()
	}
	fleetErr = errors.Join(fleetErr, h.releaseWarmPool())
	return errors.Join(h.releaseConsole(), h.releaseGuesses(), fleetErr)
}

// ServeHTTP routes the plugin's own paths and passes every other request on.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	// A preview host is a separate origin: nothing else of the site answers there.
	if h.previews != nil && h.previews.Match(r.Host) {
		return h.previews.ServeHTTP(w, r)
	}
	switch p := r.URL.Path; {
	case p == mcpPath:
		h.serveMCP(w, r)
		return nil
	case h.links.Handles(r):
		h.links.ServeHTTP(w, r)
		return nil
	case console.Handles(r):
		h.console.ServeHTTP(w, r)
		return nil
	case h.auth.Handles(r):
		h.auth.ServeHTTP(w, r)
		return nil
	}
	return next.ServeHTTP(w, r)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
