package main

import (
	"fmt"
	"os"
)

// ptyMain runs a command under a new pseudo-terminal and copies between the terminal
// and its own stdin and stdout (the holder of a tty job).
func ptyMain(args []string) int {
	fmt.Fprintln(os.Stderr, "sandbox-agent pty: not implemented")
	return 2
}
