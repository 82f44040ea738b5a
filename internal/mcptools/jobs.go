package mcptools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

// defaultPollWaitOff is job_output's default wait when yield_after is off.
const defaultPollWaitOff = 60 * time.Second

// jobListOutput is the structured result of job_list.
type jobListOutput struct {
	Jobs []jobEntry `json:"jobs"`
}

// jobStates lists the states a job can be in, and what may have killed it.
func jobStates(s *jsonschema.Schema) {
	s.Properties["jobs"].Items.Properties["state"].Enum = []any{"running", "done", "lost"}
	s.Properties["jobs"].Items.Properties["killed_by"].Enum = []any{boxapi.KilledByTimeout, boxapi.KilledByJobKill, boxapi.KilledByClient}
}

type jobEntry struct {
	JobID       string    `json:"job_id"`
	State       string    `json:"state" jsonschema:"lost: the job was killed with its runner, or the sandbox restarted, while it ran."`
	ExitCode    *int      `json:"exit_code"`
	StartedAt   time.Time `json:"started_at"`
	Interactive bool      `json:"interactive"`
	KilledBy    string    `json:"killed_by,omitempty" jsonschema:"What killed it: timeout, job_kill, or client (the call that waited for it was cancelled)."`
	Command     string    `json:"command" jsonschema:"Start of the command's first line (at most 200 bytes, ending in … when cut)."`
}

// pollWait is the default wait of job_output and job_input: yield_after, or a minute
// when it is off.
func (s *Tools) pollWait() time.Duration {
	if y := s.opts.Yield; y > 0 {
		return y
	}
	return defaultPollWaitOff
}

// jobRef is the job_id of the job tools.
type jobRef struct {
	JobID string `json:"job_id" arg:"required,pattern=^j[0-9a-f]{12}$" needs:"the job_id from execute's result, like j6940a1f03f2a (job_list shows the jobs)"`
}

func (r jobRef) jobID() string { return r.JobID }

const jobIDDesc = "From execute's result or job_list."

// jobWaitAbout describes the wait of job_output and job_input.
func (s *Tools) jobWaitAbout(what string) about {
	if y := s.opts.Yield; y > 0 {
		return s.waitAbout(fmt.Sprintf("Seconds to wait %s, 0 to %d. Default %d.", what, int(y.Seconds()), int(y.Seconds())))
	}
	return s.waitAbout(fmt.Sprintf("Seconds to wait %s. Default %d.", what, int(defaultPollWaitOff.Seconds())))
}

// jobOutputArgs are job_output's arguments.
type jobOutputArgs struct {
	jobRef
	waitArg
}

func (s *Tools) jobOutputTool() toolDef[jobOutputArgs] {
	return define[jobOutputArgs](mcp.NewTool("job_output",
		mcp.WithDescription(`Get the new output of a job: a command that execute returned with running: true. Waits until the job ends or wait seconds pass (wait: 0 returns at once), then returns only the output not returned before (never repeated, never skipped), whether it still runs, and its exit code once it has ended. Call it again while running is true; between calls you can do other work. The whole output is also in the files named in the result. The result has execute's fields.`),
		title("Follow a running command"),
		hints(false, false, false, false), // not read-only: it marks the output as delivered
	), map[string]about{
		"job_id": {desc: jobIDDesc},
		"wait":   s.jobWaitAbout("for the job to end"),
	})
}

// jobInputArgs are job_input's arguments.
type jobInputArgs struct {
	jobRef
	Input string `json:"input" arg:"required" needs:"the text to write to the job's stdin, e.g. {\"job_id\": \"...\", \"input\": \"yes\"}"`
	waitArg
}

func (s *Tools) jobInputTool() toolDef[jobInputArgs] {
	return define[jobInputArgs](mcp.NewTool("job_input",
		mcp.WithDescription(fmt.Sprintf(`Write to the stdin of a job started with execute(..., interactive: true), e.g. an answer to a prompt, a line for a REPL or for `+"`read`"+`, then return its new output once it answers (or the job ends, or wait passes). A newline is added when input does not end with one. At most %d KiB per call; while the program has not read earlier input, more is refused. The result has execute's fields.`, boxapi.MaxInputBytes>>10)),
		title("Send input to a running command"),
		hints(false, true, false, false),
	), map[string]about{
		"job_id": {desc: jobIDDesc},
		"input":  {desc: "Text to write to the job's stdin, e.g. `yes` or `print(2+2)`."},
		"wait":   s.jobWaitAbout("for the job's answer"),
	})
}

