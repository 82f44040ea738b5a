package sandbox

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// relayReady is the byte the relay writes once it is connected, before any byte of the
// stream, so that a refused connection and an open one are told apart.
const relayReady = 'R'

// relayScript connects to the port on the container's own loopback (IPv4, then IPv6)
// with bash's /dev/tcp, which both the production and the test image have, and copies
// bytes both ways with two dd processes. Argument: $1 port.
//
// dd, not cat: busybox's cat copies with sendfile/splice, which loses or stalls data
// between a socket and the exec's pipes; dd does plain reads and writes (and without
// iflag=fullblock writes each short read at once, so nothing waits for a full block).
// The copy of stdin goes through fd 4 because bash points the stdin of background
// commands at /dev/null when no stdin redirection other than fd 0 itself is given.
//
// Half-close: when the server ends its side, the relay exits at once and the stream
// ends after the last byte. When our side ends first (stdin at EOF: the proxy closed
// or half-closed the connection), the server is still given a few seconds to finish
// its answer, since dd cannot shut down only the socket's write side. Every process
// is killed and reaped before the relay exits, so nothing is left behind.
const relayScript = `exec 3<>"/dev/tcp/127.0.0.1/$1" || exec 3<>"/dev/tcp/::1/$1" || exit 7
exec 2>/dev/null 4<&0
printf R
dd bs=131072 <&3 & r=$!
dd bs=131072 >&3 <&4 & w=$!
wait -n $r $w
if kill -0 $r; then
	( sleep 5; kill $r ) >/dev/null </dev/null & t=$!
	wait $r
	kill $t
fi
kill $r $w
wait
exit 0`

// relayBuffer is the read buffer of one relay connection.
const relayBuffer = 256 << 10

// relayDialTimeout bounds the exec that sets up one relay when the caller's context
// has no deadline.
const relayDialTimeout = 30 * time.Second

// DialPort opens a connection to port on the container's loopback interface, through
// the Docker API only: an exec whose attached stdin and stdout carry the bytes, as
// `kubectl port-forward` does. It works with any network mode (also none) and with a
// remote engine. When nothing listens on the port, the error wraps [boxapi.ErrNoListener].
//
// The connection supports CloseWrite; closing it ends the relay inside the container.
// ctx bounds only the setup: cancelling it later does not affect the connection.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d is out of range 1-65535", port)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, relayDialTimeout)
		defer cancel()
	}
	if err := s.Ensure(ctx); err != nil {
		return nil, err
	}
	if sess := s.agentSession(ctx); sess != nil {
		c, err := s.agentDial(ctx, sess, port)
		if err == nil || errors.Is(err, boxapi.ErrNoListener) || ctx.Err() != nil {
			return c, err
		}
		// The channel ended under the dial: this one takes an exec.
	}
	_, hj, err := s.startExec(ctx, container.ExecOptions{
		User:         "root",
		WorkingDir:   "/",
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          []string{"bash", "-c", relayScript, "relay", strconv.Itoa(port)},
	})
	if err != nil {
		return nil, err
	}
	// A large buffer over the stream: Docker frames stdout in pieces of up to 32 KiB,
	// and the client's own 4 KiB reader would take several reads per frame.
	c := &relayConn{hj: hj, r: bufio.NewReaderSize(hj.Reader, relayBuffer), port: port}
	stop := context.AfterFunc(ctx, func() { hj.Close() })
	err = c.awaitReady()
	if !stop() || ctx.Err() != nil {
		hj.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("connecting to port %d in the sandbox: %w", port, err)
	}
	if err != nil {
		hj.Close()
		return nil, err
	}
	return c, nil
}

// relayConn is one relay: writes go to the exec's stdin unframed, reads take the
// payload of the exec's stdout frames (Docker multiplexes stdout and stderr on one
// stream with an 8-byte header per frame).
type relayConn struct {
	hj   types.HijackedResponse
	r    *bufio.Reader // over hj.Reader, which may hold bytes read with the upgrade
	port int

	remaining int // bytes left in the current stdout frame

	closeOnce sync.Once
}

