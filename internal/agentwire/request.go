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
	// Spare: the agent keeps a copy of this program (same argv, env and dir) started
	// ahead of need, and serves the next such request with it; the program must wait
	// for its request on stdin. Prefix is written to the program's stdin before
	// channel 0 (with Stdin false, stdin then ends).
	Spare  bool   `json:"spare,omitempty"`
	Prefix []byte `json:"prefix,omitempty"`

	Port     int    `json:"port,omitempty"`     // dial, listen
	Listener uint32 `json:"listener,omitempty"` // accept: the listen stream's id
	Remote   string `json:"remote,omitempty"`   // accept: the peer's address

	// File operations (files.go).
	Path   string `json:"path,omitempty"`
	Offset int64  `json:"offset,omitempty"` // read: where to start
	Length int64  `json:"length,omitempty"` // read: how many bytes (-1: to the end); list: how many files at most
	Max    int64  `json:"max,omitempty"`    // write: the largest file accepted; 0 is no limit
	Mode   uint32 `json:"mode,omitempty"`   // write: a new file's mode (an fs.FileMode); 0 is 0644
	Mkdir  bool   `json:"mkdir,omitempty"`  // write: create missing parent directories
	Excl   bool   `json:"excl,omitempty"`   // write: the file must not exist yet
	Hide   string `json:"hide,omitempty"`   // list: names starting with this are left out

	Token string `json:"token,omitempty"` // channel: what the agent says in its Hello there; write: what it sends first on Socket
	// Socket, for a write, is a Unix socket the agent dials for the file's bytes (Token
	// first, then nothing), instead of channel 0: a bulk transfer that no framing
	// slows. The stream's channel 0 then carries only its EOF, which commits the file
	// once the connection has ended; a stream that ends without it aborts the write.
	Socket string `json:"socket,omitempty"`
}

// Operations.
const (
	// OpExec starts a program.
	OpExec = "exec"
	// OpJob runs a job as the job runner's (sandbox/jobs.sh) "run" mode does: Argv
	// holds that mode and its arguments, Env its environment, channel 0 (Stdin) a long
	// command; the answer is that mode's output.
	OpJob = "job"
	// OpDial connects to Port on the container's loopback (127.0.0.1, then ::1). The
	// agent ends channel 2 once connected (Connected); then channel 0 carries bytes to
	// the connection and channel 1 bytes from it, each ended by EOF (a half-close).
	OpDial = "dial"
	// OpListen listens on Port on the container's loopback (127.0.0.1) for as long as
	// the stream stays open, ending channel 2 once listening. For each connection it
	// accepts, the agent opens a stream of its own to Caddy with an Accept request,
	// carrying the connection as OpDial's stream does.
	OpListen = "listen"
	// OpAccept is the request of a stream the agent opens for an accepted connection.
	OpAccept = "accept"
	// OpChannel asks the agent to dial the Unix socket at Path (Caddy listens there,
	// in a directory shared read-only with the container) and to serve a second
	// session over it, saying Token in its Hello. The stream exits 0 once the agent
	// has dialed, or is reset with the reason it could not. The second session carries
	// the same operations as the first without passing through Docker.
	OpChannel = "channel"
)

// Connected is the channel whose end tells that a dial or a listen succeeded.
const Connected = Stderr

// Exit statuses the agent gives when it could not start the program, as Docker does.
const (
	ExitCannotRun = 126
	ExitNotFound  = 127
)
