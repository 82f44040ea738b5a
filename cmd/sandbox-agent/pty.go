package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

// ptyMain runs a command under a new pseudo-terminal and copies between the terminal
// and its own stdin and stdout (the holder of a tty job):
//
//	sandbox-agent pty [--rows N] [--cols N] -- command [arg...]
//
// It exits with the command's status (128+n when signal n ended it), 2 for bad
// arguments, 127 when the terminal or the command could not start. Its stderr carries
// only its own errors: the command's stderr goes to the terminal, mixed with stdout.
func ptyMain(args []string) int {
	fs := flag.NewFlagSet("sandbox-agent pty", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rows := fs.Uint("rows", 24, "terminal rows")
	cols := fs.Uint("cols", 80, "terminal columns")
	err := fs.Parse(args)
	switch {
	case err != nil:
	case fs.NArg() == 0:
		err = fmt.Errorf("no command given")
	case *rows == 0 || *rows > 1000 || *cols == 0 || *cols > 1000:
		err = fmt.Errorf("--rows and --cols take 1 to 1000")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox-agent pty: %v\nusage: sandbox-agent pty [--rows N] [--cols N] -- command [arg...]\n", err)
		return 2
	}
	return runPTY(fs.Args(), uint16(*rows), uint16(*cols), os.Stdin, os.Stdout, os.Stderr)
}
