//go:build ignore

// The pod sandbox ("pause") process of the test cluster that scripts/k8s-cluster.sh
// starts: it sleeps until SIGINT or SIGTERM and reaps the zombies it inherits.
// scripts/k8s-cluster.sh builds it with CGO_ENABLED=0 and puts it alone in an image
// tar, so the cluster needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
