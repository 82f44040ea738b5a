// Package sandbox keeps one long-lived Docker container ("the sandbox") and runs commands
// in it: [Sandbox.Ensure] creates or repairs the container and its volume,
// [Sandbox.Exec] runs `bash -c` with a timeout, cancellation, bounded output and a live
// output callback, [Sandbox.Open] streams a file out, and [Sandbox.Cleanup] deletes idle
// top-level entries of [boxapi.WorkDir].
//
// The package talks only to the Docker Engine API; it knows nothing of HTTP or MCP.
//
//	cli, _ := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
//	sb, _ := sandbox.New(cli, sandbox.DefaultConfig(), logger)
//	res, err := sb.Exec(ctx, "uname -a", boxapi.ExecOptions{})
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
)

// errConfigInvalid wraps every error of [Config.Validate]. The file functions and
// Ensure return the errors of internal/boxapi (wrapped); test them with errors.Is.
var errConfigInvalid = errors.New("invalid sandbox configuration")

// Limits under which Docker or the output buffer would not work sensibly.
const (
	minMemory    = 6 << 20 // Docker refuses containers with less than 6 MiB
	minMaxOutput = 1024
)

// Config says which container to keep and how to run commands in it. Start from
// [DefaultConfig] and override fields.
type Config struct {
	Image     string  // image the container is created from
	Container string  // container name
	Volume    string  // named volume mounted at WorkDir
	Memory    int64   // memory limit in bytes (swap is not added on top)
	CPUs      float64 // CPU limit; clamped to the host's CPU count
	PidsLimit int64   // maximum number of processes in the container
	// NetworkMode is the container's Docker network: DefaultNetwork, "none" (no network
	// at all), "bridge" (Docker's default bridge, shared with other containers), "host",
	// or the name of a network. A named network that does not exist is created as a
	// bridge with inter-container traffic off. "" means DefaultNetwork.
	NetworkMode string
	// ProxyPort, when set, is the port on the container's loopback where the plugin's
	// egress proxy listens: commands get the proxy variables (see proxyEnv).
	ProxyPort int
	// CABundle, when set with ProxyPort, is the CA bundle in the container that
	// commands are pointed at (SSL_CERT_FILE and the like): the image's roots plus the
	// egress proxy's.
	CABundle string
	// NoAgent runs every command as a Docker exec of its own, without the agent inside
	// the container (agent.go).
	NoAgent bool
	// AgentSocketDir, when set and the engine is on this machine (a unix:// address),
	// is a directory of this machine under which each container gets one of its own,
	// mounted read-only, for the agent's direct channel (agent_direct.go) and the
	// agent's binary, which the container then cannot replace (agent_install.go).
	AgentSocketDir string
	// Runtime is the engine's container runtime the container is made with (Docker's
	// HostConfig.Runtime, e.g. runsc for gVisor); "" is the engine's default. A
	// changed runtime applies when the container is next made.
	Runtime string
	// KeepProcesses: a stop saves the running container's memory and processes
	// (Docker's checkpoint, with Exit), and the next start restores them where they
	// were. It needs a runtime that can save memory (gVisor's runsc) on an engine with
	// experimental features on; where it cannot, a stop ends the processes, and the
	// log says why, once.
	KeepProcesses bool
	// Engine is the name of the Docker engine the container is placed on, recorded in
	// its label mcp-sandbox.engine ("" records none).
	Engine string
	// Person is the person whose sandbox this is, recorded in the label
	// mcp-sandbox.person ("" for the operator's: no label).
	Person string
	// Warm marks a sandbox made ahead of need, nobody's yet (label mcp-sandbox.warm):
	// a person's sandbox takes its container over (Sandbox.TakeOver).
	Warm bool
	// WarmPool names the pool that made a warm sandbox (label mcp-sandbox.warm-pool),
	// so that another process can tell a live pool's warm sandboxes from those a
	// process that ended left behind.
	WarmPool string

	// CheckpointVolumeOptions are the local volume driver's options (key=value, one
	// per line) for the volumes that hold checkpoints' copies of WorkDir: another
	// device, or a size limit.
	CheckpointVolumeOptions string
	// MaxCheckpointBytes bounds the bytes all of the sandbox's checkpoints hold
	// together: a new checkpoint that would pass it is refused (0 or less:
	// DefaultMaxCheckpointBytes).
	MaxCheckpointBytes int64

	ExecTimeout     time.Duration // default timeout of one command
	MaxOutput       int           // bytes kept per stream; the middle is cut beyond this
	FileTTL         time.Duration // idle time after which a top-level entry is deleted; 0 disables
	CleanupInterval time.Duration // time between two cleanup passes
}

