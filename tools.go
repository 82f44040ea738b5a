package mcpsandbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// maxTimeout is the longest timeout a single execute call may ask for.
const maxTimeout = 24 * time.Hour

// executeOutput is the structured result of execute.
type executeOutput struct {
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	ExitCode        int     `json:"exit_code"`
	TimedOut        bool    `json:"timed_out"`
	Cancelled       bool    `json:"cancelled"`
	StdoutBytes     int64   `json:"stdout_bytes"`
	StderrBytes     int64   `json:"stderr_bytes"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
	DurationSeconds float64 `json:"duration_seconds"`
}

// shareOutput is the structured result of share_file.
type shareOutput struct {
	URL       string    `json:"url"`
	Path      string    `json:"path"`
	Name      string    `json:"name"`
	Size      int64     `json:"size"`
	ExpiresAt time.Time `json:"expires_at"`
	Directory bool      `json:"directory,omitempty"`
}

const executeOutputSchema = `{
  "type": "object",
  "properties": {
    "stdout": {"type": "string", "description": "Standard output; when longer than the limit, its head and tail around a marker saying how much was left out."},
    "stderr": {"type": "string", "description": "Standard error, cut like stdout."},
    "exit_code": {"type": "integer", "description": "Exit status of bash; -1 when the command was killed before it exited."},
    "timed_out": {"type": "boolean"},
    "cancelled": {"type": "boolean"},
    "stdout_bytes": {"type": "integer", "description": "Bytes the command wrote to stdout in total."},
    "stderr_bytes": {"type": "integer"},
    "stdout_truncated": {"type": "boolean"},
    "stderr_truncated": {"type": "boolean"},
    "duration_seconds": {"type": "number"}
  },
  "required": ["stdout", "stderr", "exit_code", "timed_out", "cancelled", "stdout_bytes", "stderr_bytes", "stdout_truncated", "stderr_truncated", "duration_seconds"]
}`

const shareOutputSchema = `{
  "type": "object",
  "properties": {
    "url": {"type": "string", "description": "Public download link; anyone with it can download the file until it expires."},
    "path": {"type": "string", "description": "The path shared, cleaned (no . or .. segments)."},
    "name": {"type": "string", "description": "The download's file name; <directory>.zip for a directory."},
    "size": {"type": "integer", "description": "Size in bytes when the link was made; 0 for a directory, whose zip is made when downloaded."},
    "expires_at": {"type": "string", "format": "date-time"},
    "directory": {"type": "boolean", "description": "True when the link serves a directory as a zip archive."}
  },
  "required": ["url", "path", "name", "size", "expires_at"]
}`

func (h *Handler) executeTool() mcp.Tool {
	cfg := h.box.Config()
	ttl := "never (cleanup is off)"
	if cfg.FileTTL > 0 {
		ttl = "after " + humanDuration(cfg.FileTTL) + " without changes"
	}
	desc := fmt.Sprintf(`Run a bash command as root in a persistent Linux sandbox and return its stdout, stderr and exit code.

How the sandbox behaves:
- Each call is a fresh `+"`bash -c`"+` process started in /sandbox with empty stdin: `+"`cd`"+`, exported variables and shell functions do not carry over to the next call. Chain steps with && in one command, or write a script file.
- Files under /sandbox persist between calls and across restarts. A top-level entry of /sandbox (file or directory) is deleted %s anywhere inside it, so keep work you still need in use or share it.
- Packages you install (apt-get, pip, npm, ...) persist between calls. You are root; there is no sudo.
- The command is killed, with every process it started, after the timeout (default %s). For work that must outlive the call, detach it: `+"`setsid nohup long-job > /sandbox/job.log 2>&1 &`"+`, then check the log in later calls.
- Each output stream keeps its first and last %d bytes; the middle of longer output is replaced by a marker. Redirect large output to a file and inspect it with head, tail or grep.
- To give the user a file (a report, an image, an archive), write it under /sandbox and call share_file with its path.`,
		ttl, humanDuration(cfg.ExecTimeout), cfg.MaxOutput/2)
	return mcp.NewTool("execute",
		mcp.WithDescription(desc),
		mcp.WithTitleAnnotation("Run a command in the sandbox"),
		mcp.WithString("command", mcp.Required(), mcp.MinLength(1),
			mcp.Description("The bash command line to run, e.g. `python3 script.py` or `ls -la && cat notes.txt`.")),
		mcp.WithNumber("timeout", mcp.Min(1), mcp.Max(maxTimeout.Seconds()),
			mcp.Description(fmt.Sprintf("Seconds before the command is killed. Default %d.", int(cfg.ExecTimeout.Seconds())))),
		mcp.WithRawOutputSchema([]byte(executeOutputSchema)),
		mcp.WithReadOnlyHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(false),
		mcp.WithOpenWorldHintAnnotation(true),
	)
}

func (h *Handler) shareFileTool() mcp.Tool {
	return mcp.NewTool("share_file",
		mcp.WithDescription(fmt.Sprintf(`Make a download link for a file or directory in the sandbox, to give to the user. The link works without signing in and expires after %s by default (expires_in sets another lifetime, up to %s). Images, PDFs, audio and video open in the browser; other files download with their name. A directory downloads as <name>.zip, made when downloaded. The link serves the file as it is when downloaded, not a copy: keep it in place until the user has it.`,
			humanDuration(time.Duration(h.LinkTTL)), humanDuration(time.Duration(h.MaxLinkTTL)))),
		mcp.WithTitleAnnotation("Share a sandbox file as a download link"),
		mcp.WithString("path", mcp.Required(), mcp.MinLength(1),
			mcp.Description("Absolute path of a file or directory in the sandbox, e.g. /sandbox/report.pdf.")),
		mcp.WithNumber("expires_in", mcp.Min(1), mcp.Max(time.Duration(h.MaxLinkTTL).Seconds()),
			mcp.Description(fmt.Sprintf("Seconds the link stays valid. Default %d (%s), at most %d (%s).",
				int64(time.Duration(h.LinkTTL).Seconds()), humanDuration(time.Duration(h.LinkTTL)),
				int64(time.Duration(h.MaxLinkTTL).Seconds()), humanDuration(time.Duration(h.MaxLinkTTL))))),
		mcp.WithRawOutputSchema([]byte(shareOutputSchema)),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(false),
		mcp.WithOpenWorldHintAnnotation(false),
	)
}

// execute runs one command and reports its output live as progress notifications.
func (h *Handler) execute(ctx context.Context, a args) (*mcp.CallToolResult, error) {
	command, bad := a.str("command")
	if bad != nil {
		return bad.result(), nil
	}
	if strings.TrimSpace(command) == "" {
		return mcp.NewToolResultError(`execute needs "command": a non-empty bash command line, e.g. {"command": "ls -la"}`), nil
	}
	timeout := h.box.Config().ExecTimeout
	secs, ok, bad := a.num("timeout", "a number of seconds", 1, maxTimeout.Seconds())
	if bad != nil {
		return bad.result(), nil
	}
	if ok {
		timeout = time.Duration(secs * float64(time.Second))
	}

	prog := startProgress(ctx, a.progress, time.Duration(h.Keepalive))
	metricRunning.Inc()
	res, err := h.box.Exec(ctx, command, sandbox.ExecOptions{Timeout: timeout, OnOutput: prog.output})
	metricRunning.Dec()
	prog.stop()

	id := callFrom(ctx).identity
	fields := []zap.Field{
		zap.String("client", id.ClientName), zap.String("client_id", id.ClientID), zap.String("auth", id.Method),
		zap.String("command", clip(command, 200)),
	}
	if err != nil {
		metricExecutions.WithLabelValues("error").Inc()
		h.logger.Error("execute failed", append(fields, zap.Error(err))...)
		return mcp.NewToolResultError(h.execErrorText(err)), nil
	}
	outcome := "ok"
	switch {
	case res.TimedOut:
		outcome = "timeout"
	case res.Cancelled:
		outcome = "cancelled"
	case res.ExitCode != 0:
		outcome = "nonzero"
	}
	metricExecutions.WithLabelValues(outcome).Inc()
	metricDuration.Observe(res.Duration.Seconds())
	h.logger.Info("execute", append(fields, zap.Int("exit_code", res.ExitCode), zap.String("outcome", outcome),
		zap.Duration("duration", res.Duration), zap.Int64("stdout_bytes", res.StdoutBytes), zap.Int64("stderr_bytes", res.StderrBytes))...)

	out := executeOutput{
		Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode,
		TimedOut: res.TimedOut, Cancelled: res.Cancelled,
		StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes,
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		DurationSeconds: math.Round(res.Duration.Seconds()*1000) / 1000,
	}
	return mcp.NewToolResultStructured(out, executeText(out, timeout)), nil
}

// executeText is the result as text, for clients that do not read structuredContent.
func executeText(o executeOutput, timeout time.Duration) string {
	var b strings.Builder
	b.WriteString(o.Stdout)
	if o.Stderr != "" {
		if b.Len() > 0 && !strings.HasSuffix(o.Stdout, "\n") {
			b.WriteByte('\n')
		}
		b.WriteString("[stderr]\n")
		b.WriteString(o.Stderr)
	}
	if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
		b.WriteByte('\n')
	}
	switch {
	case o.TimedOut:
		fmt.Fprintf(&b, "[timed out after %s: the command and its child processes were killed; detach long jobs with setsid nohup]", humanDuration(timeout))
	case o.Cancelled:
		b.WriteString("[cancelled: the command and its child processes were killed]")
	default:
		fmt.Fprintf(&b, "[exit code %d, %.2fs]", o.ExitCode, o.DurationSeconds)
	}
	return b.String()
}

func (h *Handler) execErrorText(err error) string {
	if errors.Is(err, sandbox.ErrImageMissing) {
		return h.imageMissing(h.docker, h.host)
	}
	return "The sandbox could not run the command: " + err.Error() + ". Try again; if it keeps failing, the server's Docker engine needs attention."
}

// shareFile makes a signed link for a file or directory in the container.
func (h *Handler) shareFile(ctx context.Context, a args) (*mcp.CallToolResult, error) {
	path, bad := a.str("path")
	if bad != nil {
		return bad.result(), nil
	}
	if !strings.HasPrefix(path, "/") {
		return mcp.NewToolResultError(fmt.Sprintf(`share_file needs "path": an absolute path such as /sandbox/report.pdf, got %q`, path)), nil
	}
	ttl := time.Duration(h.LinkTTL)
	maxTTL := time.Duration(h.MaxLinkTTL)
	secs, ok, bad := a.integer("expires_in", fmt.Sprintf("a number of seconds (at most %s, the server's max_link_ttl)", humanDuration(maxTTL)), 1, int64(maxTTL.Seconds()))
	if bad != nil {
		return bad.result(), nil
	}
	if ok {
		ttl = time.Duration(secs) * time.Second
	}
	path = cleanPath(path)
	info, err := h.box.Stat(ctx, path)
	dir := errors.Is(err, sandbox.ErrIsDir)
	if err != nil && !dir {
		if errors.Is(err, sandbox.ErrImageMissing) {
			return mcp.NewToolResultError(h.imageMissing(h.docker, h.host)), nil
		}
		if !errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrNotRegular) {
			h.logger.Warn("share_file: stat failed", zap.String("path", path), zap.Error(err))
		}
		return mcp.NewToolResultError(statErrorText(path, err)), nil
	}
	link, expires := h.links.signFor(path, time.Now(), ttl)
	h.recordLink(ctx, link, path, expires)
	out := shareOutput{
		URL:       callFrom(ctx).origin + link,
		Path:      path,
		Name:      info.Name,
		Size:      info.Size,
		ExpiresAt: expires.UTC(),
	}
	what := humanSize(out.Size)
	if dir {
		out.Name, out.Size, out.Directory = sandbox.ZipName(path), 0, true
		what = "a zip of the directory, made when downloaded"
	}
	metricShares.Inc()
	return mcp.NewToolResultStructured(out, fmt.Sprintf("Download link for %s (%s), valid until %s:\n%s",
		out.Name, what, out.ExpiresAt.Format(time.RFC3339), out.URL)), nil
}

func statErrorText(path string, err error) string {
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return fmt.Sprintf("%s does not exist in the sandbox; check the path with ls", path)
	case errors.Is(err, sandbox.ErrIsDir):
		return fmt.Sprintf("%s is a directory; pack it first, e.g. tar czf /sandbox/out.tgz -C %s . and share the archive", path, path)
	case errors.Is(err, sandbox.ErrNotRegular):
		return fmt.Sprintf("%s is not a regular file (a device, a FIFO, or a symbolic link that leads nowhere); check it with ls -l", path)
	}
	return fmt.Sprintf("could not read %s; the sandbox may be restarting, try again in a moment", path)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

func humanDuration(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
