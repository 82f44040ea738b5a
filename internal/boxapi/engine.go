package boxapi

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"time"
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

// Capabilities says what an engine can do beyond making, starting, stopping and
// removing a sandbox's container and running programs in it. The sandbox asks it once,
// instead of guessing from the engine's address, and says plainly what it cannot do.
type Capabilities struct {
	// Checkpoints: the engine saves a container's system as an image and runs
	// short-lived containers on the sandbox's volume to copy it (checkpoints,
	// restores, copies to another person).
	Checkpoints bool
	// HelperContainers: a short-lived container may mount the sandbox's volume beside
	// it while it runs (transfer containers for large copies).
	HelperContainers bool
	// Pause: the container can be frozen, so the programs starting in it are held
	// while a checkpoint pauses it.
	Pause bool
	// ExecPIDs: a program's inspect gives its process id once it runs.
	ExecPIDs bool
	// LocalFiles: the engine runs on this machine and mounts this machine's
	// directories (the agent's direct channel, archives over the engine's socket).
	LocalFiles bool
}

// DockerCapabilities are a Docker engine's at the address host: all but LocalFiles,
// which only an engine on this machine (unix://) has.
func DockerCapabilities(host string) Capabilities {
	return Capabilities{Checkpoints: true, HelperContainers: true, Pause: true, ExecPIDs: true,
		LocalFiles: strings.HasPrefix(host, "unix://")}
}

// PathStat is what an engine tells of a path in a sandbox's container, without
// following a final symbolic link: its name, size, mode and time, and the link's target.
type PathStat struct {
	Name       string
	Size       int64
	Mode       os.FileMode
	Mtime      time.Time
	LinkTarget string
}
