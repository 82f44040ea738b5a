//go:build !linux

package main

import (
	"fmt"
	"os"
)

// copyMain needs Linux's system calls; the agent runs in Linux containers only.
func copyMain(args []string) int {
	fmt.Fprintln(os.Stderr, "sandbox-agent copy: needs Linux")
	return 127
}
