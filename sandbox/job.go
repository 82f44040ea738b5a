package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"go.uber.org/zap"
)

// jobScript runs, follows, feeds, kills and lists jobs inside the container; see the
// comment at its top for the files a job keeps.
//
//go:embed jobs.sh
var jobScriptFile string

// jobScript is jobs.sh without its comment lines: bash parses the whole script on every
// exec, and the common path must cost little more than a bare exec.
var jobScript = stripComments(jobScriptFile)

// runnerEnv names the environment variable that carries the job runner into its exec.
// The exec's command line is only runnerBoot and the runner's arguments, so the
// runner's processes, which live as long as their jobs, show short lines in ps; the
// script takes the variable out of its environment before it starts anything.
const runnerEnv = "MCP_SANDBOX_RUNNER"

// runnerBoot is the runner's command line: bash evaluates the script from the
// environment. No file in the container is involved, so nothing the model changes
// there alters the runner.
const runnerBoot = `S=$` + runnerEnv + `; unset ` + runnerEnv + `; eval "$S"`

// runnerExec returns the command and environment that run the job runner with args.
func runnerExec(args []string, env []string) ([]string, []string) {
	cmd := append([]string{"bash", "-c", runnerBoot, "mcpjob"}, args...)
	return cmd, append(append(make([]string, 0, len(env)+1), env...), runnerEnv+"="+jobScript)
}

func stripComments(script string) string {
	var b strings.Builder
	for _, line := range strings.Split(script, "\n") {
		t := strings.TrimLeft(line, "\t ")
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// JobsDir is where jobs keep their command, output and status inside the container. It
// is outside the /sandbox volume: it survives Caddy restarts and container restarts,
// not a recreated container, and it does not show up in the model's working files.
const JobsDir = "/var/lib/mcp-sandbox/jobs"

// Retention of finished jobs, enforced inside the container (jobs.sh, prune): the
// newest 20 finished jobs, and any that finished in the last 10 minutes, as long as they
// are under a day old and their output files stay under 1 GB in total. A conversation
// comes back to a job's output within minutes or hours, rarely after dozens of other
// commands; the 10 minutes keep the file a result just named; the cap keeps a chatty
// session from filling the disk.

// DefaultMaxJobs bounds the jobs running at once when ExecOptions.MaxJobs is 0.
const DefaultMaxJobs = 32

// commandEnvLimit is the longest command passed in an environment variable; longer
// ones go through the exec's stdin (Linux refuses single strings over 128 KiB).
const commandEnvLimit = 96 << 10

// lineSlack is how far a cut may move to land on a line boundary.
const lineSlack = 4096

// errJobIDTaken: a job with the drawn id exists already; Exec draws another. The job
// functions' own errors are internal/boxapi's (ErrJobNotFound and its kin).
var errJobIDTaken = errors.New("job id in use")

// newJobID draws a job id; a variable so a test can draw the same one twice.
var newJobID = randomJobID

// randomJobID returns a job id that sorts by start time: j, the Unix time in 8 hex
// digits, then 4 random hex digits. Two calls in one second may draw the same id; the
// job runner refuses an id in use and Exec draws again.
func randomJobID() string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("j%08x%04x", uint32(time.Now().Unix()), binary.BigEndian.Uint16(b[:]))
}

// JobFile returns the path of a job's stdout or stderr file inside the container.
func JobFile(id string, st boxapi.Stream) string {
	if st == boxapi.Stderr {
		return JobsDir + "/" + id + ".err"
	}
	return JobsDir + "/" + id + ".out"
}

// jobLocks serialises the calls that deliver one job's output, so two polls never hand
// out the same bytes. Striped by id: jobs are few, collisions only cost waiting.
type jobLocks [64]sync.Mutex

func (l *jobLocks) lock(id string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	m := &l[h.Sum32()%uint32(len(l))]
	m.Lock()
	return m.Unlock
}

// header is the first line the job script prints; parseHeader reads it.
type header struct {
	state              string // done, running, lost, peek, or a refusal
	exit               int
	outSize, errSize   int64 // bytes in the files
	outFrom, errFrom   int64 // first byte of this delivery
	outSent, errSent   int64 // bytes sent
	outLines, errLines int64 // newlines in the new range when it was cut, else -1
	outLine, errLine   int64 // line the new range starts in (from 1) when it may be cut, else -1
	ranMs              int64 // how long the job has run or ran, in ms, or -1
	timedOut, killed   bool
	cancelled          bool   // killed because the call that waited for it was cancelled
	inputWaiting       bool   // the last input is not all read yet
	inputSent          bool   // all of this call's input went into the job's stdin
	held               string // pid of a process holding the output open
	bgJob, bgPid       string // the job that took over the processes left holding the output, and one of them
	bgCmd              string // that process's command line, sanitised
	extra              string // oldbash: the bash version
}

// scriptOutput collects what one job script prints: the header line and the payloads,
// each bounded (a script never sends more than asked, but a broken one must not make
// Caddy hold gigabytes).
type scriptOutput struct {
	limit  int
	line   []byte
	gotHdr bool
	out    []byte
	err    []byte
}

// stdout takes a chunk of the script's stdout: the header line (kept up to one byte
// past maxHeaderLine, so parseHeader refuses a longer one), then the payload.
func (o *scriptOutput) stdout(p []byte) {
	if !o.gotHdr {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			o.line = appendCapped(o.line, p, maxHeaderLine+1)
			return
		}
		o.line = appendCapped(o.line, p[:i], maxHeaderLine+1)
		o.gotHdr = true
		p = p[i+1:]
	}
	o.out = appendCapped(o.out, p, o.limit)
}

