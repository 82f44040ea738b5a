//go:build unix

package fleet

import (
	"errors"
	"syscall"
)

// processGone reports whether no process has the pid (in this pid namespace).
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
