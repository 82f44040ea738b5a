package agentwire

// Request is the Open payload of a stream Caddy starts.
type Request struct {
	Op   string   `json:"op"`             // "exec"
	Argv []string `json:"argv,omitempty"` // the program and its arguments
	// Env is added to the agent's own environment (later entries win).
	Env   []string `json:"env,omitempty"`
	Dir   string   `json:"dir,omitempty"`   // working directory; "" is /
	Stdin bool     `json:"stdin,omitempty"` // the program reads channel 0; else /dev/null
	// TTY runs the program under a pseudo-terminal of Rows×Cols (24×80 when 0); its
	// output then comes on channel 1 only.
	TTY        bool   `json:"tty,omitempty"`
	Rows, Cols uint16 `json:",omitempty"`
	// TimeoutMS kills the program's process group after that long; 0 is none.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// OpExec starts a program.
const OpExec = "exec"

// Exit statuses the agent gives when it could not start the program, as Docker does.
const (
	ExitCannotRun = 126
	ExitNotFound  = 127
)