func (o *scriptOutput) stderr(p []byte) {
	o.err = appendCapped(o.err, p, o.limit)
}

// budget returns the bytes kept per stream and the head and tail the script sends.
func budget(maxOutput int) (keep, head, tail int) {
	slack := min(lineSlack, maxOutput/4)
	return maxOutput, maxOutput/2 + slack, maxOutput - maxOutput/2 + slack
}

// scriptRun is a started job script whose output is being read into out; done
// delivers how reading ended, and close closes the exec's connection.
type scriptRun struct {
	out   *scriptOutput
	done  chan error
	close func()
}

// jobStart is one job to start, stated once for both runners: the agent's native
// runner takes it as an agentwire.JobRequest (request), jobs.sh as the arguments and
// environment of its "run" mode (script).
type jobStart struct {
	dir, id          string
	timeout          time.Duration
	wait             time.Duration // 0: answer at once; waitToEnd: at the job's end
	interactive, tty bool
	agent            string // tty: the agent's binary, which holds the terminal
	cwd              string
	head, tail       int // bytes sent of each end of a longer output
	command          string
	env              []string // added to the command's environment
}

// waitToEnd as jobStart.wait waits for the job's end.
const waitToEnd = time.Duration(-1)

// onStdin reports whether the command is too long for the environment and goes on
// the runner's stdin instead.
func (j jobStart) onStdin() bool { return len(j.command) > commandEnvLimit }

// request is j for the agent, with the runner's stdin.
func (j jobStart) request() (agentwire.JobRequest, []byte) {
	r := agentwire.JobRequest{JobsDir: j.dir, ID: j.id, TimeoutMS: j.timeout.Round(time.Millisecond).Milliseconds(),
		WaitMS: j.wait.Round(time.Millisecond).Milliseconds(), Interactive: j.interactive, TTY: j.tty,
		Cwd: j.cwd, Head: int64(j.head), Tail: int64(j.tail), Env: j.env}
	if j.wait == waitToEnd {
		r.WaitMS = -1
	}
	if j.tty {
		r.Agent = j.agent
	}
	if j.onStdin() {
		r.CommandOnStdin = true
		return r, []byte(j.command)
	}
	r.Command = j.command
	return r, nil
}

// script is j for jobs.sh: the arguments and environment of "run", and its stdin.
func (j jobStart) script() (args, env []string, stdin []byte) {
	wait := "-1"
	if j.wait != waitToEnd {
		wait = secondsArg(j.wait)
	}
	if j.wait == 0 {
		wait = "0"
	}
	src := "env"
	if j.onStdin() {
		src, stdin = "stdin", []byte(j.command)
	} else {
		env = append(env, "MCP_SANDBOX_CMD="+j.command)
	}
	if j.tty {
		env = append(env, agentEnv+"="+j.agent)
	}
	env = append(env, j.env...)
	return []string{"run", j.dir, j.id, secondsArg(j.timeout), wait, flag01(j.interactive), flag01(j.tty),
		j.cwd, strconv.Itoa(j.head), strconv.Itoa(j.tail), src}, env, stdin
}

