// Package config holds the settings of the `http.handlers.mcp_sandbox` module: every
// JSON field with its doc, the Caddyfile that sets them, their defaults, Validate, and
// what follows from them alone (a person's sandbox.Config, a person's egress rules).
// It does no I/O but reading trust_ca files and resolving placeholders; the root
// package embeds Settings in its Handler and wires what the settings describe.
package config

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Defaults of the settings that are not the sandbox's own (those are
// sandbox.DefaultConfig's).
const (
	DefaultLinkTTL    = 24 * time.Hour
	DefaultMaxLinkTTL = 7 * 24 * time.Hour
	DefaultKeepalive  = 5 * time.Second
	DefaultYield      = 45 * time.Second
	DefaultOutput     = 30000 // bytes per stream a call returns unless it asks for more
	DefaultMaxTaskTTL = time.Hour
	DefaultMaxTasks   = 100  // per session
	DefaultTasksTotal = 1000 // in all
)

// Settings are the module's JSON fields, as the Caddyfile sets them. The root's Handler
// embeds them, so encoding/json reads and writes them at the handler's top level.
type Settings struct {
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
	// Runtime is the Docker runtime the sandboxes' containers are made with
	// (HostConfig.Runtime), e.g. runsc for gVisor, registered in the engine's
	// daemon.json (docs/security.md). Default: the engine's default runtime (runc).
	// A changed runtime applies when a container is next made (the console's
	// Recreate, or a restore).
	Runtime string `json:"runtime,omitempty"`
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

	// Engines are the engines sandboxes are placed on (`engine` lines): Docker
	// engines, a person's sandbox on the one with the fewest sandboxes when it is
	// first made, the operator's on the first; or one Kubernetes engine (kind
	// kubernetes), on which every sandbox is a pod the cluster places. Empty: the
	// app's docker_host.
	Engines []fleet.Engine `json:"engines,omitempty"`
	// IdleStop stops a sandbox's container after this long without tool calls,
	// previews, uploads, downloads or job output; the next call starts it again with
	// its files. 0: never.
	IdleStop caddy.Duration `json:"idle_stop,omitempty"`
	// KeepProcesses keeps a sandbox's running processes across a stop (idle_stop,
	// the console's Stop): their memory is saved and the next start restores them,
	// where they were. It needs a runtime that can save memory: gVisor's runsc, on a
	// Docker engine with experimental features on (docs/operations.md). Default: off,
	// a stop ends them.
	KeepProcesses bool `json:"keep_processes,omitempty"`
	// MaxCheckpoints is how many checkpoints each sandbox keeps: a new one past it
	// removes the oldest. Default: 5.
	MaxCheckpoints int `json:"max_checkpoints,omitempty"`
	// MaxCheckpointBytes bounds the bytes all of a sandbox's checkpoints hold
	// together (its system outside /sandbox at the apparent size docker commit
	// writes, plus the data of its copy of /sandbox): a checkpoint that would pass
	// it is refused. Default: 10 GiB.
	MaxCheckpointBytes int64 `json:"max_checkpoint_bytes,omitempty"`
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
	// WarmSandboxes is how many sandboxes the site keeps made and started ahead of
	// need on its (first) Docker engine, nobody's: a new person's first call takes one
	// and a new one is made. They count against max_sandboxes. Default: 0 (none).
	// Not on a Kubernetes engine.
	WarmSandboxes int `json:"warm_sandboxes,omitempty"`
	// Egress, when set, takes the sandbox off the network: it reaches only the hosts
	// the block allows, through Caddy, which can add credentials the sandbox never sees.
	Egress *EgressConfig `json:"egress,omitempty"`
}

// Resolve replaces the placeholders ({env.*}, {file.*}) of the keys, public_url and
// the engines' addresses, files and Kubernetes names, as Caddy resolves them at
// provision time.
func (s *Settings) Resolve() {
	repl := caddy.NewReplacer()
	s.APIKey = strings.TrimSpace(repl.ReplaceAll(s.APIKey, ""))
	for i := range s.People {
		s.People[i].Key = strings.TrimSpace(repl.ReplaceAll(s.People[i].Key, ""))
	}
	s.PublicURL = repl.ReplaceAll(s.PublicURL, "")
	for i := range s.Engines {
		e := &s.Engines[i]
		k := &e.Kubernetes
		for _, v := range []*string{&e.Host, &e.TLSCA, &e.TLSCert, &e.TLSKey, &k.Kubeconfig, &k.Context, &k.Namespace, &k.StorageClass} {
			*v = strings.TrimSpace(repl.ReplaceAll(*v, ""))
		}
	}
}

// SetDefaults fills the settings left empty that are not the sandbox's own (the
// sandbox's come from sandbox.DefaultConfig in SandboxConfig). default_output follows
// max_output, so it is left empty while the sandbox's settings do not hold, for
// Validate to report them.
func (s *Settings) SetDefaults() {
	if s.LinkTTL == 0 {
		s.LinkTTL = caddy.Duration(DefaultLinkTTL)
	}
	if s.MaxLinkTTL == 0 {
		s.MaxLinkTTL = max(caddy.Duration(DefaultMaxLinkTTL), s.LinkTTL)
	}
	if s.Keepalive == 0 {
		s.Keepalive = caddy.Duration(DefaultKeepalive)
	}
	if s.YieldAfter == nil {
		y := caddy.Duration(DefaultYield)
		s.YieldAfter = &y
	}
	if s.MaxJobs == 0 {
		s.MaxJobs = sandbox.DefaultMaxJobs
	}
	if s.MaxTaskTTL == 0 {
		s.MaxTaskTTL = caddy.Duration(DefaultMaxTaskTTL)
	}
	if s.MaxTasks == 0 {
		s.MaxTasks = DefaultMaxTasks
	}
	if s.MaxTasksTotal == 0 {
		s.MaxTasksTotal = max(DefaultTasksTotal, s.MaxTasks)
	}
	if cfg, err := s.SandboxConfig(); err == nil && s.DefaultOutput == 0 {
		s.DefaultOutput = min(DefaultOutput, cfg.MaxOutput)
	}
}
