package boxapi

import "time"

// A box is a sandbox's container as an engine keeps it: a Docker container, or a
// Kubernetes pod with the record it is made from. These types are how the sandbox and
// its engines speak of one, whatever the engine.

// BoxSpec is what a box is made with, and what an engine tells back of it.
type BoxSpec struct {
	Image      string // the image's reference, as it was asked for
	Env        []string
	WorkingDir string
	Labels     map[string]string
	Hostname   string
	User       string
	// Entrypoint and Cmd are the box's first process, in place of the image's.
	Entrypoint, Cmd []string
	// Init runs an init as the box's first process, which reaps orphaned processes
	// (Docker's --init; where the engine has one).
	Init bool
	// Runtime is the container runtime (runc, runsc; a Kubernetes RuntimeClass); ""
	// the engine's default.
	Runtime string
	// NetworkMode is Docker's network mode ("none", "bridge", a network's name).
	NetworkMode string
	// RestartPolicy is Docker's restart policy's name ("", "no", "always",
	// "unless-stopped", "on-failure").
	RestartPolicy string
	Limits        Limits
	CapDrop       []string
	SecurityOpt   []string
	Sysctls       map[string]string
	Mounts        []Mount
}

// Limits are a box's resource limits; 0 is none.
type Limits struct {
	Memory     int64 // bytes
	MemorySwap int64 // bytes of memory and swap together
	NanoCPUs   int64 // billionths of a CPU
	PidsLimit  int64
}

// Mount is a volume or a directory of the engine's host mounted in a box.
type Mount struct {
	Volume      string // a named volume; "" for a directory of the host
	Source      string // the host's directory, or the volume's place on it
	Destination string
	ReadOnly    bool
}

// Box is what an engine tells of a box.
type Box struct {
	ID      string
	Name    string
	Created time.Time
	// ImageID is the image the box runs, by its ID (Docker); an engine without image
	// IDs gives the reference (Spec.Image).
	ImageID      string
	Spec         BoxSpec
	State        BoxState
	RestartCount int
	// ExecIDs are the engine's programs started in the box that it still tracks
	// (Docker's execs).
	ExecIDs []string
	// Node is the machine of a cluster the box runs on; "" where the engine has one.
	Node string
}

// Box states, as BoxState.Status gives them.
const (
	StateCreated    = "created"
	StateRunning    = "running"
	StatePaused     = "paused"
	StateRestarting = "restarting"
	StateRemoving   = "removing"
	StateExited     = "exited"
	StateDead       = "dead"
)

// BoxState is where a box is in its life.
type BoxState struct {
	Status                      string // one of the State constants
	Running, Paused, Restarting bool
	Dead                        bool
	StartedAt, FinishedAt       time.Time // zero when never
	ExitCode                    int
	OOMKilled                   bool
	// Error is the engine's word on why the box does not run, "" when none.
	Error string
}

// BoxSummary is a box as an engine lists it.
type BoxSummary struct {
	ID      string
	Name    string
	Labels  map[string]string
	Status  string // one of the State constants
	Created time.Time
}

// Usage is what a running box uses, by its engine's figures.
type Usage struct {
	// CPU is the CPUs in use (1.5: one and a half), averaged over a short sample;
	// -1 when not measured.
	CPU float64
	// Memory is the memory in use without the page cache the kernel can drop (what
	// `docker stats` shows); MemoryCache is that cache.
	Memory, MemoryCache int64
	MemoryLimit         int64 // 0 when none is known
	PIDs, PIDsLimit     int64 // 0 when not known
}

// BoxUpdate changes a box's limits and restart policy in place.
type BoxUpdate struct {
	// Limits, when set: its memory, swap and CPUs where not 0, and its PidsLimit.
	Limits *Limits
	// RestartPolicy, when not "", as BoxSpec.RestartPolicy.
	RestartPolicy string
}

// Volume is a named volume an engine keeps (a Docker volume, a Kubernetes claim).
type Volume struct {
	Name    string
	Labels  map[string]string
	Created time.Time
}

// EngineInfo is what an engine says of itself that a box's settings depend on.
type EngineInfo struct {
	CPUs int // the CPUs a box can be given; 0 when not known (a cluster)
	// Runtimes are the container runtimes a box can be made with, by name; none when
	// the engine does not say (a cluster tells when the box is made).
	Runtimes       map[string]RuntimeInfo
	DefaultRuntime string
	HasInit        bool // an init for a box's first process (Docker's --init)
	Experimental   bool // the engine's experimental features are on (Docker's checkpoints)
}

// RuntimeInfo is how an engine runs a container runtime.
type RuntimeInfo struct {
	Path string
	Args []string
}

// Image is what an engine tells of an image. An engine that cannot see its nodes'
// images (Kubernetes) gives the reference as ID and its nodes' architecture.
type Image struct {
	ID           string
	Architecture string // GOARCH's names: amd64, arm64
	Env          []string
	Comment      string
}