// jobKillArgs are job_kill's arguments.
type jobKillArgs struct {
	jobRef
}

func (s *Tools) jobKillTool() toolDef[jobKillArgs] {
	return define[jobKillArgs](mcp.NewTool("job_kill",
		mcp.WithDescription(`Stop a job: kill its command and every process it started (not those detached with setsid: use kill), and return its last output and exit code (137), as execute's fields.`),
		title("Stop a running command"),
		hints(false, true, true, false),
	), map[string]about{"job_id": {desc: jobIDDesc}})
}

// noArgs are the arguments of a tool that takes none.
type noArgs struct{}

// jobListArgs are job_list's arguments.
type jobListArgs struct {
	Running bool `json:"running"`
}

func (s *Tools) jobListTool() toolDef[jobListArgs] {
	return define[jobListArgs](mcp.NewTool("job_list",
		mcp.WithDescription(fmt.Sprintf(`List jobs, oldest first: all running ones and the finished ones kept (the newest %d plus any finished in the last 10 minutes, none over a day), with exit codes. At most %d run at once.`, 20, s.opts.MaxJobs)),
		title("List running and recent commands"),
		outputSchema[jobListOutput](jobStates),
		hints(true, false, true, false),
	), map[string]about{
		"running": {desc: "Only jobs still running. Default false."},
	})
}

// pollWaitOf is the wait of job_output and job_input.
func (s *Tools) pollWaitOf(w waitArg) time.Duration {
	if w.Wait == nil {
		return s.pollWait()
	}
	return time.Duration(*w.Wait * float64(time.Second))
}

func (s *Tools) jobOutput(ctx context.Context, box Box, c call, in jobOutputArgs) (*mcp.CallToolResult, error) {
	return s.follow(ctx, box, c, in.JobID, s.pollWaitOf(in.waitArg), nil)
}

func (s *Tools) jobInput(ctx context.Context, box Box, c call, in jobInputArgs) (*mcp.CallToolResult, error) {
	input := in.Input
	if len(input) > boxapi.MaxInputBytes {
		return mcp.NewToolResultError(fmt.Sprintf("input is %d bytes; job_input takes at most %d KiB per call. Write large input to a file with execute and have the program read it.", len(input), boxapi.MaxInputBytes>>10)), nil
	}
	if !strings.HasSuffix(input, "\n") {
		input += "\n"
	}
	return s.follow(ctx, box, c, in.JobID, s.pollWaitOf(in.waitArg), &input)
}

// follow is job_output and job_input: one delivery of a job's new output, with
// progress keep-alive while it waits.
func (s *Tools) follow(ctx context.Context, box Box, c call, id string, wait time.Duration, input *string) (*mcp.CallToolResult, error) {
	prog := startProgress(ctx, c.progress, time.Duration(s.opts.Keepalive))
	y := s.yielderFor(ctx, c)
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if y != nil {
		go func() {
			select {
			case <-y.fire: // a question ends a 2026-07-28 call: the job goes on
				cancel()
			case <-jctx.Done():
			}
		}()
	}
	untrack := s.calls.track(ctx, id, "", y) // a call that waits for the job carries its questions too
	res, err := box.JobOutput(jctx, id, wait, input, s.defaultOutput(), prog.onOutput())
	untrack()
	prog.stop()
	if q := y.question(); q != nil {
		if res == nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
			return s.inputRequired(q), nil // a 2026-07-28 client answers and retries
		}
		s.dropQuestion(y)
	}
	if err != nil && res == nil {
		return jobError(box, err, id, c.tool), nil
	}
	out := toOutput(res)
	out.Note = s.note(out, res, 0, input != nil) + blockedNote(box, res.JobID)
	if input != nil && err == nil && !res.Running {
		out.Note += "\n[the input was sent; the program then ended]"
	}
	if res.InputWaiting {
		what := "all of its last input"
		if input != nil {
			what = "all of this input"
		}
		out.Note += fmt.Sprintf("\n[the program has not read %s yet: the rest goes to it as it reads, and job_input takes no more input until then; call job_output to follow it, job_kill to stop it]", what)
	}
	text := outputText(out)
	if err != nil { // input for a job that has ended: say so, and lose none of its output
		r := mcp.NewToolResultStructured(out, fmt.Sprintf("The input was not sent: job %s has already ended. Its last output:\n%s", id, text))
		r.IsError = true
		return r, nil
	}
	return mcp.NewToolResultStructured(out, text), nil
}

