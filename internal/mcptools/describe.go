package mcptools

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// The model is told what its sandbox is like: whether it has a network, its limits,
// what is preinstalled (Box.Facts, nil until detected). The environment is added to
// the execute description and the server instructions as soon as it is known:
// initialize waits up to factsWait for a detection under way, and sessions that began
// before it ended are sent tools/list_changed (DescriptionsChanged).

// factsWait bounds how long initialize waits for the installed tools to be detected.
const factsWait = 3 * time.Second

type describingKey struct{}

// Describing reports whether Boxes.For is asked for the sandbox to describe it to the
// model (at initialize), not for a tool call: per-call counts leave it out.
func Describing(ctx context.Context) bool {
	v, _ := ctx.Value(describingKey{}).(bool)
	return v
}

// environment describes the sandbox to the model in a few short sentences, waiting up
// to wait for what is installed.
func (s *Tools) environment(ctx context.Context, wait time.Duration) string {
	cfg := s.opts.Config
	box, err := s.opts.Boxes.For(context.WithValue(ctx, describingKey{}, true))
	cpus := cfg.CPUs
	if err == nil {
		cpus = box.CPUs()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The sandbox has %s of memory (free and /proc show the host's, not this limit), %s and at most %d processes.",
		human.Size(cfg.Memory), cpuText(cpus), cfg.PidsLimit)
	var eg *Egress
	if err == nil {
		eg = box.Egress()
	}
	b.WriteString(networkText(cfg.NetworkMode, eg))
	if err == nil && box.Runtime().GVisor {
		b.WriteString(gvisorText)
	}
	if keeps := err == nil && box.Runtime().KeepsProcesses; s.opts.IdleStop > 0 && err == nil && keeps != s.opts.KeepProcesses {
		if keeps {
			b.WriteString(keepText)
		} else {
			b.WriteString(noKeepText)
		}
	}
	if err == nil {
		b.WriteString(describeFacts(box.Facts(ctx, wait)))
	}
	return b.String()
}

// gvisorText is what the model is told of a sandbox under gVisor: a kernel of its own
// (uname says 4.19-gvisor), where a few system calls and /proc files differ.
const gvisorText = " It runs under gVisor, a kernel of its own: a rare system call or /proc file may be missing."

// keepText and noKeepText are what the model is told of a sandbox whose stops keep its
// processes, or end them, when the site's rule (execute's description) says otherwise.
const (
	keepText   = " When this sandbox stops for idleness, its running processes and jobs are saved with their memory and go on where they were at the next call (connections to outside the sandbox end)."
	noKeepText = " When this sandbox stops for idleness, its running processes and jobs end (its files stay)."
)

// describeFacts is the sentence on what is installed, empty while that is unknown.
// It names only programs and modules from the fixed lists detection looks for (see
// [boxapi.Facts.Known]): nothing the container printed reaches the model as an
// instruction.
func describeFacts(f *boxapi.Facts) string {
	if f == nil {
		return ""
	}
	known := f.Known()
	f = &known
	if len(f.Programs) == 0 {
		return " Installed: only the base system (no python3, pip3, node, npm or git)."
	}
	progs := make([]string, 0, len(f.Programs))
	for _, p := range f.Programs {
		if p == "python3" && len(f.PythonModules) > 0 {
			p += " (" + strings.Join(f.PythonModules, ", ") + ")"
		}
		progs = append(progs, p)
	}
	text := " Installed: " + strings.Join(progs, ", ") + "."
	var missing []string
	for _, p := range assumedPrograms {
		if !slices.Contains(f.Programs, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		text += " Not installed: " + strings.Join(missing, ", ") + "."
	}
	return text
}

// assumedPrograms are the programs models take for granted: when one is missing the
// description says so, or they try pip install or npm install first.
var assumedPrograms = []string{"python3", "pip3", "node", "npm", "git"}

func cpuText(n float64) string {
	if n == 1 {
		return "1 CPU"
	}
	return fmt.Sprintf("%g CPUs", n)
}

// describeTools appends the environment to the execute tool's description as tools
// are listed, so that the detected tools appear once known, and names the tools' apps
// to a client that renders them.
func (s *Tools) describeTools(ctx context.Context, tools []mcp.Tool) []mcp.Tool {
	tools = hideUnknownTool(tools)
	env := s.environment(ctx, 0)
	out := make([]mcp.Tool, len(tools))
	copy(out, tools)
	apps := rendersApps(ctx)
	for i := range out {
		if apps {
			out[i] = withApp(out[i])
		}
		if out[i].Name == "execute" {
			out[i].Description += "\n\n" + env
		}
	}
	return out
}

// instructions is the server's instructions with the environment, given at
// initialize.
func (s *Tools) instructions(ctx context.Context, _ any, _ *mcp.InitializeRequest, res *mcp.InitializeResult) {
	res.Instructions = s.instructionsText() + " " + s.environment(ctx, factsWait)
}

// DescriptionsChanged tells the connected clients that the tool descriptions changed
// (the installed tools became known), so that they list them again.
func (s *Tools) DescriptionsChanged() {
	s.server.SendNotificationToAllClients(mcp.MethodNotificationToolsListChanged, nil)
}
