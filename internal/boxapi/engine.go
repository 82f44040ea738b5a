package boxapi

import (
	"errors"
	"strings"
	"syscall"
)

// engineSigns are what errors of an engine that did not answer say, in lower case, for
// errors whose chain was lost on the way (formatted with %v, or read back as text): the
// Docker client's own messages (its hijacked connections, for exec, say it in lower
// case), a refused or reset connection to the engine's socket, and the job runner's
// header that never came because the exec's stream ended first.
var engineSigns = []string{
	"cannot connect to the docker daemon",
	"is the docker daemon running?",
	"connection refused",
	"connection reset by peer",
	"the job runner failed in the sandbox: no answer",
}

// EngineDown reports whether err means the Docker engine did not answer, as far as the
// error's chain and text tell: a refused or reset connection, or the message of one.
// Trying again later may work; nothing is wrong with the command or the path. Package
// sandbox's EngineDown also knows the Docker client's own error types.
func EngineDown(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, s := range engineSigns {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