func flag01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// startJob starts job j, on the agent's native runner when the agent runs, else with
// jobs.sh, and reads the runner's answer, up to limit bytes a stream.
func (s *jobRunner) startJob(ctx context.Context, j jobStart, limit int) (*scriptRun, error) {
	if sess := s.sb.link.agentSession(ctx); sess != nil {
		req, stdin := j.request()
		if p, err := s.sb.link.agentStart(sess, req); err == nil {
			return s.readScript(p, stdin, limit), nil
		}
	}
	args, env, stdin := j.script()
	return s.execScript(ctx, args, env, stdin, limit)
}

// startScript starts the job script with args, env and optional stdin (written, then
// closed, in the background), and reads its output, up to limit bytes a stream.
func (s *jobRunner) startScript(ctx context.Context, args []string, env []string, stdin []byte, limit int) (*scriptRun, error) {
	if sess := s.sb.link.agentSession(ctx); sess != nil {
		if p, err := s.sb.link.agentRunner(sess, args, env, stdin != nil); err == nil {
			return s.readScript(p, stdin, limit), nil
		}
	}
	return s.execScript(ctx, args, env, stdin, limit)
}

// execScript runs the job script in an exec of its own. This is the one place that
// builds the job script's exec.
func (s *jobRunner) execScript(ctx context.Context, args []string, env []string, stdin []byte, limit int) (*scriptRun, error) {
	cmd, env := runnerExec(args, env)
	p, err := s.startExec(ctx, container.ExecOptions{
		User:         "root",
		WorkingDir:   "/",
		AttachStdin:  stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		Env:          env,
		Cmd:          cmd,
	})
	if err != nil {
		return nil, err
	}
	return s.readScript(p, stdin, limit), nil
}

// readScript writes the job script's stdin and reads its output.
func (s *jobRunner) readScript(p proc, stdin []byte, limit int) *scriptRun {
	if stdin != nil {
		go func() {
			_, _ = p.Write(stdin)
			_ = p.CloseWrite()
		}()
	}
	out := &scriptOutput{limit: limit}
	done := make(chan error, 1)
	go func() { done <- drain(p, out.stdout, out.stderr) }()
	return &scriptRun{out: out, done: done, close: func() { _ = p.Close() }}
}

// header parses the header of output read to its end. A script that printed none
// failed before it could answer; what it wrote to stderr says why.
func (o *scriptOutput) header() (header, error) {
	if !o.gotHdr {
		msg := strings.TrimSpace(string(o.err))
		if msg == "" {
			msg = "no answer"
		}
		return header{}, fmt.Errorf("the job runner failed in the sandbox: %s", human.Clip(msg, 500))
	}
	return parseHeader(o.line)
}

// runScript runs the job script with args, env and optional stdin, and returns its
// header and payloads. A failure to start or read is an error; the script's own
// refusals come back in the header.
func (s *jobRunner) runScript(ctx context.Context, args []string, env []string, stdin []byte, limit int) (header, *scriptOutput, error) {
	run, err := s.startScript(ctx, args, env, stdin, limit)
	if err != nil {
		return header{}, nil, err
	}
	defer run.close()
	select {
	case err = <-run.done:
	case <-ctx.Done():
		run.close()
		<-run.done
		return header{}, nil, ctx.Err()
	}
	if err != nil {
		return header{}, nil, fmt.Errorf("reading job runner output: %w", err)
	}
	h, err := run.out.header()
	if err != nil {
		return header{}, nil, err
	}
	return h, run.out, nil
}

// heldRunes keeps, per running job and stream, the first bytes of a character that the
// end of a delivery cut in two (at most 3), to be put in front of the next delivery:
// a character split across two polls shows whole in the second one. They live in
// memory only; after a restart the next delivery starts with the rest of the
// character, shown as U+FFFD.
//
// resend names the jobs whose last delivery reached nobody (it answered a cancelled
// call): their next JobOutput sends it again.
type heldRunes struct {
	mu     sync.Mutex
	m      map[string][2][]byte
	resend map[string]bool
}

// resendNext makes the next JobOutput of job id send its last delivery again.
func (s *jobRunner) resendNext(id string) {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	if s.held.resend == nil {
		s.held.resend = map[string]bool{}
	}
	if len(s.held.resend) >= maxHeld {
		for k := range s.held.resend {
			delete(s.held.resend, k)
			break
		}
	}
	s.held.resend[id] = true
}

