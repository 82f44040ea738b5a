package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// agentDial connects to port on the container's loopback over the agent's channel: a
// stream, no exec.
func (s *agentLink) agentDial(ctx context.Context, sess *agentwire.Session, port int) (net.Conn, error) {
	st, err := openNet(ctx, sess, agentwire.DialRequest{Port: port})
	if err != nil {
		if errors.Is(err, errRefused) {
			return nil, fmt.Errorf("connecting to port %d in the sandbox: %w (%v)", port, boxapi.ErrNoListener, err)
		}
		return nil, err
	}
	return &streamConn{streamEnd: streamEnd{st}, port: port}, nil
}

var errRefused = errors.New("refused")

// openNet opens a dial or listen stream and waits until the agent says it is connected
// (or listening).
func openNet(ctx context.Context, sess *agentwire.Session, r agentwire.Request) (*agentwire.Stream, error) {
	req, _ := agentwire.Encode(r)
	st, err := sess.Open(req)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	c, err := st.ReadChunk()
	if err == nil && c.Ch == agentwire.Connected && c.EOF {
		return st, nil
	}
	st.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil && !errors.Is(err, agentwire.ErrLost) {
		return nil, fmt.Errorf("%w: %v", errRefused, err)
	}
	if err == nil {
		err = fmt.Errorf("unexpected answer on channel %d", c.Ch)
	}
	return nil, err
}

// ListenPort listens on port on the container's loopback (127.0.0.1) through the agent
// and calls accept, in a goroutine of its own, with each connection a program in the
// container makes to it. The listener lasts until stop is called or the agent's channel
// ends (done is closed then). It needs the agent: on the fallback it fails; while the
// container is being stopped or restarted, or the agent's start failed with it, it
// fails with an error for which NotRunning is true (the container is not the cause).
func (s *Sandbox) ListenPort(ctx context.Context, port int, accept func(net.Conn)) (stop func(), done <-chan struct{}, err error) {
	if port < 1 || port > 65535 {
		return nil, nil, fmt.Errorf("port %d is out of range 1-65535", port)
	}
	if s.cfg.NoAgent {
		return nil, nil, errors.New("listening in the sandbox needs its agent, which is off (agent off)")
	}
	if err := s.Ensure(ctx); err != nil {
		return nil, nil, err
	}
	gen, _ := s.link.agentLife()
	sess := s.link.agentSession(ctx)
	if sess == nil {
		if running, why := s.AgentStatus(); !running && why != "" {
			return nil, nil, fmt.Errorf("listening in the sandbox needs its agent, which does not run: %s", why)
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, fmt.Errorf("listening in the sandbox: its agent did not start in a container being stopped or started: %w", errNotRunning)
	}
	st, err := openNet(ctx, sess, agentwire.ListenRequest{Port: port})
	if err != nil && (sess.Err() != nil || !s.link.sameLife(gen)) {
		// The channel went under it: the container stopped or restarted.
		return nil, nil, fmt.Errorf("listening on port %d in the sandbox: %w (%w)", port, errNotRunning, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("listening on port %d in the sandbox: %w", port, err)
	}
	s.link.agentMu.Lock()
	if s.link.agent.listeners == nil {
		s.link.agent.listeners = map[listenerKey]listener{}
	}
	key := listenerKey{sess, st.ID()}
	s.link.agent.listeners[key] = listener{accept: accept, port: port}
	s.link.agentMu.Unlock()
	go func() {
		<-st.Done()
		s.link.agentMu.Lock()
		delete(s.link.agent.listeners, key)
		s.link.agentMu.Unlock()
	}()
	return func() { st.Close() }, st.Done(), nil
}

// listenerKey names a listener: stream ids are a session's own.
type listenerKey struct {
	sess *agentwire.Session
	id   uint32
}

type listener struct {
	accept func(net.Conn)
	port   int
}

// agentAccept serves a stream the agent opens: a connection accepted by one of our
// listeners; anything else is refused.
func (s *agentLink) agentAccept(st *agentwire.Stream) {
	req, err := agentwire.Decode(st.Request())
	r, ok := req.(*agentwire.AcceptRequest)
	if err != nil || !ok {
		st.Reset("not accepted")
		return
	}
	s.agentMu.Lock()
	l, ok := s.agent.listeners[listenerKey{st.Session(), r.Listener}]
	s.agentMu.Unlock()
	if !ok {
		st.Reset("no such listener")
		return
	}
	l.accept(&streamConn{streamEnd: streamEnd{st}, port: l.port})
}

// streamConn is a TCP connection inside the container carried by a stream: channel 0
// to it, channel 1 from it.
type streamConn struct {
	streamEnd
	port int
	data []byte
	eof  bool
}

func (c *streamConn) Read(p []byte) (int, error) {
	for len(c.data) == 0 {
		if c.eof {
			return 0, io.EOF
		}
		ch, err := c.st.ReadChunk()
		if err != nil {
			return 0, err
		}
		if ch.Ch != agentwire.Stdout {
			continue
		}
		if ch.EOF {
			c.eof = true
			continue
		}
		c.data = ch.Data
	}
	n := copy(p, c.data)
	c.data = c.data[n:]
	return n, nil
}

func (c *streamConn) RemoteAddr() net.Addr { return relayAddr(c.port) }
