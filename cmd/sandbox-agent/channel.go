package main

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// channelDialTimeout bounds the dial of a direct channel's socket.
const channelDialTimeout = 2 * time.Second

// runChannel dials the Unix socket Caddy listens on and serves a second session over
// it (agentwire.OpChannel). That session ends with the connection; the agent itself
// ends with its first one.
func runChannel(st *agentwire.Stream, req agentwire.Request) {
	if req.Path == "" || !filepath.IsAbs(req.Path) {
		st.Reset("a channel needs the absolute path of a socket")
		return
	}
	conn, err := net.DialTimeout("unix", req.Path, channelDialTimeout)
	if err != nil {
		st.Reset("dialing the channel's socket: " + err.Error())
		return
	}
	go func() {
		defer conn.Close()
		hello := agentwire.HelloMsg{PID: os.Getpid(), Build: filepath.Base(os.Args[0]), Token: req.Token}
		_ = agentwire.Serve(bufio.NewReaderSize(conn, 256<<10), conn, hello, handle)
	}()
	st.Exit(0)
}