// takeResend reports whether job id's last delivery is to be sent again, once.
func (s *jobRunner) takeResend(id string) bool {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	again := s.held.resend[id]
	delete(s.held.resend, id)
	return again
}

// maxHeld bounds the jobs with bytes held back.
const maxHeld = 1024

// result turns a delivery of job id into an ExecResult (see header.result), with the
// bytes held back from the job's previous delivery in front.
func (s *jobRunner) result(h header, id string, o *scriptOutput, maxOutput int) *boxapi.ExecResult {
	s.held.mu.Lock()
	prev := s.held.m[id]
	delete(s.held.m, id)
	s.held.mu.Unlock()
	res, next := h.result(id, o, maxOutput, prev)
	if next[0] != nil || next[1] != nil {
		s.held.mu.Lock()
		if s.held.m == nil {
			s.held.m = map[string][2][]byte{}
		}
		if len(s.held.m) >= maxHeld { // jobs nobody polls again: forget one
			for k := range s.held.m {
				delete(s.held.m, k)
				break
			}
		}
		s.held.m[id] = next
		s.held.mu.Unlock()
	}
	return res
}

// result turns a delivery into an ExecResult, cutting each stream to maxOutput bytes
// at line boundaries. held are bytes of each stream held back from the previous
// delivery; while the job runs, the bytes of a character cut at the end of this one
// are held back in turn and returned.
func (h header) result(id string, o *scriptOutput, maxOutput int, held [2][]byte) (*boxapi.ExecResult, [2][]byte) {
	keep, head, tail := budget(maxOutput)
	res := &boxapi.ExecResult{
		JobID:             id,
		Running:           h.state == "running",
		ExitCode:          h.exit,
		TimedOut:          h.timedOut,
		Killed:            h.killed,
		Cancelled:         h.cancelled,
		StdoutBytes:       h.outSize,
		StderrBytes:       h.errSize,
		StdoutFile:        JobFile(id, boxapi.Stdout),
		StderrFile:        JobFile(id, boxapi.Stderr),
		HeldBy:            h.held,
		Background:        h.bgJob,
		BackgroundPid:     h.bgPid,
		BackgroundCommand: h.bgCmd,
		Lost:              h.state == "lost",
	}
	if h.ranMs >= 0 {
		res.JobDuration = time.Duration(h.ranMs) * time.Millisecond
	}
	res.InputWaiting = res.Running && h.inputWaiting
	if res.Running {
		res.ExitCode = -1
	}
	var next [2][]byte
	res.Stdout, res.StdoutTruncated, next[0] = cutStream(o.out, held[0], h.outFrom, h.outSize-h.outFrom, h.outLines, h.outLine, res.Running, keep, head, tail, res.StdoutFile)
	res.Stderr, res.StderrTruncated, next[1] = cutStream(o.err, held[1], h.errFrom, h.errSize-h.errFrom, h.errLines, h.errLine, res.Running, keep, head, tail, res.StderrFile)
	return res, next
}

// cutStream is cutOutput for one stream of a delivery of total bytes from file offset
// from, with held (the bytes of a character cut at the end of the previous delivery)
// in front. While the job runs, the bytes of a character cut at the end are left out
// and returned, for the next delivery.
func cutStream(payload, held []byte, from, total, lines, first int64, running bool, keep, head, tail int, file string) (string, bool, []byte) {
	if len(held) > 0 {
		payload = append(held[:len(held):len(held)], payload...)
		total += int64(len(held))
		from -= int64(len(held))
		head += len(held)
		// The held bytes end the previous delivery's last line, which has no newline
		// before them: the range still starts in the same line.
	}
	var next []byte
	if running {
		if k := len(payload) - len(trimIncompleteEnd(payload)); k > 0 {
			next = bytes.Clone(payload[len(payload)-k:])
			payload = payload[:len(payload)-k]
			total -= int64(k)
		}
	}
	text, cut := cutOutput(payload, from, total, lines, first, keep, head, tail, file)
	return text, cut, next
}