// DefaultNetwork is the Docker network the sandbox joins by default: a bridge of its own,
// created when missing, with inter-container traffic off, so the sandbox reaches the
// internet but not the other containers of the host (Docker's default bridge lets every
// container talk to every other).
const DefaultNetwork = "mcp-sandbox"

// DefaultBridge is the host interface of DefaultNetwork, for firewall rules such as the
// one that keeps the sandbox away from cloud metadata addresses.
const DefaultBridge = "br-mcp-sandbox"

// DefaultConfig returns the settings used when the user sets nothing. It is the one
// place the defaults are stated; the README and the Caddyfile documentation are checked
// against it.
func DefaultConfig() Config {
	return Config{
		Image:           "code-sandbox:latest",
		Container:       "mcp-sandbox-persistent",
		Volume:          "mcp-sandbox-data",
		Memory:          3 << 30,
		CPUs:            3,
		PidsLimit:       4096,
		NetworkMode:     DefaultNetwork,
		ExecTimeout:     time.Hour,
		MaxOutput:       200000,
		FileTTL:         168 * time.Hour,
		CleanupInterval: time.Hour,

		MaxCheckpointBytes: DefaultMaxCheckpointBytes,
	}
}

// dockerName is the pattern Docker accepts for container and volume names.
var dockerName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// Validate reports every problem of the configuration at once, naming settings as the
// Caddyfile does (pids_limit, file_ttl, ...). It does no I/O.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	if c.Image == "" {
		bad("image is empty")
	} else if strings.ContainsAny(c.Image, " \t\r\n") {
		bad("image %q contains whitespace", c.Image)
	}
	if !dockerName.MatchString(c.Container) {
		bad("container %q is not a valid Docker name (letters, digits, '_', '.', '-'; at least 2 characters)", c.Container)
	}
	if !dockerName.MatchString(c.Volume) {
		bad("volume %q is not a valid Docker name (letters, digits, '_', '.', '-'; at least 2 characters)", c.Volume)
	}
	if c.Runtime != "" && !validRuntime.MatchString(c.Runtime) {
		bad("runtime %q is not a runtime's name (letters, digits, '_', '.', '-')", c.Runtime)
	}
	if c.KeepProcesses && c.Runtime == "" {
		bad("keep_processes needs a runtime that can save a sandbox's memory: set `runtime runsc` (gVisor, registered with the engine as docs/security.md says), or turn keep_processes off")
	}
	if strings.ContainsAny(c.NetworkMode, " \t\r\n") {
		bad("network %q contains whitespace", c.NetworkMode)
	}
	if c.ProxyPort < 0 || c.ProxyPort > 65535 {
		bad("the egress proxy's port %d is out of range 1-65535", c.ProxyPort)
	}
	if c.Memory < minMemory {
		bad("memory %d bytes is below Docker's minimum of 6 MiB", c.Memory)
	}
	if math.IsNaN(c.CPUs) || math.IsInf(c.CPUs, 0) || c.CPUs < 0.01 {
		bad("cpus %v must be at least 0.01", c.CPUs)
	}
	if c.PidsLimit <= 0 {
		bad("pids_limit %d must be positive", c.PidsLimit)
	}
	if c.ExecTimeout <= 0 {
		bad("exec_timeout %v must be positive", c.ExecTimeout)
	}
	if c.MaxOutput < minMaxOutput {
		bad("max_output %d must be at least %d bytes", c.MaxOutput, minMaxOutput)
	}
	if c.FileTTL < 0 {
		bad("file_ttl %v is negative (0 disables the cleanup)", c.FileTTL)
	}
	if c.CleanupInterval < 0 {
		bad("cleanup_interval %v is negative", c.CleanupInterval)
	}
	if c.FileTTL > 0 && c.CleanupInterval == 0 {
		bad("cleanup_interval must be positive when file_ttl is set")
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", errConfigInvalid, errors.Join(errs...))
}

// ImageBuildHint is the command that builds image from the recipe in the plugin's
// repository: the one hint every message about a missing image gives.
func ImageBuildHint(image string) string {
	return fmt.Sprintf("docker build -t %s -f containers/Dockerfile.unified containers/", image)
}