func (s *Tools) jobKill(ctx context.Context, box Box, c call, in jobKillArgs) (*mcp.CallToolResult, error) {
	id := in.JobID
	res, err := box.KillJob(ctx, id, s.defaultOutput())
	if err != nil {
		return jobError(box, err, id, c.tool), nil
	}
	ident := CallerFrom(ctx)
	s.opts.Logger.Info("job_kill", zap.String("client", ident.ClientName), zap.String("person", ident.Person),
		zap.String("container", ident.Container), zap.String("job", id), zap.Int("exit_code", res.ExitCode))
	out := toOutput(res)
	out.Note = s.note(out, res, 0, false) + blockedNote(box, res.JobID)
	if !res.Killed && !res.Running {
		out.Note += "\n[the job had already ended; nothing was killed]"
	}
	return mcp.NewToolResultStructured(out, outputText(out)), nil
}

func (s *Tools) jobList(ctx context.Context, box Box, _ call, in jobListArgs) (*mcp.CallToolResult, error) {
	jobs, err := box.ListJobs(ctx)
	if err != nil {
		return mcp.NewToolResultError(execErrorText(box, err)), nil
	}
	out := jobListOutput{Jobs: []jobEntry{}}
	var b strings.Builder
	for _, j := range jobs {
		if in.Running && j.State != "running" {
			continue
		}
		e := jobEntry{JobID: j.ID, State: j.State, StartedAt: j.Started, Interactive: j.Interactive, KilledBy: j.KilledBy, Command: j.Command}
		if j.State == "done" {
			code := j.ExitCode
			e.ExitCode = &code
		}
		out.Jobs = append(out.Jobs, e)
		state := j.State
		if e.ExitCode != nil {
			state = exitText(*e.ExitCode)
			if why := killedText[j.KilledBy]; why != "" {
				state = fmt.Sprintf("exit code %d: %s", *e.ExitCode, why)
			}
		}
		fmt.Fprintf(&b, "%s  %s  started %s  %s\n", j.ID, state, j.Started.Format(time.RFC3339), j.Command)
	}
	switch {
	case len(out.Jobs) == 0 && in.Running:
		b.WriteString("No job is running.")
	case len(out.Jobs) == 0:
		b.WriteString("No jobs.")
	}
	return mcp.NewToolResultStructured(out, strings.TrimRight(b.String(), "\n")), nil
}

// killedText says what killed a job, by JobInfo.KilledBy.
var killedText = map[string]string{
	boxapi.KilledByTimeout: "timed out",
	boxapi.KilledByJobKill: "killed by job_kill",
	boxapi.KilledByClient:  "cancelled by the client",
}

// jobError turns a job function's error into a tool result that says what to do.
func jobError(box Box, err error, id, tool string) *mcp.CallToolResult {
	switch {
	case errors.Is(err, boxapi.ErrJobNotFound):
		return mcp.NewToolResultError(fmt.Sprintf("There is no job %s in the sandbox: finished jobs are forgotten after a day or when 20 newer ones have finished, and a recreated sandbox starts with none. Call job_list to see the jobs.", id))
	case errors.Is(err, boxapi.ErrJobNotInteractive):
		return mcp.NewToolResultError(fmt.Sprintf("Job %s was not started with interactive: true, so its stdin is closed and takes no input. Stop it with job_kill if it waits for input, and start it again with execute(..., interactive: true).", id))
	case errors.Is(err, boxapi.ErrInputWaiting):
		return mcp.NewToolResultError(fmt.Sprintf("The input was not sent: the program of job %s has not read its input yet (the rest of what job_input sent before). Call job_output to see what it does and send more once it has read; if it hangs, stop it with job_kill.", id))
	case errors.Is(err, context.Canceled):
		return mcp.NewToolResultError(tool + " was cancelled; the job itself goes on")
	}
	return mcp.NewToolResultError(execErrorText(box, err))
}