// cutOutput returns the text of a range of total bytes from file offset from, of which
// payload holds either everything or (when shorter than total) the first head bytes
// and the last ones. Text longer than keep is cut in the middle at line boundaries (at
// character boundaries when lines are too long), and a marker says which lines (first:
// the number of the line the range starts in, -1 when unknown) and how many bytes were
// left out, and the call that reads them.
func cutOutput(payload []byte, from, total, lines, first int64, keep, head, tail int, file string) (string, bool) {
	if int64(len(payload)) >= total && len(payload) <= keep {
		return strings.ToValidUTF8(string(payload), "\uFFFD"), false
	}
	var h, t []byte
	if int64(len(payload)) >= total { // everything came; cut here
		h, t = payload, payload
		lines = int64(bytes.Count(payload, []byte{'\n'}))
	} else {
		h, t = payload[:min(head, len(payload))], payload[min(head, len(payload)):]
	}
	slack := min(lineSlack, keep/4)
	want := keep / 2
	// Head: end after the last newline before want, else after the first one past it.
	e := min(want, len(h))
	if i := bytes.LastIndexByte(h[max(0, e-slack):e], '\n'); i >= 0 {
		e = max(0, e-slack) + i + 1
	} else if i := bytes.IndexByte(h[e:min(len(h), e+slack)], '\n'); i >= 0 {
		e += i + 1
	} else {
		e = len(trimIncompleteEnd(h[:e]))
	}
	// Tail: start after the first newline past the start, else after the last one before it.
	s := max(0, len(t)-(keep-want))
	if i := bytes.IndexByte(t[s:min(len(t), s+slack)], '\n'); i >= 0 {
		s += i + 1
	} else if i := bytes.LastIndexByte(t[max(0, s-slack):s], '\n'); i >= 0 {
		s = max(0, s-slack) + i + 1
	} else {
		s = len(t) - len(trimIncompleteStart(t[s:]))
	}
	var omitted int64
	if len(payload) >= int(total) {
		if s <= e {
			return strings.ToValidUTF8(string(payload), "\uFFFD"), false
		}
		omitted = int64(s - e)
	} else {
		omitted = total - int64(e) - int64(len(t)-s)
	}
	headPart, tailPart := h[:e], t[s:]
	omittedLines := lines - int64(bytes.Count(headPart, []byte{'\n'})) - int64(bytes.Count(tailPart, []byte{'\n'}))
	var sb strings.Builder
	sb.Grow(len(headPart) + len(tailPart) + 160)
	sb.WriteString(strings.ToValidUTF8(string(headPart), "\uFFFD"))
	if len(headPart) > 0 && headPart[len(headPart)-1] != '\n' {
		sb.WriteByte('\n')
	}
	sb.WriteString(cutMarker(omitted, lines, omittedLines, first, from+int64(len(headPart)), headPart, s > 0 && t[s-1] == '\n', file))
	sb.WriteString(strings.ToValidUTF8(string(tailPart), "\uFFFD"))
	return sb.String(), true
}

// cutMarker is the line that stands for the middle left out of an output: omitted
// bytes from file offset at, holding omittedLines newlines, after headPart, of a range
// that starts in line first (-1: unknown) and holds lines newlines in all (-1: not
// counted). endsLine says the part left out ends with a newline. Whole lines are read
// with read_file, a page of them at a time; a part of one line (read_file would show
// the line from its start, and cut it) with a byte range.
func cutMarker(omitted, lines, omittedLines, first, at int64, headPart []byte, endsLine bool, file string) string {
	// Paging through megabytes a page at a time is hopeless: search first.
	search := ""
	if omitted >= searchFirst {
		search = "; that is a lot: search it first with execute, e.g. grep -n PATTERN " + file + " | head -50"
	}
	switch {
	case lines < 0:
		return fmt.Sprintf("[... %d bytes left out; the whole output is in %s%s ...]\n", omitted, file, search)
	case first < 1:
		return fmt.Sprintf("[... %d bytes (%s) left out; the whole output is in %s%s ...]\n", omitted, plural(omittedLines, "line"), file, search)
	}
	from := first + int64(bytes.Count(headPart, []byte{'\n'}))
	to := from + omittedLines
	if endsLine {
		to--
	}
	if to <= from && !(endsLine && (len(headPart) == 0 || headPart[len(headPart)-1] == '\n')) {
		return fmt.Sprintf("[... part of line %d left out (%d bytes); read them with execute: tail -c +%d %s | head -c %d ...]\n", from, omitted, at+1, file, omitted)
	}
	what := fmt.Sprintf("lines %d–%d", from, to)
	if to <= from {
		what = fmt.Sprintf("line %d", from)
	}
	return fmt.Sprintf("[... %s left out (%d bytes)%s; read them with read_file path=%s offset=%d limit=%d ...]\n", what, omitted, search, file, from, min(max(to-from+1, 1), markerPage))
}

