// Command impostor answers in the sandbox agent's place, as root in the container can
// make happen, and tries to exhaust Caddy's memory: once Caddy listens through it, it
// opens as many connection streams as it may and fills each window with 1-byte Data
// frames, alternating channels on every other stream. It serves nothing else.
package main

import (
	"os"
	"sync"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

func main() {
	agentwire.Serve(os.Stdin, os.Stdout, agentwire.HelloMsg{PID: os.Getpid(), Build: "impostor"}, handle)
}

func handle(st *agentwire.Stream) {
	if req, err := agentwire.Decode(st.Request()); err != nil || req.Op() != agentwire.OpListen {
		st.Reset("impostor")
		return
	}
	st.CloseChannel(agentwire.Connected)
	var streams []*agentwire.Stream
	for i := 0; i < 2*agentwire.MaxAgentStreams; i++ {
		b, _ := agentwire.Encode(agentwire.AcceptRequest{Listener: st.ID(), Remote: "127.0.0.1:1"})
		cs, err := st.Session().Open(b)
		if err != nil {
			break
		}
		streams = append(streams, cs)
	}
	var wg sync.WaitGroup
	for i, cs := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < agentwire.InitialWindow; j++ {
				ch := agentwire.Stdout
				if i%2 == 1 && j%2 == 1 {
					ch = agentwire.Stderr
				}
				if _, err := cs.Write(ch, []byte{'x'}); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	<-st.Done()
}
