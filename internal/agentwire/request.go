package agentwire

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Request is one operation's message, the Open payload of a stream Caddy starts: each
// operation has its own type, so a field means one thing. On the wire it is JSON, the
// operation's name in "op" beside the message's fields (Encode, Decode).
type Request interface {
	// Op names the operation.
	Op() string
}

// ExecRequest starts a program (OpExec).
type ExecRequest struct {
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
}

// JobRequest starts a job (OpJob) as the job runner's (sandbox/jobs.sh) "run" mode
// does, with the same files, and answers as it does: the MCPJOB1 header on channel 1,
// then the output delivered, stdout on channel 1 and stderr on channel 2.
type JobRequest struct {
	JobsDir   string `json:"jobs_dir"`   // where jobs keep their files
	ID        string `json:"id"`         // the job's id, claimed or refused as "taken"
	TimeoutMS int64  `json:"timeout_ms"` // the job's process group is killed after that long
	// WaitMS is how long to wait for the job's end before answering "running";
	// -1 waits for the end, 0 answers at once.
	WaitMS      int64  `json:"wait_ms"`
	Interactive bool   `json:"interactive,omitempty"` // stdin is a FIFO job_input feeds
	TTY         bool   `json:"tty,omitempty"`         // under a pseudo-terminal held by Agent
	Agent       string `json:"agent,omitempty"`       // the agent's binary, for TTY
	Cwd         string `json:"cwd"`
	Head        int64  `json:"head"` // bytes sent of each end of a range longer than Head+Tail
	Tail        int64  `json:"tail"`
	// Command is run by bash -c; with CommandOnStdin it comes on channel 0 instead
	// (too long for the environment) and is run from a file.
	Command        string `json:"command,omitempty"`
	CommandOnStdin bool   `json:"command_on_stdin,omitempty"`
	// Env is added to the agent's own environment for the command.
	Env []string `json:"env,omitempty"`
}

// DialRequest connects to Port on the container's loopback (OpDial).
type DialRequest struct {
	Port int `json:"port"`
}

// ListenRequest listens on Port on the container's loopback (OpListen).
type ListenRequest struct {
	Port int `json:"port"`
}

// AcceptRequest is what the agent opens a stream with for a connection a listen stream
// accepted (OpAccept).
type AcceptRequest struct {
	Listener uint32 `json:"listener"` // the listen stream's id
	Remote   string `json:"remote"`   // the peer's address
}

// ChannelRequest asks for a second session over a Unix socket (OpChannel).
type ChannelRequest struct {
	Path  string `json:"path"`  // the socket Caddy listens on
	Token string `json:"token"` // what the agent says in its Hello there
}

// StatRequest describes a file (OpStat).
type StatRequest struct {
	Path string `json:"path"`
}

// ReadRequest reads a regular file (OpRead).
type ReadRequest struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"` // where to start
	Length int64  `json:"length"`           // how many bytes; -1: to the end
}

// WriteRequest writes a file (OpWrite).
type WriteRequest struct {
	Path  string `json:"path"`
	Max   int64  `json:"max,omitempty"`   // the largest file accepted; 0 is no limit
	Mode  uint32 `json:"mode,omitempty"`  // a new file's mode (an fs.FileMode); 0 is 0644
	Mkdir bool   `json:"mkdir,omitempty"` // create missing parent directories
	Excl  bool   `json:"excl,omitempty"`  // the file must not exist yet
	// Socket is a Unix socket the agent dials for the file's bytes (Token first, then
	// nothing), instead of channel 0: a bulk transfer that no framing slows. The
	// stream's channel 0 then carries only its EOF, which commits the file once the
	// connection has ended; a stream that ends without it aborts the write.
	Socket string `json:"socket,omitempty"`
	Token  string `json:"token,omitempty"`
}

// ListRequest lists a directory's regular files (OpList).
type ListRequest struct {
	Path string `json:"path"`
	Max  int64  `json:"max"`            // how many files at most
	Hide string `json:"hide,omitempty"` // names starting with this are left out
}

// TarRequest sends a directory as a tar stream (OpTar).
type TarRequest struct {
	Path string `json:"path"`
}

func (ExecRequest) Op() string    { return OpExec }
func (JobRequest) Op() string     { return OpJob }
func (DialRequest) Op() string    { return OpDial }
func (ListenRequest) Op() string  { return OpListen }
func (AcceptRequest) Op() string  { return OpAccept }
func (ChannelRequest) Op() string { return OpChannel }
func (StatRequest) Op() string    { return OpStat }
func (ReadRequest) Op() string    { return OpRead }
func (WriteRequest) Op() string   { return OpWrite }
func (ListRequest) Op() string    { return OpList }
func (TarRequest) Op() string     { return OpTar }

// Encode gives r's wire form: its fields and its operation's name in "op".
func Encode(r Request) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	op, _ := json.Marshal(r.Op())
	out := append([]byte(`{"op":`), op...)
	if len(b) > 2 { // not "{}"
		out = append(out, ',')
	}
	return append(out, b[1:]...), nil
}

// Decode reads a request Encode wrote, as the message type its operation names.
func Decode(b []byte) (Request, error) {
	var head struct {
		Op string `json:"op"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, err
	}
	var r Request
	switch head.Op {
	case OpExec:
		r = &ExecRequest{}
	case OpJob:
		r = &JobRequest{}
	case OpDial:
		r = &DialRequest{}
	case OpListen:
		r = &ListenRequest{}
	case OpAccept:
		r = &AcceptRequest{}
	case OpChannel:
		r = &ChannelRequest{}
	case OpStat:
		r = &StatRequest{}
	case OpRead:
		r = &ReadRequest{}
	case OpWrite:
		r = &WriteRequest{}
	case OpList:
		r = &ListRequest{}
	case OpTar:
		r = &TarRequest{}
	case "":
		return nil, errors.New("a request without an operation")
	default:
		return nil, fmt.Errorf("unknown operation %q", head.Op)
	}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("%s request: %w", head.Op, err)
	}
	return r, nil
}

// Operations.
const (
	// OpExec starts a program.
	OpExec = "exec"
	// OpJob runs a job (JobRequest).
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