// searchFirst is the size of a part left out from which the marker suggests grep
// before paging.
const searchFirst = 1 << 20

// markerPage is the most lines the cut marker's read_file call asks for: a page the
// model can take in, not the 100 KB a call without a limit may return.
const markerPage = 200

func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func secondsArg(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
}

// scriptError maps the script's refusals to errors.
func scriptError(h header, id string) error {
	switch h.state {
	case "done", "running", "lost":
		return nil
	case "unknown":
		return fmt.Errorf("%w: %s", boxapi.ErrJobNotFound, id)
	case "notinteractive":
		return fmt.Errorf("%w: %s", boxapi.ErrJobNotInteractive, id)
	case "nocwd":
		return boxapi.ErrNoCwd
	case "taken":
		return fmt.Errorf("%w: %s", errJobIDTaken, id)
	case "inputwaiting":
		return fmt.Errorf("%w: %s", boxapi.ErrInputWaiting, id)
	case "notty":
		return boxapi.ErrNoTTY
	case "oldbash":
		return oldBashError(h.extra)
	}
	return fmt.Errorf("%w: %s", errBadAnswer, h.state)
}

// oldBashError says which bash the image has and which it needs.
func oldBashError(version string) error {
	return fmt.Errorf("the sandbox image's bash is %s; %w (Debian 11+, Ubuntu 22.04+); the server's operator must configure an image with a newer bash", version, boxapi.ErrOldBash)
}

// lockJob checks that id is a job id and takes the job's lock, which the caller
// releases with unlock; it returns maxOutput clamped to Config.MaxOutput (0: that).
func (s *jobRunner) lockJob(id string, maxOutput int) (clamped int, unlock func(), err error) {
	if !boxapi.ValidJobID(id) {
		return 0, nil, fmt.Errorf("%w: %q is not a job id", boxapi.ErrJobNotFound, id)
	}
	if maxOutput <= 0 || maxOutput > s.cfg.MaxOutput {
		maxOutput = s.cfg.MaxOutput
	}
	return maxOutput, s.jobs.lock(id), nil
}

// JobOutput waits up to wait for job id to end, then returns the output produced since
// the last delivery (never repeated, never skipped), cut to maxOutput bytes per stream
// (0: Config.MaxOutput). With input != nil, it first writes input to the job's stdin
// (the job must have been started interactive) and waits only until the job answers.
// Input for a job that ended before all of it went into its stdin is an ErrJobFinished
// error, with the job's last output in the result; a job that ends after taking it
// (the input made it quit) is a result like any other.
// onOutput, when set, receives the new output while it waits, as ExecOptions.OnOutput.
func (s *Sandbox) JobOutput(ctx context.Context, id string, wait time.Duration, input *string, maxOutput int, onOutput func(boxapi.Stream, []byte)) (*boxapi.ExecResult, error) {
	return s.runner.jobOutput(ctx, id, wait, input, maxOutput, onOutput, false)
}

// jobOutput is JobOutput; with again, the last delivery did not arrive (its agent died
// before reading it) and is sent again.
func (s *jobRunner) jobOutput(ctx context.Context, id string, wait time.Duration, input *string, maxOutput int, onOutput func(boxapi.Stream, []byte), again bool) (*boxapi.ExecResult, error) {
	maxOutput, unlock, err := s.lockJob(id, maxOutput)
	if err != nil {
		return nil, err
	}
	defer unlock()
	again = s.takeResend(id) || again
	begin := time.Now()
	_, head, tail := budget(maxOutput)
	var env []string
	mode := "-"
	if input != nil {
		if strings.ContainsRune(*input, 0) {
			return nil, errors.New("input contains a NUL byte, which cannot be sent")
		}
		env = []string{"MCP_SANDBOX_INPUT=" + *input}
		mode = "env"
	}
	stopLive := func() {}
	if onOutput != nil && wait > liveInterval {
		stopLive = s.followLive(ctx, id, onOutput)
	}
	args := []string{"poll", JobsDir, id, strconv.Itoa(int((wait + time.Second - 1) / time.Second)),
		strconv.Itoa(head), strconv.Itoa(tail), mode}
	if again {
		args = append(args, "again")
	}
	h, o, err := s.runScript(ctx, args, env, nil, head+tail)
	stopLive()
	if err != nil {
		return nil, err
	}
	if err := scriptError(h, id); err != nil {
		return nil, err
	}
	res := s.result(h, id, o, maxOutput)
	res.Duration = time.Since(begin)
	s.jobSeen(id, res.Running)
	// Input the job took before it ended (say, the "quit" that ended it) was sent.
	if input != nil && !res.Running && !h.inputSent {
		return res, fmt.Errorf("%w: %s (exit code %d); its last output is in this result", boxapi.ErrJobFinished, id, res.ExitCode)
	}
	return res, nil
}

