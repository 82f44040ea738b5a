package boxapi

import (
	"fmt"
	"time"
)

// MinOutput is the fewest bytes per stream a tool call may ask for with max_output,
// and so the least default_output.
const MinOutput = 1024

// Stream names one of a command's output streams.
type Stream int

// The output streams of a command.
const (
	Stdout Stream = 1
	Stderr Stream = 2
)

// String returns "stdout" or "stderr".
func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return fmt.Sprintf("stream(%d)", int(s))
}

// ExecOptions tune one sandbox.Sandbox.Exec. The zero value uses the configured
// defaults and waits for the command to end.
type ExecOptions struct {
	// Timeout after which the command's process group is killed; 0 means the
	// sandbox's Config.ExecTimeout. The timeout is kept inside the container, so it
	// holds even when nobody waits for the command any more.
	Timeout time.Duration
	// Wait is how long Exec waits for the command before returning it as a running job
	// (Running set, JobID to follow it with JobOutput). 0 waits until it ends; NoWait
	// returns as soon as it started.
	Wait time.Duration
	// Interactive keeps the command's stdin open for JobInput; otherwise stdin is empty.
	Interactive bool
	// TTY runs the command under a pseudo-terminal held by the sandbox agent (ErrNoTTY
	// without it), its stdout and stderr both going to stdout; it implies Interactive,
	// JobInput writing to the terminal.
	TTY bool
	// Cwd is the directory the command starts in; "" means WorkDir.
	Cwd string
	// MaxOutput is the bytes kept per stream in the result; 0 or more than the
	// sandbox's Config.MaxOutput means Config.MaxOutput.
	MaxOutput int
	// MaxJobs refuses the command with ErrTooManyJobs when that many jobs are already
	// running; 0 means sandbox.DefaultMaxJobs.
	MaxJobs int
	// OnOutput, when set, receives output while the command runs (about once a second,
	// at most the last 4 KiB of each stream since the previous call), from one
	// goroutine (calls never overlap). It must not retain chunk. It serves progress
	// reports; the result carries the output itself.
	OnOutput func(stream Stream, chunk []byte)
	// OnStart, when set, is told the job's id before the command starts, so what the
	// command does (its connections through the egress proxy) can be tied to the call.
	OnStart func(jobID string)
	// Yield, when closed while Exec waits, makes it return at once with the command
	// running (Running set, no output: the next JobOutput delivers it all).
	Yield <-chan struct{}
}

// NoWait as ExecOptions.Wait starts the command and returns at once.
const NoWait time.Duration = -1

// ExecResult is what a command did, or the part of it delivered by this call.
type ExecResult struct {
	// JobID names the command's job: its files in the container and the handle for
	// JobOutput, JobInput and KillJob.
	JobID string
	// Running says the command was still running when the call returned; ExitCode is
	// then -1 and the rest of the output comes from JobOutput.
	Running bool
	// Stdout and Stderr are valid UTF-8: the output not delivered before. When longer
	// than the output budget, their middle is replaced, at line boundaries, by a line
	// naming the lines left out and the read_file call that reads them.
	Stdout, Stderr string
	// ExitCode is the command's exit status: 128+n when signal n ended it, so 137
	// after a kill (timeout, cancellation, KillJob); -1 while it runs.
	ExitCode int
	// TimedOut, Cancelled and Killed say why the command was killed, if it was:
	// its timeout, a cancelled call (also in later results of its job), or KillJob.
	TimedOut, Cancelled, Killed bool
	// StdoutBytes and StderrBytes count every byte each stream produced so far.
	StdoutBytes, StderrBytes int64
	// StdoutTruncated and StderrTruncated say whether the middle of a stream was cut.
	StdoutTruncated, StderrTruncated bool
	// StdoutFile and StderrFile hold each stream's whole output inside the container.
	StdoutFile, StderrFile string
	// Lost says the job's runner is gone without an exit status: it was killed (say,
	// by kill -9 -1) or the container restarted while the command ran. Its output so
	// far is still delivered.
	Lost bool
	// InputWaiting says the program, still running, has not read all of the last
	// input of JobInput yet: the rest goes to it as it reads, and further input is
	// refused with ErrInputWaiting until then.
	InputWaiting bool
	// HeldBy is the process id of a process the command left behind that still held
	// its output open when the result was returned, and is killed at the timeout,
	// or "". It is set only when such processes could not become a job of their own.
	HeldBy string
	// Background is the job that took over the processes the command left running
	// with its output open, or "": it runs without the command's timeout until they
	// end or KillJob stops it, and delivers their further output. BackgroundPid is
	// one of them, BackgroundCommand its command line (printable, at most 80 bytes).
	Background, BackgroundPid, BackgroundCommand string
	// Duration is the time from the start of the call to its result.
	Duration time.Duration
	// JobDuration is how long the job has run so far (while running) or ran in all
	// (once ended), as the container measured it; 0 when unknown.
	JobDuration time.Duration
}

// MaxInputBytes bounds one JobInput. Input goes through a pipe of 64 KiB; a process in
// the container writes each input, so no call waits for a program that does not read,
// and while one still waits for the program to read, more input is refused
// (ErrInputWaiting): input not read yet stays under 64 KiB plus one input.
const MaxInputBytes = 60 << 10

// JobInfo describes one job for a listing.
type JobInfo struct {
	ID          string
	State       string // running, done, or lost (the container restarted under it)
	ExitCode    int    // -1 unless done
	Started     time.Time
	Timeout     time.Duration
	Interactive bool
	KilledBy    string // KilledByTimeout, KilledByJobKill, KilledByClient, or "" when not killed
	Command     string // the start of its first line, ending in "…" when cut
}

// What killed a job, as JobInfo.KilledBy says it.
const (
	KilledByTimeout = "timeout"  // its timeout passed
	KilledByJobKill = "job_kill" // KillJob
	KilledByClient  = "client"   // the call that waited for it was cancelled
)

// ValidJobID reports whether id has the form of a job id (j and 12 hex digits).
func ValidJobID[T string | []byte](id T) bool {
	if len(id) != 13 || id[0] != 'j' {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
