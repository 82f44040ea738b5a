// Package boxapi is the sandbox's vocabulary without Docker: what its calls return
// (command results, job listings, file descriptions, upload results), the options they
// take, and the errors they report, which callers test with errors.Is. Package sandbox
// implements the calls on Docker and uses these types under the same names; the tools
// and links layers use them without importing Docker's client.
package boxapi

import (
	"errors"
)

// WorkDir is where the persistent volume is mounted and where commands start.
const WorkDir = "/sandbox"

// Errors returned (wrapped) by the file functions and by sandbox.Sandbox.Ensure;
// test them with errors.Is.
var (
	ErrNotFound     = errors.New("no such file or directory")
	ErrIsDir        = errors.New("is a directory")
	ErrNotRegular   = errors.New("not a regular file")
	ErrRelativePath = errors.New("path is not absolute")
	ErrImageMissing = errors.New("sandbox image not found")
	// ErrRuntimeMissing: the engine has no container runtime of the configured name
	// (`runtime`); the error's text names the runtimes it has.
	ErrRuntimeMissing = errors.New("container runtime not found")
)

// Runtime is the container runtime a sandbox runs under.
type Runtime struct {
	// Name is the engine's name of it (Docker's HostConfig.Runtime, e.g. runc or
	// runsc); "" while not known (the engine's default, the container not yet seen).
	Name string
	// GVisor: it is gVisor's runsc, a kernel of the sandbox's own in user space.
	GVisor bool
	// Problem says what its configuration breaks and how to fix it; "" when nothing.
	Problem string
	// KeepsProcesses: a stop of the sandbox keeps its running processes with their
	// memory (keep_processes, where the runtime can).
	KeepsProcesses bool
}

// Errors of the job functions; test them with errors.Is.
var (
	ErrJobNotFound       = errors.New("no such job")
	ErrJobNotInteractive = errors.New("job was not started with interactive: true, its stdin is closed")
	ErrJobFinished       = errors.New("job has finished")
	ErrTooManyJobs       = errors.New("too many jobs running")
	ErrNoCwd             = errors.New("working directory does not exist")
	// ErrInputWaiting: the program has not read the job's earlier input yet.
	ErrInputWaiting = errors.New("the program has not read its input yet")
	// ErrNoTTY: ExecOptions.TTY needs the sandbox agent, which does not run in the
	// container.
	ErrNoTTY = errors.New("tty needs the sandbox agent, which cannot run in this container; run the command without tty (for example with `script -qc` if the image has it)")
	// ErrOldBash: the container's bash is older than the job runner needs.
	ErrOldBash = errors.New("commands need bash 5.1 or newer")
	// ErrCommandLost: the container stopped or was replaced while the command ran;
	// it is not run again.
	ErrCommandLost = errors.New("the command was lost with its container")
)

// ErrTooLarge is returned (wrapped) by EditFile for files beyond its size limit.
var ErrTooLarge = errors.New("file too large")

// Errors of sandbox.Sandbox.Upload, wrapped; test them with errors.Is. A stream over the
// limit fails with [ErrTooLarge], shared with EditFile.
var (
	ErrBadName = errors.New("file name is not usable")
	ErrNotDir  = errors.New("not a directory")
)

// ErrNoListener is returned (wrapped) by Sandbox.DialPort when nothing accepts
// connections on the port inside the container.
var ErrNoListener = errors.New("nothing listens on that port inside the sandbox")
