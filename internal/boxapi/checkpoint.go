package boxapi

import (
	"errors"
	"regexp"
	"time"
)

// Checkpoint is one saved state of a sandbox: the container's filesystem outside
// WorkDir (an image) and a copy of WorkDir (a volume), on the sandbox's engine.
type Checkpoint struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	// Person is whose sandbox it was saved from ("" for the operator's).
	Person string `json:"person"`
	// Container is the sandbox container it was saved from.
	Container string `json:"container"`
	// Engine is the engine it lives on ("" for the only one).
	Engine string `json:"engine,omitempty"`
}

// ImageReset is the id restore takes to reset the system to the configured image,
// keeping WorkDir.
const ImageReset = "image"

// Errors of the checkpoint calls; test them with errors.Is.
var (
	// ErrCheckpointNotFound: no checkpoint of that id belongs to the sandbox.
	ErrCheckpointNotFound = errors.New("no such checkpoint")
	// ErrNoSandbox: the sandbox has no container to save yet.
	ErrNoSandbox = errors.New("the sandbox has no container yet")
	// ErrCheckpointEmpty: the container's runtime keeps its writes where a checkpoint
	// does not see them (gVisor without --overlay2=none); nothing is saved.
	ErrCheckpointEmpty = errors.New("refusing to save a checkpoint that would be empty")
)

var checkpointID = regexp.MustCompile(`^c[0-9a-f]{14}$`)

// ValidCheckpointID reports whether id has the form of a checkpoint id (c and 14 hex
// digits).
func ValidCheckpointID(id string) bool { return checkpointID.MatchString(id) }

// MaxCheckpointName is the longest name a checkpoint may have, in bytes.
const MaxCheckpointName = 100
