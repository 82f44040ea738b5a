//go:build !linux

package main

import (
	"fmt"
	"io"
)

// runPTY needs Linux's pseudo-terminals; the agent runs in Linux containers only.
func runPTY(argv []string, rows, cols uint16, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sandbox-agent pty: pseudo-terminals need Linux")
	return 127
}
