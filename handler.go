package mcpsandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/certmagic"
	"github.com/mark3labs/mcp-go/server"
	"go.uber.org/zap"

	"github.com/caddyserver/caddy/v2/modules/caddypki"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/links"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcphttp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/oauth"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/preview"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Defaults of the settings that are not the sandbox's own.
const (
	defaultLinkTTL    = 24 * time.Hour
	defaultMaxLinkTTL = 7 * 24 * time.Hour
	defaultKeepalive  = 5 * time.Second
	defaultYield      = 45 * time.Second
	defaultOutput     = 30000 // bytes per stream a call returns unless it asks for more
	defaultMaxTaskTTL = time.Hour
	defaultMaxTasks   = 100  // per session
	defaultTasksTotal = 1000 // in all
	mcpPath           = "/mcp"
)

// Handler is the `http.handlers.mcp_sandbox` module. It serves the MCP endpoint
// (`/mcp`), the OAuth 2.1 endpoints, signed downloads (`/files/...`) and the
// operator's console (`/console`); every other request goes to the next handler.
type Handler struct {
	// APIKey is the sign-in key and the secret links are signed with. Required;
	// placeholders such as {env.SANDBOX_API_KEY} are resolved at provision time.
	APIKey string `json:"api_key,omitempty"`
	// PublicURL is the origin clients use (scheme and host, e.g.
	// https://sandbox.example.com). Default: the scheme and host of each request.
	PublicURL string `json:"public_url,omitempty"`

	// Image is the Docker image of the sandbox. Default: code-sandbox:latest.
	Image string `json:"image,omitempty"`
	// Container is the name of the persistent container. Default: mcp-sandbox-persistent.
	Container string `json:"container,omitempty"`
	// Volume is the named volume mounted at /sandbox. Default: mcp-sandbox-data.
	Volume string `json:"volume,omitempty"`
	// Memory is the container's memory limit, e.g. 3g. Default: 3g.
	Memory string `json:"memory,omitempty"`
	// CPUs is the container's CPU limit. Default: 3.
	CPUs float64 `json:"cpus,omitempty"`
	// PidsLimit caps the number of processes in the container. Default: 4096.
	PidsLimit int64 `json:"pids_limit,omitempty"`
	// Agent runs commands through the sandbox agent, one long-lived process in the
	// container; false runs each command as a Docker exec of its own. Default: true.
	Agent *bool `json:"agent,omitempty"`
	// Network is the container's Docker network: "none" cuts it off, "bridge" is
	// Docker's default bridge, any other name is a network created when missing (a
	// bridge without inter-container traffic). Default: mcp-sandbox.
	Network string `json:"network,omitempty"`

	// ExecTimeout is the default per-command timeout. Default: 1h.
	ExecTimeout caddy.Duration `json:"exec_timeout,omitempty"`
	// MaxOutput is how many bytes of each stream are kept, cut in the middle.
	// Default: 200000.
	MaxOutput int `json:"max_output,omitempty"`
	// DefaultOutput is how many bytes of each stream a tool call returns when it does
	// not ask for more with max_output. Default: 30000 (or max_output, when smaller).
	DefaultOutput int `json:"default_output,omitempty"`
	// FileTTL is how long an idle top-level entry of /sandbox lives; 0 disables the
	// cleanup. Default: 168h.
	FileTTL *caddy.Duration `json:"file_ttl,omitempty"`
	// CleanupInterval is how often the idle-file cleanup runs. Default: 1h.
	CleanupInterval caddy.Duration `json:"cleanup_interval,omitempty"`
	// LinkTTL is how long a share_file link stays valid. Default: 24h.
	LinkTTL caddy.Duration `json:"link_ttl,omitempty"`
	// MaxUpload is the largest file, in bytes, an upload link accepts. Default: 2 GiB.
	MaxUpload int64 `json:"max_upload,omitempty"`
	// MaxLinkTTL is the longest lifetime share_file may ask for with expires_in.
	// Default: 7d (or link_ttl, when that is longer).
	MaxLinkTTL caddy.Duration `json:"max_link_ttl,omitempty"`

	// YieldAfter is how long execute waits for a command before returning it as a
	// running job, and the upper bound of its wait argument and of job_output's; 0
	// (`off` in the Caddyfile) waits for the whole timeout. Default: 45s, below the
	// strictest client's deadline (claude.ai gives up after about 60 s).
	YieldAfter *caddy.Duration `json:"yield_after,omitempty"`
	// MaxJobs bounds the commands running at once. Default: 32.
	MaxJobs int `json:"max_jobs,omitempty"`
	// MaxTaskTTL is the longest an MCP task and its result are kept: a longer ttl, or
	// none, is cut to it. Default: 1h.
	MaxTaskTTL caddy.Duration `json:"max_task_ttl,omitempty"`
	// MaxTasks bounds the MCP tasks one session holds. Default: 100.
	MaxTasks int `json:"max_tasks,omitempty"`
	// MaxTasksTotal bounds the MCP tasks kept across sessions. Default: 1000 (or
	// max_tasks, when that is larger).
	MaxTasksTotal int `json:"max_tasks_total,omitempty"`

	// APIKeyBearer accepts the API key itself as a bearer token on /mcp (for
	// headless clients and scripts). Default: true.
	APIKeyBearer *bool `json:"api_key_bearer,omitempty"`
	// Keepalive is the longest a tool-call response stream stays silent. Default: 5s.
	Keepalive caddy.Duration `json:"keepalive,omitempty"`
	// AllowedOrigins lists browser origins, besides the site's own and loopback ones,
	// that may call /mcp.
	AllowedOrigins []string `json:"allowed_origins,omitempty"`
	// AllowPrivateClientMetadata lets OAuth client ID metadata documents live on
	// loopback or private addresses. For development only.
	AllowPrivateClientMetadata bool `json:"allow_private_client_metadata,omitempty"`
	// StorageRaw is where OAuth state (clients, codes, grants, tokens) is kept, as a
	// caddy.storage module. Default: Caddy's configured storage. Instances that share
	// it share their sign-ins.
	StorageRaw json.RawMessage `json:"storage,omitempty" caddy:"namespace=caddy.storage inline_key=module"`

	// Engines are the Docker engines sandboxes are placed on (`engine` lines): a
	// person's on the one with the fewest sandboxes when it is first made, the
	// operator's on the first. Empty: the app's docker_host.
	Engines []fleet.Engine `json:"engines,omitempty"`
	// IdleStop stops a sandbox's container after this long without tool calls,
	// previews, uploads, downloads or job output; the next call starts it again with
	// its files. 0: never.
	IdleStop caddy.Duration `json:"idle_stop,omitempty"`
	// MaxCheckpoints is how many checkpoints each sandbox keeps: a new one past it
	// removes the oldest. Default: 5.
	MaxCheckpoints int `json:"max_checkpoints,omitempty"`
	// CheckpointVolumeOptions are the local volume driver's options (key=value) for
	// the volumes holding checkpoints' copies of /sandbox, e.g. type=tmpfs
	// device=tmpfs o=size=2g, or another device.
	CheckpointVolumeOptions []string `json:"checkpoint_volume_options,omitempty"`

	// Previews is the domain under which exposed ports are served, each at
	// <label>.<domain> (e.g. preview.example.com, or localhost for local use).
	// Empty: previews are off.
	Previews string `json:"previews,omitempty"`
	// PreviewAuth makes the person sign in with the API key once per browser and
	// preview before seeing it. Default: off (preview URLs are capability URLs).
	PreviewAuth bool `json:"preview_auth,omitempty"`
	// PreviewTTL is how long an exposed port stays reachable. Default: 24h.
	PreviewTTL caddy.Duration `json:"preview_ttl,omitempty"`

	// People are the `person` lines: each person signs in with a key of their own and
	// gets a sandbox of their own. Absent: everyone signs in with the API key and
	// shares one sandbox.
	People []Person `json:"people,omitempty"`
	// MaxSandboxes caps the people's sandboxes this site keeps (the operator's is not
	// counted). Default: no cap.
	MaxSandboxes int `json:"max_sandboxes,omitempty"`
	// Egress, when set, takes the sandbox off the network: it reaches only the hosts
	// the block allows, through Caddy, which can add credentials the sandbox never sees.
	Egress *EgressConfig `json:"egress,omitempty"`

	publicOrigin   string   // PublicURL normalised, "" when unset
	allowedOrigins []string // AllowedOrigins normalised

	storage certmagic.Storage
	logger  *zap.Logger
	app     *App
	fleet   *fleet.Fleet // the operator's sandbox and the people's (fleet_wire.go)

	ownersOnce sync.Once
	owners     map[string]string // preview owner -> person (people.go)
	auth       *oauth.Server
	mcp        *server.StreamableHTTPServer
	sessionIDs mcphttp.SessionIDs // MCP session ids bound to their person
	tools      *mcptools.Tools
	signer     *links.Signer
	links      *links.Server

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

// sandboxConfig applies the defaults of the sandbox package to the settings left empty.
func (h *Handler) sandboxConfig() (sandbox.Config, error) {
	cfg := sandbox.DefaultConfig()
	setIf(&cfg.Image, h.Image)
	setIf(&cfg.Container, h.Container)
	setIf(&cfg.Volume, h.Volume)
	setIf(&cfg.NetworkMode, h.Network)
	cfg.NoAgent = h.Agent != nil && !*h.Agent
	// A local engine's containers reach the agent's direct channel here (sandbox's
	// agent_direct.go); remote engines ignore it.
	cfg.AgentSocketDir = filepath.Join(caddy.AppDataDir(), "mcp-sandbox", "agent")
	if h.Egress != nil {
		cfg.NetworkMode, cfg.ProxyPort, cfg.CABundle = "none", egressPort, egressBundle
	}
	if h.Memory != "" {
		m, err := sandbox.ParseMemory(h.Memory)
		if err != nil {
			return cfg, fmt.Errorf("memory: %w", err)
		}
		cfg.Memory = m
	}
	if h.CPUs != 0 {
		cfg.CPUs = h.CPUs
	}
	if h.PidsLimit != 0 {
		cfg.PidsLimit = h.PidsLimit
	}
	if h.ExecTimeout != 0 {
		cfg.ExecTimeout = time.Duration(h.ExecTimeout)
	}
	if h.MaxOutput != 0 {
		cfg.MaxOutput = h.MaxOutput
	}
	if h.FileTTL != nil {
		cfg.FileTTL = time.Duration(*h.FileTTL)
	}
	if h.CleanupInterval != 0 {
		cfg.CleanupInterval = time.Duration(h.CleanupInterval)
	}
	cfg.CheckpointVolumeOptions = strings.Join(h.CheckpointVolumeOptions, "\n")
	return cfg, cfg.Validate()
}

func setIf(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// Provision resolves placeholders, applies defaults, and wires the sandbox, the OAuth
// server and the MCP server together. It does no Docker I/O. Settings that are wrong are
// left for Validate to report (Caddy calls it next, and Cleanup when it fails); what
// depends on them is then simply not built.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	repl := caddy.NewReplacer()
	h.APIKey = strings.TrimSpace(repl.ReplaceAll(h.APIKey, ""))
	for i := range h.People {
		h.People[i].Key = strings.TrimSpace(repl.ReplaceAll(h.People[i].Key, ""))
	}
	h.PublicURL = repl.ReplaceAll(h.PublicURL, "")
	h.publicOrigin, _ = oauth.ParseOrigin(h.PublicURL)
	if h.LinkTTL == 0 {
		h.LinkTTL = caddy.Duration(defaultLinkTTL)
	}
	if h.MaxLinkTTL == 0 {
		h.MaxLinkTTL = max(caddy.Duration(defaultMaxLinkTTL), h.LinkTTL)
	}
	if h.Keepalive == 0 {
		h.Keepalive = caddy.Duration(defaultKeepalive)
	}
	h.allowedOrigins = nil
	for _, o := range h.AllowedOrigins {
		if n, err := oauth.ParseOrigin(o); err == nil {
			h.allowedOrigins = append(h.allowedOrigins, n)
		}
	}
	if h.YieldAfter == nil {
		y := caddy.Duration(defaultYield)
		h.YieldAfter = &y
	}
	if h.MaxJobs == 0 {
		h.MaxJobs = sandbox.DefaultMaxJobs
	}
	if h.MaxTaskTTL == 0 {
		h.MaxTaskTTL = caddy.Duration(defaultMaxTaskTTL)
	}
	if h.MaxTasks == 0 {
		h.MaxTasks = defaultMaxTasks
	}
	if h.MaxTasksTotal == 0 {
		h.MaxTasksTotal = max(defaultTasksTotal, h.MaxTasks)
	}
	for i := range h.Engines {
		e := &h.Engines[i]
		for _, s := range []*string{&e.Host, &e.TLSCA, &e.TLSCert, &e.TLSKey} {
			*s = strings.TrimSpace(repl.ReplaceAll(*s, ""))
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

	cfg, _ := h.sandboxConfig()
	if h.DefaultOutput == 0 {
		h.DefaultOutput = min(defaultOutput, cfg.MaxOutput)
	}
	appIface, err := ctx.App("mcp_sandbox")
	if err != nil {
		return fmt.Errorf("loading mcp_sandbox app: %w", err)
	}
	h.app = appIface.(*App)
	if err := h.provisionFleet(cfg); err != nil {
		return err
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
		People:                         h.peopleKeys(),
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
func (h *Handler) Validate() error {
	var errs []error
	switch {
	case h.APIKey == "":
		errs = append(errs, errors.New("api_key is empty: set it, e.g. `api_key {env.SANDBOX_API_KEY}` with that variable exported; an empty key would leave the sandbox open"))
	case len(h.APIKey) < 16:
		errs = append(errs, errors.New("api_key is shorter than 16 characters: use a long random key, e.g. `openssl rand -hex 32`"))
	}
	if h.PublicURL != "" {
		if _, err := oauth.ParseOrigin(h.PublicURL); err != nil {
			errs = append(errs, fmt.Errorf("public_url: %w", err))
		}
	}
	if h.LinkTTL < 0 {
		errs = append(errs, errors.New("link_ttl must be positive"))
	}
	if h.MaxLinkTTL != 0 && h.MaxLinkTTL < h.LinkTTL {
		errs = append(errs, fmt.Errorf("max_link_ttl (%s) must be at least link_ttl (%s)", time.Duration(h.MaxLinkTTL), time.Duration(h.LinkTTL)))
	}
	if h.Keepalive != 0 && h.Keepalive < caddy.Duration(time.Second) {
		errs = append(errs, errors.New("keepalive must be at least 1s"))
	}
	for _, o := range h.AllowedOrigins {
		if _, err := oauth.ParseOrigin(o); err != nil {
			errs = append(errs, fmt.Errorf("allowed_origins: %w", err))
		}
	}
	if h.YieldAfter != nil && *h.YieldAfter < 0 {
		errs = append(errs, errors.New("yield_after must be a positive duration or off"))
	}
	if h.MaxCheckpoints < 0 {
		errs = append(errs, errors.New("max_checkpoints must be at least 1"))
	}
	for _, o := range h.CheckpointVolumeOptions {
		if k, _, ok := strings.Cut(o, "="); !ok || k == "" || strings.ContainsAny(o, "\n") {
			errs = append(errs, fmt.Errorf("checkpoint_volume_options: %q is not key=value", o))
		}
	}
	if h.MaxJobs < 0 {
		errs = append(errs, errors.New("max_jobs must be positive"))
	}
	if h.MaxTaskTTL != 0 && h.MaxTaskTTL < caddy.Duration(time.Second) {
		errs = append(errs, errors.New("max_task_ttl must be at least 1s"))
	}
	if h.MaxTasks < 0 || h.MaxTasksTotal < 0 {
		errs = append(errs, errors.New("max_tasks must be positive"))
	} else if h.MaxTasksTotal != 0 && h.MaxTasksTotal < h.MaxTasks {
		errs = append(errs, fmt.Errorf("max_tasks: the number in all (%d) must be at least the number per session (%d)", h.MaxTasksTotal, h.MaxTasks))
	}
	if h.IdleStop < 0 || h.IdleStop > 0 && h.IdleStop < caddy.Duration(time.Second) {
		errs = append(errs, errors.New("idle_stop must be at least 1s (or 0: never)"))
	}
	if err := fleet.ValidateEngines(h.Engines); err != nil {
		errs = append(errs, err)
	}
	cfg, err := h.sandboxConfig()
	if err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, h.validatePeople()...)
	if h.Egress != nil {
		if h.Network != "" && h.Network != "none" {
			errs = append(errs, fmt.Errorf("network %s and egress exclude each other: with egress the sandbox has no network of its own and reaches only the allowed hosts, through Caddy", h.Network))
		}
		if _, err := egress.Compile(h.Egress.rules()); err != nil {
			errs = append(errs, fmt.Errorf("egress: %w", err))
		}

	}
	switch {
	case h.DefaultOutput < 0:
		errs = append(errs, errors.New("default_output must be positive"))
	case h.DefaultOutput > cfg.MaxOutput:
		errs = append(errs, fmt.Errorf("default_output (%d) must be at most max_output (%d)", h.DefaultOutput, cfg.MaxOutput))
	case h.DefaultOutput != 0 && h.DefaultOutput < mcptools.MinOutput:
		errs = append(errs, fmt.Errorf("default_output must be at least %d bytes", mcptools.MinOutput))
	}
	return errors.Join(errs...)
}

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
