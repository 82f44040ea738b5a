package boxapi

import (
	"context"
	"time"
)

// ProcessSpec is a program an engine starts in a sandbox's container.
type ProcessSpec struct {
	Argv []string
	Env  []string // NAME=VALUE, on top of the container's
	Dir  string   // "" the engine's default
	User string   // "" the container's user
	// Which of its streams are attached: output not attached is dropped, and a
	// program without Stdin reads an empty input.
	Stdin, Stdout, Stderr bool
	TTY                   bool // a terminal: its output comes as Stdout
}

// Process is a program an engine runs for a sandbox: its output in pieces, each of one
// stream and never framed, its input, and its end. Its methods may be called from
// different goroutines, but ReadOutput from one at a time.
type Process interface {
	// ReadOutput reads the next bytes of output into p and says whose they are;
	// io.EOF once all of it was read, or why the stream broke.
	ReadOutput(p []byte) (int, Stream, error)
	// Write writes to the program's standard input.
	Write(p []byte) (int, error)
	// CloseWrite ends the program's standard input.
	CloseWrite() error
	// Close abandons the program's streams; its exit code is then unknown unless it
	// had ended.
	Close() error
	// Wait waits until the program has ended or ctx ends: its exit code, and whether
	// it is known.
	Wait(ctx context.Context) (code int, ok bool)
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
}