// KillJob kills job id with every process of its process group and session (a command
// that emptied its environment is found too; one that detached with setsid is not),
// and returns its last output.
func (s *Sandbox) KillJob(ctx context.Context, id string, maxOutput int) (*boxapi.ExecResult, error) {
	maxOutput, unlock, err := s.runner.lockJob(id, maxOutput)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return s.runner.killJob(ctx, id, maxOutput, "killed")
}

// killJob kills job id and records why: "killed" (KillJob) or "cancelled" (the call
// that waited for it was cancelled).
func (s *jobRunner) killJob(ctx context.Context, id string, maxOutput int, why string) (*boxapi.ExecResult, error) {
	_, head, tail := budget(maxOutput)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		h, o, err := s.runScript(ctx, []string{"kill", JobsDir, id, strconv.Itoa(head), strconv.Itoa(tail), why}, nil, nil, head+tail)
		if err != nil {
			// A command that used up the process limit can make the exec fail to start.
			lastErr = err
			continue
		}
		if err := scriptError(h, id); err != nil {
			return nil, err
		}
		res := s.result(h, id, o, maxOutput)
		s.jobSeen(id, res.Running)
		return res, nil
	}
	return nil, lastErr
}

// ListJobs returns the running and the retained finished jobs, oldest first: the
// newest maxListedJobs (1000) of them, each command cut to its first 200 bytes.
func (s *Sandbox) ListJobs(ctx context.Context) ([]boxapi.JobInfo, error) {
	if err := s.Ensure(ctx); err != nil {
		return nil, err
	}
	cmd, env := runnerExec([]string{"list", JobsDir, "-"}, nil)
	var out bytes.Buffer
	code, err := s.runner.collectExecEnv(ctx, cmd, env, &out, listOutputMax)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("listing jobs: exit code %d", code)
	}
	return parseJobList(out.Bytes(), maxListedJobs, maxListedCommand)
}

// collectExec runs an internal command and collects up to limit bytes of its stdout.
func (s *jobRunner) collectExec(ctx context.Context, cmd []string, out *bytes.Buffer, limit int) (int, error) {
	return s.collectExecEnv(ctx, cmd, nil, out, limit)
}

// collectExecEnv is collectExec with env added to the exec's environment.
func (s *jobRunner) collectExecEnv(ctx context.Context, cmd, env []string, out *bytes.Buffer, limit int) (int, error) {
	p, err := s.startExec(ctx, container.ExecOptions{
		User: "root", WorkingDir: "/", AttachStdout: true, AttachStderr: true, Cmd: cmd, Env: env,
	})
	if err != nil {
		return 0, err
	}
	stop := context.AfterFunc(ctx, func() { _ = p.Close() })
	defer stop()
	err = drain(p, func(b []byte) {
		if out.Len() < limit {
			out.Write(b[:min(len(b), limit-out.Len())])
		}
	}, func([]byte) {})
	_ = p.Close()
	if err != nil {
		return 0, fmt.Errorf("reading internal command output: %w", err)
	}
	code, ok := p.exitCode(ctx, false)
	if !ok {
		return 0, errors.New("internal command did not report an exit code")
	}
	return code, nil
}

