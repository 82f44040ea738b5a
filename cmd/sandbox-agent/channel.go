package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// channelDialTimeout bounds the dial of a direct channel's socket.
const channelDialTimeout = 2 * time.Second

// runChannel has the Unix socket Caddy listens on dialed and a second session served
// over it (agentwire.OpChannel): by the job runner, which then starts each job itself
// (runnerLine), else by the agent. That session ends with the connection, or with the
// agent; the agent itself ends with its first one.
func runChannel(st *agentwire.Stream, req agentwire.ChannelRequest) {
	if req.Path == "" || !filepath.IsAbs(req.Path) {
		st.Reset("a channel needs the absolute path of a socket")
		return
	}
	if jobRunner.local == nil {
		err := jobRunner.channel(req.Path, req.Token, st.Done())
		var dial errRunnerDial
		switch {
		case err == nil:
			st.Exit(0)
			return
		case errors.As(err, &dial):
			st.Reset(dial.why)
			return
		}
		// No runner took it: the agent serves it.
	}
	conn, err := dialChannel(req.Path)
	if err != nil {
		st.Reset(err.Error())
		return
	}
	go serveChannel(conn, req.Token)
	st.Exit(0)
}

// dialChannel dials a direct channel's socket at path.
func dialChannel(path string) (net.Conn, error) {
	if !filepath.IsAbs(path) {
		return nil, errors.New("a channel needs the absolute path of a socket")
	}
	conn, err := net.DialTimeout("unix", path, channelDialTimeout)
	if err != nil {
		return nil, fmt.Errorf("dialing the channel's socket: %w", err)
	}
	return conn, nil
}

// serveChannel serves a session over conn, greeting with token, until it ends; then
// closes conn.
func serveChannel(conn net.Conn, token string) {
	defer conn.Close()
	_ = agentwire.Serve(bufio.NewReaderSize(conn, 256<<10), conn, hello(token), handle)
}

// receiveBulk copies a write's bytes from the socket req.Socket into f (spliced by the
// kernel where it can), then waits for the stream's commit (channel 0's EOF). It
// returns -1 when Caddy abandoned the write.
func receiveBulk(st *agentwire.Stream, req agentwire.WriteRequest, f *os.File) (int64, error) {
	conn, err := net.DialTimeout("unix", req.Socket, channelDialTimeout)
	if err != nil {
		return 0, fmt.Errorf("dialing the transfer's socket: %w", err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, req.Token); err != nil {
		return 0, fmt.Errorf("on the transfer's socket: %w", err)
	}
	// Caddy ends the stream to abandon the write: the copy then ends too.
	committed := make(chan bool, 1)
	go func() {
		for {
			c, err := st.ReadChunk()
			if err != nil {
				conn.Close()
				committed <- false
				return
			}
			if c.Ch == agentwire.Stdin && c.EOF {
				committed <- true
				return
			}
		}
	}()
	var src io.Reader = conn
	if req.Max > 0 {
		src = io.LimitReader(conn, req.Max+1)
	}
	n, err := f.ReadFrom(src)
	if req.Max > 0 && n > req.Max {
		return n, &fileError{agentwire.FileTooLarge, fmt.Sprintf("more than %d bytes", req.Max)}
	}
	if err != nil {
		return n, err
	}
	if ok := <-committed; !ok {
		return -1, nil
	}
	return n, nil
}