// awaitReady reads up to the relay's ready byte. A relay that ends before it could
// not connect: that is ErrNoListener, with what bash said.
func (c *relayConn) awaitReady() error {
	var said strings.Builder
	for {
		stream, size, err := c.header()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("port %d: %w (%s)", c.port, boxapi.ErrNoListener, strings.TrimSpace(said.String()))
			}
			return fmt.Errorf("relay to port %d: %w", c.port, err)
		}
		if stream != 1 {
			if err := c.skip(size, &said); err != nil {
				return err
			}
			continue
		}
		if size == 0 {
			continue
		}
		b, err := c.r.ReadByte()
		if err != nil {
			return fmt.Errorf("relay to port %d: %w", c.port, err)
		}
		if b != relayReady {
			return fmt.Errorf("relay to port %d: unexpected first byte %q", c.port, b)
		}
		c.remaining = size - 1
		return nil
	}
}

// header reads one frame header and returns its stream and size.
func (c *relayConn) header() (byte, int, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return 0, 0, err // io.EOF only at a frame boundary
	}
	size := int(binary.BigEndian.Uint32(hdr[4:]))
	switch hdr[0] {
	case 0, 1:
		return 1, size, nil
	case 2:
		return 2, size, nil
	case 3:
		msg := make([]byte, min(size, 4096))
		n, _ := io.ReadFull(c.r, msg)
		return 0, 0, fmt.Errorf("docker: %s", msg[:n])
	}
	return 0, 0, fmt.Errorf("unknown stream %d in relay output", hdr[0])
}

// skip discards a frame that is not stdout, keeping a little of it for errors.
func (c *relayConn) skip(size int, keep *strings.Builder) error {
	buf := make([]byte, min(size, 512))
	n, err := io.ReadFull(c.r, buf)
	if keep != nil && keep.Len() < 1024 {
		keep.Write(buf[:n])
	}
	if err != nil {
		return err
	}
	if _, err := io.CopyN(io.Discard, c.r, int64(size-n)); err != nil {
		return err
	}
	return nil
}

// Read returns bytes the server inside the container sent.
func (c *relayConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for c.remaining == 0 {
		stream, size, err := c.header()
		if err != nil {
			return 0, err
		}
		if stream != 1 {
			if err := c.skip(size, nil); err != nil {
				return 0, err
			}
			continue
		}
		c.remaining = size
	}
	n, err := c.r.Read(p[:min(len(p), c.remaining)])
	c.remaining -= n
	if err == io.EOF && c.remaining > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err == io.EOF && n > 0 {
		err = nil // the next Read reports the end at a frame boundary
	}
	return n, err
}

// Write sends bytes to the server inside the container.
func (c *relayConn) Write(p []byte) (int, error) { return c.hj.Conn.Write(p) }

// CloseWrite ends what we send; the server still gets a few seconds to answer.
func (c *relayConn) CloseWrite() error { return c.hj.CloseWrite() }

// Close ends the relay: its stdin reaches EOF and it exits.
func (c *relayConn) Close() error {
	c.closeOnce.Do(c.hj.Close)
	return nil
}

func (c *relayConn) LocalAddr() net.Addr                { return c.hj.Conn.LocalAddr() }
func (c *relayConn) RemoteAddr() net.Addr               { return relayAddr(c.port) }
func (c *relayConn) SetDeadline(t time.Time) error      { return c.hj.Conn.SetDeadline(t) }
func (c *relayConn) SetReadDeadline(t time.Time) error  { return c.hj.Conn.SetReadDeadline(t) }
func (c *relayConn) SetWriteDeadline(t time.Time) error { return c.hj.Conn.SetWriteDeadline(t) }

// relayAddr names the far end of a relay: a port on the sandbox's loopback.
type relayAddr int

func (a relayAddr) Network() string { return "sandbox-relay" }
func (a relayAddr) String() string  { return "sandbox:127.0.0.1:" + strconv.Itoa(int(a)) }
