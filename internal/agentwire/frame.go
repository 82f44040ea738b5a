// Package agentwire is the protocol between Caddy and the sandbox agent, spoken over the
// agent's stdin and stdout (one long-lived `docker exec -i`). It uses the standard
// library only: the agent, a static program inside the container, imports it too.
//
// A frame is a 9-byte header, then its payload:
//
//	length  uint32, big-endian: the payload's size
//	type    byte: Hello, Open, Data, Window, EOF, Signal, Resize, Exit, Reset, Ping, Pong
//	stream  uint32, big-endian: 0 for the session, else the stream the frame belongs to
//
// Work happens on streams. The side that opens a stream sends Open with a JSON request;
// Caddy's streams have odd ids, the agent's even ids. Bytes travel in Data frames, whose
// first payload byte names a channel (0 stdin, 1 stdout, 2 stderr) and which are at most
// MaxData long. Each stream has its own flow control per direction: a sender may have at
// most InitialWindow bytes unacknowledged, and the receiver returns credit with Window
// frames as its reader consumes them, so a stalled reader of one stream never blocks
// another; a receiver may grant more (at most MaxWindow) for a bulk transfer.
// Exit ends a stream with a status; Reset aborts it with a reason.
//
// The agent runs in a container the model controls, so Caddy treats every frame as
// hostile: lengths are capped (MaxFromAgent), every field is checked, a peer that sends
// more than its window or anything malformed ends the session (ErrProtocol), and nothing
// it says makes Caddy hold more than a window per stream, nor more than MaxHeld per
// session: bytes are queued contiguously whatever the frames' sizes, each queued piece
// is charged its overhead, and past the budget Caddy stops reading until its readers
// drain. The agent opens at most MaxAgentStreams streams at once; more are refused.
package agentwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version; both sides send it in Hello and refuse another. 2:
// each operation its own request message (Encode, Decode).
const Version = 2

// Frame types.
const (
	Hello  byte = 1 // session: JSON Hello, each side sends one first
	Open   byte = 2 // a new stream: JSON request
	Data   byte = 3 // channel byte, then bytes
	Window byte = 4 // uint32: credit returned to the sender
	EOF    byte = 5 // channel byte: the sender writes no more on that channel
	Signal byte = 6 // one byte: a signal number for the stream's process (to the agent only)
	Resize byte = 7 // uint16 rows, uint16 cols: the stream's terminal size (to the agent only)
	Exit   byte = 8 // int32: the stream ended with this status; nothing follows
	Reset  byte = 9 // a reason: the stream is aborted
	Ping   byte = 10
	Pong   byte = 11
)

// Channels of Data and EOF frames.
const (
	Stdin  byte = 0
	Stdout byte = 1
	Stderr byte = 2
)

const (
	headerSize = 9
	// MaxData is the largest Data payload, its channel byte included.
	MaxData = 32<<10 + 1
	// MaxFromAgent is the largest payload Caddy accepts from the agent.
	MaxFromAgent = 64 << 10
	// MaxFromCaddy is the largest payload the agent accepts: an Open may carry a long
	// command and environment.
	MaxFromCaddy = 1 << 20
	// InitialWindow is what either side may send on a stream before credit returns.
	InitialWindow = 256 << 10
	// MaxWindow bounds the window a receiver may raise a stream's to
	// (Stream.SetReceiveWindow), for bulk transfers.
	MaxWindow = 16 << 20
	// MaxHeld bounds what Caddy holds of a session received and not read yet: queued
	// bytes (their buffers' capacity) plus chunkCost per queued piece. The windows of a
	// session's streams are granted within it (raised ones within three quarters), so
	// an honest agent never reaches it; past half of it, streams that hold unread data
	// get no new credit; past it (pieces costing more than their bytes) the read loop
	// stops reading the transport until readers drain.
	MaxHeld = 32 << 20
	// MaxAgentStreams bounds the streams the agent has open at once on a session
	// (accepted connections), their windows to three quarters of MaxHeld; one more, or
	// one the budget has no room for, is reset with "not accepted", which ends that
	// connection only. It is above the egress proxy's cap on connections (64), so that
	// the proxy itself can tell the connections beyond its cap why they are refused.
	MaxAgentStreams = 96
	// maxReason bounds a Reset's reason.
	maxReason = 1024
	// maxHello bounds a Hello.
	maxHello = 4096
)

// ErrProtocol is the error of a session whose peer broke the protocol; the session is
// closed and a new agent should be started.
var ErrProtocol = errors.New("agent protocol error")

func protoErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, a...))
}

type frame struct {
	typ     byte
	stream  uint32
	payload []byte
}

// readFrame reads one frame, refusing a payload longer than limit before reading it. With
// buf, the payload is read into *buf (grown as needed) and is valid until the next
// call: the read loop copies what it keeps, so a frame costs no allocation of its own.
func readFrame(r io.Reader, hdr *[headerSize]byte, limit int, buf *[]byte) (frame, error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[0:4])
	f := frame{typ: hdr[4], stream: binary.BigEndian.Uint32(hdr[5:9])}
	if f.typ < Hello || f.typ > Pong {
		return f, protoErr("unknown frame type %d", f.typ)
	}
	if int64(n) > int64(limit) {
		return f, protoErr("frame of %d bytes, more than %d", n, limit)
	}
	if err := checkLength(f.typ, int(n)); err != nil {
		return f, err
	}
	if n > 0 {
		if buf == nil {
			f.payload = make([]byte, n)
		} else {
			if cap(*buf) < int(n) {
				*buf = make([]byte, max(int(n), min(limit, MaxFromAgent)))
			}
			f.payload = (*buf)[:n]
		}
		if _, err := io.ReadFull(r, f.payload); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return f, err
		}
	}
	return f, nil
}

// checkLength checks a payload's length against its type before it is read.
func checkLength(typ byte, n int) error {
	ok := true
	switch typ {
	case Hello:
		ok = n > 0 && n <= maxHello
	case Data:
		ok = n >= 2 && n <= MaxData
	case Window, Exit, Resize:
		ok = n == 4
	case EOF, Signal:
		ok = n == 1
	case Reset:
		ok = n <= maxReason
	case Ping, Pong:
		ok = n == 8
	case Open:
		ok = n > 0
	}
	if !ok {
		return protoErr("frame type %d with a payload of %d bytes", typ, n)
	}
	return nil
}

// appendFrame appends a frame's header and payload to b.
func appendFrame(b []byte, typ byte, stream uint32, payload ...[]byte) []byte {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = append(b, typ)
	b = binary.BigEndian.AppendUint32(b, stream)
	for _, p := range payload {
		b = append(b, p...)
	}
	return b
}
