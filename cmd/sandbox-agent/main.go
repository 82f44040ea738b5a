// Command sandbox-agent runs inside each sandbox container. Caddy starts it with one
// long-lived `docker exec -i` and speaks the agentwire protocol over its stdin and
// stdout ("serve"); the same binary holds the pseudo-terminal of a tty job ("pty") and
// runs the jobs it starts until their end ("jobs"), outliving the agent. Outside the
// sandbox, in a container of its own, it copies /sandbox for checkpoints ("copy").
// It uses the standard library only and is built with CGO_ENABLED=0, so it runs on any
// Linux image of its architecture.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sandbox-agent serve | pty [--rows N --cols N] -- command... | jobs | copy save|restore FROM TO")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		os.Exit(serveMain(os.Args[2:]))
	case "pty":
		os.Exit(ptyMain(os.Args[2:]))
	case "jobs":
		os.Exit(jobsMain(os.Args[2:]))
	case "copy":
		os.Exit(copyMain(os.Args[2:]))
	case "version":
		fmt.Println(version)
	default:
		fmt.Fprintf(os.Stderr, "sandbox-agent: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}