// reserveJob counts job id as running, or refuses it when max jobs already run. The
// count lives in memory, so the common path costs nothing; when it reaches the limit it
// is reloaded from the container, so jobs that ended unobserved, or started before a
// restart, count right.
func (s *jobRunner) reserveJob(ctx context.Context, id string, max int) error {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	if s.running == nil {
		// Jobs started before a restart count too: learn them in the background,
		// without holding up the first command.
		s.running = map[string]bool{}
		go func() {
			lctx, cancel := context.WithTimeout(upkeep(context.WithoutCancel(ctx)), time.Minute)
			defer cancel()
			jobs, err := s.sb.ListJobs(lctx)
			if err != nil {
				return
			}
			s.jobsMu.Lock()
			defer s.jobsMu.Unlock()
			for _, j := range jobs {
				if j.State == "running" {
					s.running[j.ID] = true
				}
			}
		}()
	}
	if len(s.running) >= max {
		jobs, err := s.sb.ListJobs(ctx)
		if err != nil {
			return err
		}
		s.running = map[string]bool{}
		for _, j := range jobs {
			if j.State == "running" {
				s.running[j.ID] = true
			}
		}
	}
	if n := len(s.running); n >= max {
		return fmt.Errorf("%w: %d running", boxapi.ErrTooManyJobs, n)
	}
	if s.running[id] {
		return fmt.Errorf("%w: %s", errJobIDTaken, id)
	}
	s.running[id] = true
	return nil
}

// OnJobEnd makes f be told the id of each job whose end the sandbox sees: a result
// that says it ended, a kill, a command lost with its container. A job that ends
// while no call follows it is told when a call next asks for its output.
func (s *Sandbox) OnJobEnd(f func(id string)) { s.runner.jobEnded.Store(&f) }

// pruneEvery is how often a sandbox's old finished jobs are looked for. A pass runs
// the job script in the container (its files listed, stat and sort): about 50 ms of
// CPU, which fifty sandboxes pruning at once turned into seconds of every call.
const pruneEvery = 5 * time.Minute

// pruneQuiet is how long a sandbox has had no result before a pass that is due runs:
// the pass then does not take the processors from a burst of calls (its person's, or
// a team's at once). One never that quiet runs it at a result once it is pruneEvery late.
const pruneQuiet = 3 * time.Second

// jobSeen notes a job's state from a result, and now and then has a pass that forgets
// old finished jobs run at the next quiet moment (outside the result's path).
func (s *jobRunner) jobSeen(id string, running bool) {
	if f := s.jobEnded.Load(); f != nil && !running {
		(*f)(id)
	}
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	if !running {
		delete(s.running, id)
	}
	now := time.Now()
	s.lastSeen = now
	if s.lastPrune.IsZero() {
		// The first pass comes a random part of pruneEvery from now: the sandboxes of
		// a team, made together, do not all prune at the same moment.
		s.lastPrune = now.Add(-mrand.N(pruneEvery))
	}
	due := s.lastPrune.Add(pruneEvery)
	if now.Sub(due) >= pruneEvery {
		s.startPrune()
		return
	}
	wait := max(due.Sub(now), pruneQuiet)
	if s.pruneAt == nil {
		s.pruneAt = time.AfterFunc(wait, s.pruneWhenQuiet)
	} else {
		s.pruneAt.Reset(wait)
	}
}

// pruneWhenQuiet runs the pass once no result has been seen for pruneQuiet, else
// waits again; a Sandbox closed by then runs none.
func (s *jobRunner) pruneWhenQuiet() {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	if s.pruneAt == nil {
		return
	}
	if quiet := time.Since(s.lastSeen); quiet < pruneQuiet {
		s.pruneAt.Reset(pruneQuiet - quiet)
		return
	}
	s.sb.mu.Lock()
	closed := s.sb.life.closed
	s.sb.mu.Unlock()
	if closed {
		s.pruneAt = nil
		return
	}
	s.startPrune()
}

// startPrune starts a pass in the background; s.jobsMu is held.
func (s *jobRunner) startPrune() {
	s.lastPrune = time.Now()
	if s.pruneAt != nil {
		s.pruneAt.Stop()
		s.pruneAt = nil
	}
	if s.prunePass != nil {
		go s.prunePass()
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(upkeep(context.Background()), time.Minute)
		defer cancel()
		var out bytes.Buffer
		cmd, env := runnerExec([]string{"prune", JobsDir, "-"}, nil)
		// A container removed or stopped meanwhile has no jobs to forget.
		if _, err := s.collectExecEnv(ctx, cmd, env, &out, 4096); err != nil && !containerGone(err) && !NotRunning(err) {
			s.log.Warn("forgetting old jobs", zap.Error(err))
		}
	}()
}
