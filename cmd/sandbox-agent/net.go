package main

import (
	"net"
	"strconv"
	"sync"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// runDial connects to a port on the container's loopback and relays the connection.
func runDial(st *agentwire.Stream, req agentwire.DialRequest) {
	if req.Port < 1 || req.Port > 65535 {
		st.Reset("port out of range 1-65535")
		return
	}
	p := strconv.Itoa(req.Port)
	conn, err := net.Dial("tcp", "127.0.0.1:"+p)
	if err != nil {
		var err6 error
		if conn, err6 = net.Dial("tcp", "[::1]:"+p); err6 != nil {
			st.Reset("nothing listens on port " + p + ": " + err.Error())
			return
		}
	}
	st.CloseChannel(agentwire.Connected)
	relayConn(st, conn.(*net.TCPConn))
}

// relayConn copies a connection both ways over a stream, passing half-closes on, and
// ends the stream when both directions have ended.
func relayConn(st *agentwire.Stream, conn *net.TCPConn) {
	defer conn.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				if _, werr := st.Write(agentwire.Stdout, buf[:n]); werr != nil {
					conn.Close()
					return
				}
			}
			if err != nil {
				st.CloseChannel(agentwire.Stdout)
				return
			}
		}
	}()
	for {
		c, err := st.ReadChunk()
		if err != nil {
			conn.Close() // Caddy closed the stream
			break
		}
		if c.Ch != agentwire.Stdin {
			continue
		}
		if c.EOF {
			conn.CloseWrite()
			break
		}
		if _, err := conn.Write(c.Data); err != nil {
			conn.Close()
			break
		}
	}
	wg.Wait()
	st.Exit(0)
}

// runListen listens on a loopback port while the stream is open and hands each
// connection to Caddy as a stream the agent opens.
func runListen(st *agentwire.Stream, req agentwire.ListenRequest) {
	if req.Port < 1 || req.Port > 65535 {
		st.Reset("port out of range 1-65535")
		return
	}
	ln, err := listenShared("127.0.0.1:" + strconv.Itoa(req.Port))
	if err != nil {
		st.Reset(err.Error())
		return
	}
	st.CloseChannel(agentwire.Connected)
	go func() {
		<-st.Done() // Caddy closed the listener's stream
		ln.Close()
	}()
	go func() { // Caddy may also end it by closing channel 0
		for {
			c, err := st.ReadChunk()
			if err != nil || (c.Ch == agentwire.Stdin && c.EOF) {
				ln.Close()
				return
			}
		}
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			break
		}
		b, _ := agentwire.Encode(agentwire.AcceptRequest{Listener: st.ID(), Remote: conn.RemoteAddr().String()})
		cs, err := st.Session().Open(b)
		if err != nil {
			conn.Close()
			break
		}
		go relayConn(cs, conn.(*net.TCPConn))
	}
	st.Exit(0)
}