// network is the Docker network mode the container gets.
func (c Config) network() string {
	if c.NetworkMode == "" {
		return DefaultNetwork
	}
	return c.NetworkMode
}

// offline reports whether the sandbox reaches no host at all: network none and no
// egress proxy.
func (c Config) offline() bool { return c.network() == "none" && c.ProxyPort == 0 }

// nanoCPUs converts the CPU count into Docker's unit.
func (c Config) nanoCPUs() int64 { return int64(math.Round(c.CPUs * 1e9)) }

// memoryUnits maps Docker's size suffixes (binary multiples, case-insensitive) to bytes.
var memoryUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

// ParseMemory parses a memory size the way Docker's --memory does: a number with an
// optional suffix b, k, m, g or t (binary multiples), also written kb/KiB, mb/MiB and so
// on; fractions such as "1.5g" are allowed. Zero, negative and unparsable sizes are errors.
func ParseMemory(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	mult, ok := memoryUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("parsing memory size %q: want a number with an optional unit such as 512m or 3g", s)
	}
	var n int64
	if strings.Contains(num, ".") {
		f, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing memory size %q: %w", s, err)
		}
		f *= float64(mult)
		if f >= math.MaxInt64 {
			return 0, fmt.Errorf("parsing memory size %q: too large", s)
		}
		n = int64(f)
	} else {
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing memory size %q: %w", s, err)
		}
		if v > math.MaxInt64/mult {
			return 0, fmt.Errorf("parsing memory size %q: too large", s)
		}
		n = v * mult
	}
	if n <= 0 {
		return 0, fmt.Errorf("parsing memory size %q: must be positive", s)
	}
	return n, nil
}

// Sandbox is one persistent container. Its methods are safe for concurrent use. Its
// work is done by five parts, each with its own state: the container's lifecycle
// (ensure.go, idle.go, runtime.go, status.go), the agent link (agent*.go), the job
// runner (exec.go, job*.go), the file store (files.go, upload*.go, transfer.go) and the
// saves (checkpoint.go, keep.go). A part reaches another through sb.
type Sandbox struct {
	cli API
	cfg Config
	log *zap.Logger

	mu sync.Mutex // the lifecycle's state, agentArch (link) and what the fields say

	life   *lifecycle
	link   *agentLink
	runner *jobRunner
	files  *fileStore
	saves  *saveStore
}

// part is what every part shares: the sandbox it belongs to and its settings.
type part struct {
	sb  *Sandbox
	cli API
	can *capabilities // what cli can do
	cfg Config
	log *zap.Logger
}

// capabilities are an engine's, asked once, when first needed.
type capabilities struct {
	once sync.Once
	cli  API
	caps boxapi.Capabilities
}

// caps is what the engine can do.
func (p part) caps() boxapi.Capabilities {
	p.can.once.Do(func() { p.can.caps = capabilitiesOf(p.can.cli) })
	return p.can.caps
}

// lifecycle makes, starts, stops and repairs the container.
type lifecycle struct {
	part
	ensureGroup singleflight.Group

	readyAt     time.Time     // last time Ensure saw the container running with our limits (under mu)
	readyCh     chan struct{} // closed by the next Ensure, Start or Restart that succeeds (see Ready)
	warnedImage bool          // the image mismatch is logged once, not on every Ensure
	imageOK     struct {      // the container last found on the configured image, and when
		id string
		at time.Time
	}
	warnedCPUs bool
	hostCPUs   int // the engine's CPU count (docker info's NCPU); 0 until asked
	// runtime is the runtime the container runs under, as last seen (runtimeSeen).
	runtime     runtimeFacts
	runtimeSeen bool
	// warnedRuntime, warnedRuntimeConf and warnedRuntimeChange are what was last
	// logged of a missing runtime, of a runtime's configuration and of a container
	// under another runtime than configured: each is logged once.
	warnedRuntime, warnedRuntimeConf, warnedRuntimeChange string

	cleanupMissed bool          // a cleanup pass found the container stopped (under mu)
	cleanupKick   chan struct{} // runs the missed pass when the container starts again

	// starts counts the containers this Sandbox made or started: a job begun under
	// another count was in a container that has since stopped or gone (exec.go).
	starts atomic.Int64

	closed   bool               // Close was called: the container is no longer created or started (under mu)
	making   sync.WaitGroup     // Ensures and Starts under way (added under mu while not closed)
	closing  context.Context    // ends when Close is called
	closeNow context.CancelFunc // ends closing
}

