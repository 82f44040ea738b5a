package mcptools

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"go.uber.org/zap"
)

// ExecuteOutput is the structured result of execute and of the job tools. Only execute
// declares it as its output schema; the job tools' descriptions point there, so that
// tools/list carries it once.
type ExecuteOutput struct {
	Stdout          string  `json:"stdout" jsonschema:"Output not returned before; when cut, a marker in the middle says how to read the rest."`
	Stderr          string  `json:"stderr"`
	ExitCode        *int    `json:"exit_code" jsonschema:"Null while running; 128+n: ended by signal n."`
	Running         bool    `json:"running" jsonschema:"Still running as job job_id; follow it with job_output."`
	JobID           string  `json:"job_id"`
	TimedOut        bool    `json:"timed_out"`
	Cancelled       bool    `json:"cancelled"`
	Killed          bool    `json:"killed" jsonschema:"By job_kill, the timeout or a cancelled call."`
	StdoutBytes     int64   `json:"stdout_bytes" jsonschema:"Written so far, in total."`
	StderrBytes     int64   `json:"stderr_bytes"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
	StdoutFile      string  `json:"stdout_file" jsonschema:"Holds the whole stdout."`
	StderrFile      string  `json:"stderr_file"`
	DurationSeconds float64 `json:"duration_seconds" jsonschema:"How long the command has run."`
	BackgroundJobID string  `json:"background_job_id,omitempty"`
	// Note is the footer of the text. Some clients give the model only
	// structuredContent, so it must carry this too.
	Note string `json:"note" jsonschema:"How it ended, what was cut, what to do next."`
}

// shareOutput is the structured result of share_file.
type shareOutput struct {
	URL       string    `json:"url" jsonschema:"Public download link, valid until expires_at."`
	Path      string    `json:"path" jsonschema:"The path shared, cleaned (no . or .. segments)."`
	Name      string    `json:"name" jsonschema:"The download's file name; <directory>.zip for a directory."`
	Size      int64     `json:"size" jsonschema:"Bytes; 0 for a directory."`
	ExpiresAt time.Time `json:"expires_at"`
	Directory bool      `json:"directory,omitempty" jsonschema:"The link serves a zip of a directory."`
}

// idleStopText says what an idle stop keeps and what it ends; ephemeral: the stop
// loses what is outside /sandbox too (Options.Ephemeral); keep: it keeps the running
// processes (Options.KeepProcesses).
func idleStopText(d time.Duration, ephemeral, keep bool) string {
	switch {
	case keep:
		return "After " + human.Duration(d) + " without calls, previews, transfers or job output the sandbox stops: files stay, and running processes and jobs are saved with their memory; the next call starts it again and they go on where they were (connections to outside the sandbox end)."
	case ephemeral:
		return "After " + human.Duration(d) + " without calls, previews, transfers or job output the sandbox stops: files under /sandbox stay; processes, jobs and everything outside /sandbox (installed packages) are gone; the next call starts it again from the image."
	}
	return "After " + human.Duration(d) + " without calls, previews, transfers or job output the sandbox stops: files stay, processes and jobs end; the next call starts it again."
}

// executeArgs are execute's arguments. A timeout, like a wait, is at most a day.
type executeArgs struct {
	Command string   `json:"command" arg:"required,nonblank" needs:"a non-empty bash command line, e.g. {\"command\": \"ls -la\"}"`
	Timeout *float64 `json:"timeout" arg:"min=1,max=86400" unit:"a number of seconds"`
	waitArg
	Interactive bool   `json:"interactive"`
	TTY         bool   `json:"tty"`
	Cwd         string `json:"cwd"`
	MaxOutput   *int   `json:"max_output" unit:"a number of bytes"` // from boxapi.MinOutput to the server's max_output
}

func (s *Tools) executeTool() toolDef[executeArgs] {
	cfg := s.opts.Config
	ttl := "."
	if cfg.FileTTL > 0 {
		ttl = "; a top-level entry of /sandbox is deleted after " + human.Duration(cfg.FileTTL) + " without changes inside it."
	}
	if s.opts.IdleStop > 0 {
		ttl += "\n- " + idleStopText(s.opts.IdleStop, s.opts.Ephemeral, s.opts.KeepProcesses)
	}
	yield := s.opts.Yield
	waitLine := fmt.Sprintf("- A call returns when the command ends or after `wait` seconds (default and at most %d).", int(yield.Seconds()))
	if yield == 0 {
		waitLine = "- A call waits for the command to end, or for `wait` seconds when given."
	}
	ports := "\n- The user cannot open ports in the sandbox (no previews here; localhost is their own machine): test servers with curl here; hand over images, PDFs or a zip with share_file (a shared HTML page downloads and reaches no server)."
	if s.opts.Previews != nil {
		ports = "\n- To let the user open a server running here, use expose_port."
	}
	more := ""
	if s.defaultOutput() < cfg.MaxOutput {
		more = " unless max_output asks for more"
	}
	desc := fmt.Sprintf(`Run a bash command as root (no sudo needed) in a persistent Linux sandbox; returns stdout, stderr and the exit code.
- Each call is a fresh `+"`bash -c`"+` in /sandbox (or cwd) with empty stdin: cd and exports do not carry over.
- Files under /sandbox persist across calls and restarts%s
%s A command still running then goes on as a job (`+"`running: true`"+`, `+"`job_id`"+`): follow it with job_output, answer prompts with job_input, stop it with job_kill. `+"`wait: 0`"+` returns at once (servers, long builds).
- The timeout (default %s) kills the command and its children (exit code 137). Detach what must outlive it: `+"`setsid nohup cmd > /sandbox/cmd.log 2>&1 &`"+`.
- Each stream returns at most %d bytes (head and tail)%s; the whole output stays in the file the result names (latest 20 commands, at least 10 minutes): read it with grep, sed -n or tail.
- Output goes to files, not a terminal (unless tty), so programs may buffer it: Python runs with PYTHONUNBUFFERED=1; else use `+"`stdbuf -oL cmd`"+`.
- Begin with `+"`set -o pipefail;`"+` when a failure inside `+"`cmd | tail`"+` matters.
- To hand the user a file, write it under /sandbox and call share_file.%s`,
		ttl, waitLine, human.Duration(cfg.ExecTimeout), s.defaultOutput(), more, ports)
	waitDesc := fmt.Sprintf("Seconds before a running command is returned as a job, 0 to %d. Default %d.", int(yield.Seconds()), int(yield.Seconds()))
	if yield == 0 {
		waitDesc = "Seconds before a running command is returned as a job. Default: until it ends."
	}
	return define[executeArgs](mcp.NewTool("execute",
		mcp.WithDescription(desc),
		title("Run a command in the sandbox"),
		outputSchema[ExecuteOutput](),
		hints(false, true, false, true),
		mcp.WithTaskSupport(mcp.TaskSupportOptional),
	), map[string]about{
		"command":     {desc: "The bash command line, e.g. `python3 script.py`."},
		"timeout":     {desc: fmt.Sprintf("Seconds before the command is killed (also as a job). Default %d.", int(cfg.ExecTimeout.Seconds()))},
		"wait":        s.waitAbout(waitDesc),
		"interactive": {desc: "Keep stdin open for job_input (prompts, `read`). Default false: stdin is empty. `read -p` prompts show only with tty."},
		"tty":         {desc: "Use a pseudo-terminal (REPLs, isatty checks); implies interactive; stderr joins stdout."},
		"cwd":         {desc: pathDesc("Directory to start in (default /sandbox)", "app")},
		"max_output": {desc: fmt.Sprintf("Bytes of each stream to return, at most %d. Default %d.", cfg.MaxOutput, s.defaultOutput()),
			min: bound(boxapi.MinOutput), max: bound(cfg.MaxOutput)},
	})
}

// defaultOutput is default_output: the bytes of each stream a call returns unless it
// asks for more.
func (s *Tools) defaultOutput() int {
	if s.opts.DefaultOutput > 0 {
		return min(s.opts.DefaultOutput, s.opts.Config.MaxOutput)
	}
	return s.opts.Config.MaxOutput
}

// shareFileArgs are share_file's arguments.
type shareFileArgs struct {
	Path      string `json:"path" arg:"required,minLength=1" needs:"the path of a file or directory, such as report.pdf or /sandbox/report.pdf"`
	ExpiresIn *int64 `json:"expires_in" arg:"min=1"` // at most max_link_ttl
}

func (s *Tools) shareFileTool() toolDef[shareFileArgs] {
	ttl, maxTTL := time.Duration(s.opts.LinkTTL), time.Duration(s.opts.MaxLinkTTL)
	return define[shareFileArgs](mcp.NewTool("share_file",
		mcp.WithDescription(fmt.Sprintf(`Make a download link for a file or directory in the sandbox, to give to the user. It works without signing in and expires after %s (expires_in: up to %s). Images, PDFs, audio and video open in the browser; anything else downloads, HTML too: a page is a file, not a site, and reaches no server, so share only self-contained pages (scripts, styles, data inline). A directory downloads as <name>.zip. The link serves the file as it is when downloaded: keep it in place until the user has it.%s`,
			human.Duration(ttl), human.Duration(maxTTL), s.shareAppText())),
		title("Share a sandbox file as a download link"),
		outputSchema[shareOutput](),
		hints(true, false, false, false),
	), map[string]about{
		"path": {desc: pathDesc("The file or directory", "report.pdf")},
		"expires_in": {desc: fmt.Sprintf("Seconds the link stays valid. Default %d (%s), at most %d (%s).",
			int64(ttl.Seconds()), human.Duration(ttl), int64(maxTTL.Seconds()), human.Duration(maxTTL)),
			max: bound(maxTTL.Seconds()), unit: fmt.Sprintf("a number of seconds (at most %s, the server's max_link_ttl)", human.Duration(maxTTL))},
	})
}

// shareAppText is the end of share_file's description: how to show a running web
// app, which a shared file cannot.
func (s *Tools) shareAppText() string {
	if s.opts.Previews != nil {
		return " For a web app that needs its server, use expose_port."
	}
	return " A web app that needs its server cannot be shown (no previews here)."
}

// execute runs one command and reports its output live as progress notifications.
func (s *Tools) execute(ctx context.Context, box Box, c call, in executeArgs) (*mcp.CallToolResult, error) {
	cfg := s.opts.Config
	timeout := cfg.ExecTimeout
	if in.Timeout != nil {
		timeout = time.Duration(*in.Timeout * float64(time.Second))
	}
	opts := boxapi.ExecOptions{Timeout: timeout, MaxJobs: s.opts.MaxJobs, Interactive: in.Interactive, TTY: in.TTY}
	opts.Wait = s.execWait(in.Wait)
	if c.task {
		// As an MCP task the call itself is the long wait (the client polls tasks/get),
		// and it outlives the request that created it.
		if in.Wait == nil {
			opts.Wait = 0
		}
		var cancel context.CancelFunc
		ctx, cancel = taskContext(ctx)
		defer cancel()
	}
	if in.Cwd != "" {
		opts.Cwd = inSandbox(in.Cwd)
	}
	opts.MaxOutput = s.defaultOutput()
	if in.MaxOutput != nil {
		opts.MaxOutput = *in.MaxOutput
	}
	command := in.Command

	var untrack []func()
	defer func() {
		for _, f := range untrack {
			f()
		}
	}()
	y := s.yielderFor(ctx, c)
	if y != nil {
		opts.Yield = y.fire
	}
	opts.OnStart = func(job string) { untrack = append(untrack, s.calls.track(ctx, job, command, y)) }
	prog := startProgress(ctx, c.progress, time.Duration(s.opts.Keepalive))
	opts.OnOutput = prog.onOutput()
	metricRunning.Inc()
	res, err := box.Exec(ctx, command, opts)
	metricRunning.Dec()
	prog.stop()
	if q := y.question(); q != nil {
		if err == nil && res.Running && res.Stdout == "" && res.Stderr == "" {
			return s.inputRequired(q), nil // a 2026-07-28 client answers and retries
		}
		s.dropQuestion(y)
	}

	id := CallerFrom(ctx)
	fields := []zap.Field{
		zap.String("client", id.ClientName), zap.String("client_id", id.ClientID), zap.String("auth", id.Method),
		zap.String("person", id.Person), zap.String("container", id.Container), zap.String("command", human.Clip(command, 200)),
	}
	if err != nil {
		switch {
		case errors.Is(err, boxapi.ErrNoCwd):
			return mcp.NewToolResultError(fmt.Sprintf("cwd %q is not a directory in the sandbox; create it first (mkdir -p) or leave cwd out to start in /sandbox", opts.Cwd)), nil
		case errors.Is(err, boxapi.ErrNoTTY):
			return mcp.NewToolResultError("The command was not started: " + err.Error() + "."), nil
		case errors.Is(err, boxapi.ErrTooManyJobs):
			return mcp.NewToolResultError(fmt.Sprintf("The command was not started: %v, and the limit (max_jobs) is %d. Call job_list to see them, wait for one to finish with job_output, or stop one with job_kill.", err, s.opts.MaxJobs)), nil
		}
		metricExecutions.WithLabelValues("error").Inc()
		s.opts.Logger.Error("execute failed", append(fields, zap.Error(err))...)
		return mcp.NewToolResultError(execErrorText(box, err)), nil
	}
	outcome := "ok"
	switch {
	case res.Running:
		outcome = "running"
	case res.TimedOut:
		outcome = "timeout"
	case res.Cancelled:
		outcome = "cancelled"
	case res.ExitCode != 0:
		outcome = "nonzero"
	}
	// A command that ended well but was refused hosts (by the operator's rules, the
	// person's answer, or for want of anyone to ask) is counted as refused.
	blocked := blockedNote(box, res.JobID)
	if outcome == "ok" && blocked != "" {
		outcome = "refused"
	}
	metricExecutions.WithLabelValues(outcome).Inc()
	metricDuration.Observe(res.Duration.Seconds())
	s.opts.Logger.Info("execute", append(fields, zap.String("job", res.JobID), zap.Int("exit_code", res.ExitCode), zap.String("outcome", outcome),
		zap.Duration("duration", res.Duration), zap.Int64("stdout_bytes", res.StdoutBytes), zap.Int64("stderr_bytes", res.StderrBytes))...)
	out := toOutput(res)
	out.Note = s.note(out, res, timeout, opts.Interactive || opts.TTY) + blocked + offlineNote(box, s.opts.Config.NetworkMode, command, res) + promptNote(opts, res) + stopNote(box)
	return mcp.NewToolResultStructured(out, outputText(out)), nil
}

// stopNote is the line a result gets when the sandbox's last stop or start lost
// processes that were to be kept (the text is the plugin's own, with the engine's error).
func stopNote(box Box) string {
	if n := box.TakeNote(); n != "" {
		return "\n[" + n + "]"
	}
	return ""
}

// waitArg is the wait of execute and of the job tools: seconds, at most yield_after
// when it is on (the schema says so: no call waits longer), else at most a day.
type waitArg struct {
	Wait *float64 `json:"wait" arg:"min=0,max=86400" unit:"a number of seconds"`
}

// waitAbout describes a wait argument; with yield_after on, it is its maximum, and
// errors say how to wait longer.
func (s *Tools) waitAbout(desc string) about {
	a := about{desc: desc}
	if y := s.opts.Yield; y > 0 {
		a.max = bound(y.Seconds())
		a.must = fmt.Sprintf("a number of seconds from 0 to %s (the server's yield_after: no call waits longer; for longer, call job_output again)", fmtNum(y.Seconds()))
	}
	return a
}

// execWait is execute's wait. Absent, it is yield_after.
func (s *Tools) execWait(secs *float64) time.Duration {
	switch {
	case secs == nil:
		return s.opts.Yield // 0 (off) waits for the end
	case *secs == 0:
		return boxapi.NoWait
	}
	return time.Duration(*secs * float64(time.Second))
}

func toOutput(res *boxapi.ExecResult) ExecuteOutput {
	out := ExecuteOutput{
		Stdout: res.Stdout, Stderr: res.Stderr, Running: res.Running, JobID: res.JobID,
		TimedOut: res.TimedOut, Cancelled: res.Cancelled,
		// Killed by anything: job_kill, the timeout or a cancelled call (its exit code
		// then tells the signal); a command that never started was not.
		Killed:      res.Killed || (res.TimedOut || res.Cancelled) && !res.Running && res.ExitCode >= 0,
		StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes,
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		StdoutFile: res.StdoutFile, StderrFile: res.StderrFile,
		// The job's own running time: a poll of a job that ended long ago took
		// milliseconds, which is not how long the command ran.
		DurationSeconds: math.Round(ran(res).Seconds()*1000) / 1000,
		BackgroundJobID: res.Background,
	}
	if !res.Running && res.ExitCode >= 0 {
		code := res.ExitCode
		out.ExitCode = &code
	}
	return out
}

// signalNames names the signals a model is likely to meet.
var signalNames = map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}

// exitText says what an exit code means, naming the signal for 129 to 192 (128+n).
func exitText(code int) string {
	if code > 128 && code <= 128+64 {
		n := code - 128
		if name := signalNames[n]; name != "" {
			return fmt.Sprintf("exit code %d: killed by signal %d, %s", code, n, name)
		}
		return fmt.Sprintf("exit code %d: killed by signal %d", code, n)
	}
	return fmt.Sprintf("exit code %d", code)
}

// outputText is a result as text, for clients that do not read structuredContent, with
// a footer saying how the command ended, whether output was cut, or how to follow it.
func outputText(o ExecuteOutput) string {
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
	b.WriteString(o.Note)
	return b.String()
}

// note is the footer of a result: how the command ended, whether output was cut, or how
// to follow it.
func (s *Tools) note(o ExecuteOutput, res *boxapi.ExecResult, timeout time.Duration, interactive bool) string {
	var b strings.Builder
	b.WriteByte('[')
	switch {
	case o.Running:
		fmt.Fprintf(&b, "still running as job %s for %s", o.JobID, elapsed(ran(res), false))
		if ran(res)-res.Duration >= time.Second {
			fmt.Fprintf(&b, " (this call waited %s)", elapsed(res.Duration, false))
		}
		fmt.Fprintf(&b, "; call job_output with job_id %q for its further output (it waits up to %s)", o.JobID, human.Duration(s.pollWait()))
		if interactive {
			b.WriteString(", job_input to write to its stdin")
		}
		b.WriteString(", job_kill to stop it")
	case res.Lost:
		b.WriteString("the job was lost: it was killed with its runner (say, by kill -9 -1) or the sandbox restarted while it ran, so it has no exit code; ")
		if o.Stdout == "" && o.Stderr == "" {
			b.WriteString("no output was captured")
		} else {
			b.WriteString("its output so far is above")
		}
	case o.TimedOut:
		fmt.Fprintf(&b, "timed out after %s: the command and its child processes were killed (%s); pass a larger timeout for longer work", human.Duration(timeout), exitText(res.ExitCode))
	case o.Cancelled:
		b.WriteString("cancelled by the client: the command and its child processes were killed")
		if res.ExitCode >= 0 {
			fmt.Fprintf(&b, " (%s)", exitText(res.ExitCode))
		}
	case o.Killed:
		fmt.Fprintf(&b, "killed by job_kill (%s)", exitText(res.ExitCode))
	default:
		fmt.Fprintf(&b, "%s, ran %s", exitText(res.ExitCode), elapsed(ran(res), true))
	}
	if o.StdoutTruncated || o.StderrTruncated {
		b.WriteString("; output was cut, the whole output is in ")
		switch {
		case o.StdoutTruncated && o.StderrTruncated:
			b.WriteString(o.StdoutFile + " and " + o.StderrFile)
		case o.StdoutTruncated:
			b.WriteString(o.StdoutFile)
		default:
			b.WriteString(o.StderrFile)
		}
	}
	b.WriteByte(']')
	if res.HeldBy != "" && !o.Running {
		fmt.Fprintf(&b, "\n[note: a background process (pid %s) still holds the command's output open; it is killed at the timeout, or now by job_kill with job_id %q. Detach background work instead: setsid nohup cmd > /sandbox/cmd.log 2>&1 &]", res.HeldBy, o.JobID)
	}
	if res.Background != "" && !o.Running {
		what := ""
		if res.BackgroundCommand != "" {
			what = " (" + human.Clip(res.BackgroundCommand, 60) + ")"
		}
		fmt.Fprintf(&b, "\n[note: pid %s%s runs on in the background as job %s; its output: job_output with job_id %q; stop it: job_kill]", res.BackgroundPid, what, res.Background, res.Background)
	}
	return b.String()
}

// promptNote is the line a result gets when an interactive command without a terminal
// runs on having printed nothing: it may wait for input behind a prompt that was never
// shown (bash's read -p, and programs that check isatty, print none without one).
func promptNote(opts boxapi.ExecOptions, res *boxapi.ExecResult) string {
	if !res.Running || !opts.Interactive || opts.TTY || res.StdoutBytes > 0 || res.StderrBytes > 0 {
		return ""
	}
	return "\n[note: no output yet; if it waits for input, its prompt may not show: read -p and programs that check for a terminal print none without tty: true. Send the answer with job_input, or start it again with tty: true to see the prompt]"
}

// engineText is what a tool says when the sandbox's engine did not answer: nothing
// the model did is wrong, and the same call may work a little later.
func engineText(box Box) string {
	return "Could not reach the sandbox (" + box.Unreachable() + " did not answer); try again in a few seconds."
}

// ran is how long the job of a result has run, or this call's time when the job's is
// unknown.
func ran(res *boxapi.ExecResult) time.Duration {
	if res.JobDuration > 0 {
		return res.JobDuration
	}
	return res.Duration
}

// elapsed shows a running time: to the second (to the hundredth under a minute when
// exact), as 1m35s or 2h0m5s past a minute.
func elapsed(d time.Duration, exact bool) string {
	r := d.Round(time.Second)
	switch {
	case d < time.Minute && exact:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case r < time.Minute:
		return fmt.Sprintf("%ds", r/time.Second)
	}
	return r.String()
}

func execErrorText(box Box, err error) string {
	if box.EngineDown(err) {
		return engineText(box)
	}
	if errors.Is(err, boxapi.ErrImageMissing) {
		return box.ImageMissing()
	}
	if errors.Is(err, boxapi.ErrRuntimeMissing) {
		return "The sandbox cannot start: " + err.Error() + ". That is for the server's operator to fix; tell the user."
	}
	if errors.Is(err, boxapi.ErrCommandLost) {
		return "The command did not finish: " + err.Error() + "."
	}
	if errors.Is(err, boxapi.ErrOldBash) {
		return "The sandbox cannot run commands: " + err.Error() + "."
	}
	return "The sandbox could not run the command: " + err.Error() + ". Try again; if it keeps failing, the server's container engine (Docker or Kubernetes) needs the operator's attention."
}

// shareFile makes a signed link for a file or directory in the container.
func (s *Tools) shareFile(ctx context.Context, box Box, _ call, in shareFileArgs) (*mcp.CallToolResult, error) {
	ttl := time.Duration(s.opts.LinkTTL)
	if in.ExpiresIn != nil {
		ttl = time.Duration(*in.ExpiresIn) * time.Second
	}
	path := boxapi.CleanPath(inSandbox(in.Path))
	info, err := box.Stat(ctx, path)
	dir := errors.Is(err, boxapi.ErrIsDir)
	if err != nil && !dir {
		if errors.Is(err, boxapi.ErrImageMissing) {
			return mcp.NewToolResultError(box.ImageMissing()), nil
		}
		if !errors.Is(err, boxapi.ErrNotFound) && !errors.Is(err, boxapi.ErrNotRegular) {
			s.opts.Logger.Warn("share_file: stat failed", zap.String("path", path), zap.Error(err))
		}
		return mcp.NewToolResultError(statErrorText(box, path, err)), nil
	}
	link, expires := s.opts.Links.Download(ctx, path, ttl)
	out := shareOutput{
		URL:       CallerFrom(ctx).Origin + link,
		Path:      path,
		Name:      info.Name,
		Size:      info.Size,
		ExpiresAt: expires.UTC(),
	}
	what := human.Size(out.Size)
	if dir {
		out.Name, out.Size, out.Directory = boxapi.ZipName(path), 0, true
		what = "a zip of the directory, made when downloaded"
	}
	metricShares.Inc()
	return mcp.NewToolResultStructured(out, fmt.Sprintf("Download link for %s (%s), valid until %s:\n%s",
		out.Name, what, out.ExpiresAt.Format(time.RFC3339), out.URL)), nil
}

func statErrorText(box Box, path string, err error) string {
	switch {
	case errors.Is(err, boxapi.ErrNotFound):
		return fmt.Sprintf("%s does not exist in the sandbox; check the path with ls", path)
	case errors.Is(err, boxapi.ErrIsDir):
		return fmt.Sprintf("%s is a directory; pack it first, e.g. tar czf /sandbox/out.tgz -C %s . and share the archive", path, path)
	case errors.Is(err, boxapi.ErrNotRegular):
		return fmt.Sprintf("%s is not a regular file (a device, a FIFO, or a symbolic link that leads nowhere); check it with ls -l", path)
	case box.EngineDown(err):
		return engineText(box)
	}
	return fmt.Sprintf("could not read %s; the sandbox may be restarting, try again in a moment", path)
}
