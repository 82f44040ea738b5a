package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

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
	if sess := s.link.agentSession(ctx); sess != nil {
		c, err := s.link.agentDial(ctx, sess, port)
		if err == nil || errors.Is(err, boxapi.ErrNoListener) || ctx.Err() != nil {
			return c, err
		}
		// The channel ended under the dial: this one takes an exec.
	}
	p, err := s.runner.startExec(ctx, container.ExecOptions{
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
	// A large buffer over the output: Docker frames stdout in pieces of up to 32 KiB,
	// and the client's own 4 KiB reader would take several reads per frame.
	out := &procStdout{p: p, stderr: &boundedBuffer{max: 1024}}
	c := &relayConn{p: p, out: out, r: bufio.NewReaderSize(out, relayBuffer), port: port}
	stop := context.AfterFunc(ctx, func() { _ = p.Close() })
	err = c.awaitReady()
	if !stop() || ctx.Err() != nil {
		_ = p.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("connecting to port %d in the sandbox: %w", port, err)
	}
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	return c, nil
}

// relayConn is one relay: writes go to the program's stdin, reads take its stdout.
type relayConn struct {
	p    proc
	out  *procStdout   // what bash said on stderr stays there
	r    *bufio.Reader // over out
	port int

	closeOnce sync.Once
}

// awaitReady reads up to the relay's ready byte. A relay that ends before it could
// not connect: that is boxapi.ErrNoListener, with what bash said.
func (c *relayConn) awaitReady() error {
	b, err := c.r.ReadByte()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("port %d: %w (%s)", c.port, boxapi.ErrNoListener, c.out.stderr.String())
		}
		return fmt.Errorf("relay to port %d: %w", c.port, err)
	}
	if b != relayReady {
		return fmt.Errorf("relay to port %d: unexpected first byte %q", c.port, b)
	}
	return nil
}

// Read returns bytes the server inside the container sent.
func (c *relayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Write sends bytes to the server inside the container.
func (c *relayConn) Write(p []byte) (int, error) { return c.p.Write(p) }

// CloseWrite ends what we send; the server still gets a few seconds to answer.
func (c *relayConn) CloseWrite() error { return c.p.CloseWrite() }

// Close ends the relay: its stdin reaches EOF and it exits.
func (c *relayConn) Close() error {
	c.closeOnce.Do(func() { _ = c.p.Close() })
	return nil
}

func (c *relayConn) LocalAddr() net.Addr                { return c.p.LocalAddr() }
func (c *relayConn) RemoteAddr() net.Addr               { return relayAddr(c.port) }
func (c *relayConn) SetDeadline(t time.Time) error      { return c.p.SetDeadline(t) }
func (c *relayConn) SetReadDeadline(t time.Time) error  { return c.p.SetReadDeadline(t) }
func (c *relayConn) SetWriteDeadline(t time.Time) error { return c.p.SetWriteDeadline(t) }

// relayAddr names the far end of a relay: a port on the sandbox's loopback.
type relayAddr int

func (a relayAddr) Network() string { return "sandbox-relay" }
func (a relayAddr) String() string  { return "sandbox:127.0.0.1:" + strconv.Itoa(int(a)) }
