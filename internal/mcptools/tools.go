// Package mcptools is everything the model sees: the MCP tools' definitions, how their
// arguments are read, how results and notes are written, MCP tasks and progress, and
// the server's instructions. It knows nothing of Caddy or Docker: the sandbox of a call
// comes from Boxes, links from Links, previews from Previews, and every call is
// recorded in Audit. The root package builds those from the configuration.
package mcptools

import (
	"context"
	"net"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

// Box is one sandbox as the tools use it.
type Box interface {
	Exec(ctx context.Context, command string, opts boxapi.ExecOptions) (*boxapi.ExecResult, error)
	JobOutput(ctx context.Context, id string, wait time.Duration, input *string, maxOutput int, onOutput func(boxapi.Stream, []byte)) (*boxapi.ExecResult, error)
	KillJob(ctx context.Context, id string, maxOutput int) (*boxapi.ExecResult, error)
	ListJobs(ctx context.Context) ([]boxapi.JobInfo, error)

	Stat(ctx context.Context, p string) (boxapi.FileInfo, error)
	OpenRange(ctx context.Context, p string, offset, length int64) (*boxapi.File, error)
	ReadLines(ctx context.Context, p string, first, n int64, maxLine, maxBytes int) (*boxapi.Lines, error)
	WriteFile(ctx context.Context, p string, data []byte) (boxapi.FileInfo, bool, error)
	EditFile(ctx context.Context, p, old, new string) (boxapi.EditResult, error)
	MakeDir(ctx context.Context, dir string) error

	DialPort(ctx context.Context, port int) (net.Conn, error)

	// CPUs is the CPUs the sandbox really gets: the smaller of cpus and the host's.
	CPUs() float64
	// Runtime is the container runtime the sandbox runs under (gVisor or not).
	Runtime() boxapi.Runtime
	// Facts is what detection found installed; nil while it is not known. It waits up
	// to wait, while ctx lasts, for a detection under way.
	Facts(ctx context.Context, wait time.Duration) *boxapi.Facts
	// EngineDown reports whether err, from one of the calls above, means the sandbox's
	// engine did not answer: trying again later may work.
	EngineDown(err error) bool
	// Unreachable names what did not answer when EngineDown is true ("the Docker
	// engine", "the Kubernetes API server"), for the model's error text.
	Unreachable() string
	// ImageMissing is what to tell the model when the sandbox's image is missing: that
	// it is being built, or what the operator must do.
	ImageMissing() string
	// Egress is the sandbox's way out through the plugin's proxy; nil without an
	// egress policy (the network is then as configured).
	Egress() *Egress
	// Blocked returns, once, the hosts the proxy refused to a job's commands, each as
	// "host (reason)".
	Blocked(jobID string) []string
	// TakeNote returns, once, what the sandbox's last stop or start lost that the
	// model should know (processes that could not be kept), "" when nothing.
	TakeNote() string
}

// Boxes finds the sandbox of a call, from its context (the caller's identity).
type Boxes interface {
	For(ctx context.Context) (Box, error)
}

// Links signs the links the tools hand out and remembers them for the console. The
// paths come back without the origin.
type Links interface {
	Download(ctx context.Context, path string, ttl time.Duration) (urlPath string, expires time.Time)
	Upload(ctx context.Context, dir string, ttl time.Duration) (urlPath string, expires time.Time)
}

// Previews exposes ports of the caller's sandbox at their own origins.
type Previews interface {
	// Expose makes (or renews) the preview of port; origin is the site's, which the
	// preview URL follows in scheme and port.
	Expose(ctx context.Context, port int, origin string) (url string, expires time.Time)
	Unexpose(ctx context.Context, port int) (was bool)
	// FrameDomain is the origin pattern of every preview for a person who reaches the
	// site at origin (e.g. https://*.preview.example.com), as a frame-src source.
	FrameDomain(origin string) string
}

// Audit records each tool call in the operator's activity log.
type Audit = audit.Recorder

// Config is what the tools state of the sandbox's settings: the fields of the same
// names of the sandbox's configuration.
type Config struct {
	Memory      int64         // memory limit in bytes
	CPUs        float64       // CPU limit as set (Box.CPUs is what the sandbox gets)
	PidsLimit   int64         // maximum number of processes
	NetworkMode string        // the container's Docker network
	ExecTimeout time.Duration // default timeout of one command
	MaxOutput   int           // bytes kept per stream
	FileTTL     time.Duration // idle time after which a top-level entry is deleted; 0 never
}

// Options configure the tools. Durations are the settings of the same names in the
// Caddyfile, with their defaults applied.
type Options struct {
	// Config is the sandbox's configuration, as the descriptions state it.
	Config   Config
	Boxes    Boxes
	Links    Links
	Previews Previews // nil: previews are off, and their tools are not offered
	Audit    Audit
	Logger   *zap.Logger
	Version  string // reported in serverInfo

	LinkTTL, MaxLinkTTL time.Duration
	MaxUpload           int64
	// DefaultOutput is default_output: the bytes of each stream a call returns unless
	// its max_output asks for more. 0: the sandbox's max_output.
	DefaultOutput int
	// Yield is yield_after; 0 is off.
	Yield       time.Duration
	MaxJobs     int
	Keepalive   time.Duration
	PreviewAuth bool
	PreviewTTL  time.Duration
	// IdleStop is idle_stop: a sandbox unused this long is stopped; 0 never.
	IdleStop time.Duration
	// Ephemeral says that a stop (idle_stop) keeps only /sandbox: the engine makes
	// the sandbox again from its image (a Kubernetes engine's pod).
	Ephemeral bool
	// KeepProcesses is the site's keep_processes: an idle stop keeps the running
	// processes. A sandbox that does otherwise says so in its description.
	KeepProcesses bool
	// NoCheckpoints, when set, says why the sandboxes cannot be checkpointed and what
	// to do instead: checkpoint, checkpoint_list and restore are not offered, and the
	// server's instructions carry this text.
	NoCheckpoints string

	MaxTaskTTL    time.Duration
	MaxTasks      int // per session
	MaxTasksTotal int

	// QuestionKey signs the requestState of a question about a host put to a
	// 2026-07-28 client (see mrtr.go); empty: such clients are never asked.
	QuestionKey []byte
	// AskTimeout is how long a held connection waits for an answer: a requestState
	// expires then.
	AskTimeout time.Duration
	// Answers hands answers between instances; nil: only the instance that asked
	// takes them.
	Answers Answers
	// Relay puts a question to another instance whose call waits for the job; nil:
	// only the calls of this instance are asked.
	Relay Relay
}

// Tools is the MCP server's tool side.
type Tools struct {
	opts   Options
	tasks  *taskStore
	server *server.MCPServer
	calls  calls
	// pending are the questions put by input_required, by id.
	pending pending
}

// serverInstructions are the same for every sandbox; what depends on its settings
// (whether it is online, so that installed packages persist) is the environment added
// at initialize.
const serverInstructions = `This server gives you a persistent Linux sandbox (a Docker container) where you run bash commands as root with the execute tool. Files under /sandbox persist between calls. Use share_file to hand a file to the user as a download link, and upload_link when the user wants to give you a file.`

// noPreviewsText tells the model, when previews are off, that nothing listening in the
// sandbox reaches the person: without it, models tell people to open
// http://localhost:<port>, which is their own machine.
const noPreviewsText = `The user cannot reach ports in the sandbox (this server has no previews): never tell them to open localhost or the sandbox's address, and a web app that needs its server cannot be shown to them here. Test servers from inside with curl. To show a result, share_file an image or PDF (they open in the browser) or a zip of the project for the user to run themselves; an HTML page shared with share_file downloads as a file and cannot reach any server, so it works only when self-contained (scripts, styles and images inline, data embedded). For the app itself, tell the user that the server's operator can turn on previews.`

// previewsText is the same when previews are on.
const previewsText = `To let the user open a web app or server running in the sandbox, use expose_port: localhost is their own machine.`

// instructionsText is the server's instructions before the environment.
func (s *Tools) instructionsText() string {
	text := serverInstructions + " " + previewsText
	if s.opts.Previews == nil {
		text = serverInstructions + " " + noPreviewsText
	}
	if s.opts.NoCheckpoints != "" {
		text += " " + s.opts.NoCheckpoints
	}
	return text
}

// New builds the MCP server with the sandbox tools.
func New(o Options) *Tools {
	s := &Tools{opts: o}
	if o.Relay != nil && o.Answers != nil {
		s.calls.onTrack = s.followRelayed
	}
	s.tasks = newTaskStore(o.MaxTaskTTL, o.MaxTasks, o.MaxTasksTotal)
	hooks := &server.Hooks{}
	hooks.AddAfterInitialize(s.instructions)
	appHooks(hooks)
	// The task options come first: their middleware (see tasks.go) replaces a task's
	// result by a handle, and the audit log must see the result itself.
	opts := append(s.tasks.serverOptions(hooks),
		server.WithToolCapabilities(true),             // list_changed once the installed tools are known (describe.go)
		server.WithResourceCapabilities(false, false), // the apps (apps.go)
		server.WithInstructions(s.instructionsText()),
		server.WithToolFilter(s.describeTools),
		server.WithHooks(hooks),
		server.WithRecovery(),
		server.WithToolHandlerMiddleware(s.auditTool),
	)
	m := server.NewMCPServer("mcp-sandbox", o.Version, opts...)
	addTool(s, m, s.executeTool(), s.execute)
	addTool(s, m, s.shareFileTool(), s.shareFile)
	addTool(s, m, s.jobOutputTool(), s.jobOutput)
	addTool(s, m, s.jobInputTool(), s.jobInput)
	addTool(s, m, s.jobKillTool(), s.jobKill)
	addTool(s, m, s.jobListTool(), s.jobList)
	addTool(s, m, s.uploadLinkTool(), s.uploadLink)
	addTool(s, m, s.readFileTool(), s.readFile)
	addTool(s, m, s.writeFileTool(), s.writeFile)
	addTool(s, m, s.editFileTool(), s.editFile)
	if o.NoCheckpoints == "" {
		s.addCheckpointTools(m)
	}
	s.addApps(m)
	s.addUnknownTool(m, hooks)
	if o.Previews != nil {
		addTool(s, m, s.exposePortTool(), s.exposePort)
		addTool(s, m, s.unexposePortTool(), s.unexposePort)
	}
	s.server = m
	return s
}

// MCPServer is the MCP server to serve.
func (s *Tools) MCPServer() *server.MCPServer { return s.server }

// Request prepares the context of one HTTP request to the MCP endpoint (see
// tasks.go); call done when mcp-go has answered it.
func (s *Tools) Request(ctx context.Context) (_ context.Context, done func()) {
	return s.tasks.request(ctx)
}

// EndSession drops what the session holds (its tasks' results) once the client ended it.
func (s *Tools) EndSession(id string) { s.tasks.endSession(id) }

// Close drops every task result held.
func (s *Tools) Close() { s.tasks.close() }

// boxFor resolves the sandbox of a call. Failing, it gives the tool result to return.
func (s *Tools) boxFor(ctx context.Context) (Box, *mcp.CallToolResult) {
	b, err := s.opts.Boxes.For(ctx)
	if err != nil {
		return nil, mcp.NewToolResultError("The sandbox for this sign-in is not available: " + err.Error() + ".")
	}
	return b, nil
}

// Caller is what the tools know of who calls them.
type Caller struct {
	ClientName, ClientID, Subject string
	Method                        string // how the caller signed in (oauth.Method*)
	Person                        string // whose sandbox the call uses; "" for the operator
	Container                     string // the name of that sandbox's container, for logs
	Label                         string // how the activity log names the caller
	Origin                        string // the scheme and host links point at
	Remote                        string // the client's address
}

type callerKey struct{}

// WithCaller gives a call's context its caller.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom is the caller of a call; empty outside one.
func CallerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}