// agentLink is the channel to the agent inside the container.
type agentLink struct {
	part
	noBind     atomic.Bool  // the engine refused or cannot see the direct channel's directory (agent_direct.go)
	warnedPath atomic.Bool  // the direct channel's socket path was too long, logged
	bulkWrites atomic.Int64 // uploads whose bytes went over a socket of their own
	agentMu    sync.Mutex
	agentBin   string // the agent's binary in the container; "" while no agent runs
	agent      agentState

	agentArch containerArch // the container's image architecture, for installAgent (under sb.mu)
}

// jobRunner runs commands and jobs.
type jobRunner struct {
	part
	jobs jobLocks // one delivery of a job's output at a time

	jobsMu    sync.Mutex
	running   map[string]bool // jobs started and not yet seen ending, for max_jobs
	jobEnded  atomic.Pointer[func(id string)]
	held      heldRunes
	lastPrune time.Time
	lastSeen  time.Time   // the last result seen (jobSeen)
	pruneAt   *time.Timer // the pass that waits for a quiet moment; nil when none waits
	prunePass func()      // runs a pass; nil for the job script's (tests set it)

	cmdEnv []string  // what commands get on top of the image's environment (see commandEnv; under sb.mu)
	warm   warmReads // a ranged file reader started ahead of need
}

// fileStore reads and writes the sandbox's files.
type fileStore struct {
	part
	xfer transfers // idle transfer containers (see transfer.go)
}

// saveStore keeps checkpoints and the processes a stop saved.
type saveStore struct {
	part
	ckMu sync.Mutex // one checkpoint or restore at a time
	// keepOff is why stops cannot keep the processes although KeepProcesses is on,
	// as last seen ("" when they can); warnedKeep is what of it was logged last.
	keepOff, warnedKeep string
	// kept says a stop saved the processes (keep.go), keptBytes about their size.
	kept      bool
	keptBytes int64
	// lostNote is what the last stop or start lost, for the next command (TakeNote).
	lostNote string
}

// New returns a Sandbox for cfg. It validates cfg and does no I/O, so it is safe to call
// while configuration is only being checked. A nil logger discards logs.
func New(cli API, cfg Config, logger *zap.Logger) (*Sandbox, error) {
	if cli == nil {
		return nil, errors.New("creating sandbox: nil Docker client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return wire(cli, cfg, logger.With(zap.String("container", cfg.Container))), nil
}

// wire makes a Sandbox and its parts; it checks nothing.
func wire(cli API, cfg Config, log *zap.Logger) *Sandbox {
	closing, closeNow := context.WithCancel(context.Background())
	sb := &Sandbox{cli: cli, cfg: cfg, log: log}
	p := part{sb: sb, cli: cli, can: &capabilities{cli: cli}, cfg: cfg, log: log}
	sb.life = &lifecycle{part: p, cleanupKick: make(chan struct{}, 1), closing: closing, closeNow: closeNow}
	sb.link = &agentLink{part: p}
	sb.runner = &jobRunner{part: p}
	sb.files = &fileStore{part: p}
	sb.saves = &saveStore{part: p}
	return sb
}

// Config returns the configuration the Sandbox was made with.
func (s *Sandbox) Config() Config { return s.cfg }

// proxyEnv is what points a command at the egress proxy: the usual variables in both
// cases (curl reads only the lower-case http_proxy), loopback left direct, and Node's
// built-in fetch told to honour them. The proxy URL carries the job id as its user
// name, sent back as Proxy-Authorization, so a refusal is tied to its command (with a
// password, "x": Python's urllib sends no credentials without one).
func (c Config) proxyEnv(jobID string) []string {
	if c.ProxyPort == 0 {
		return nil
	}
	u := "http://" + jobID + ":x@127.0.0.1:" + strconv.Itoa(c.ProxyPort)
	env := make([]string, 0, 10)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"} {
		env = append(env, k+"="+u, strings.ToLower(k)+"="+u)
	}
	env = append(env, "NO_PROXY=localhost,127.0.0.1", "no_proxy=localhost,127.0.0.1", "NODE_USE_ENV_PROXY=1")
	if c.CABundle != "" {
		for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"} {
			env = append(env, k+"="+c.CABundle)
		}
	}
	return env
}
