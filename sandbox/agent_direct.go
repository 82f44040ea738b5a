package sandbox

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

// The direct channel: when the engine runs on this machine, each container gets a
// directory of the host bind-mounted read-only at directMount. After the agent starts
// over its exec, Caddy listens on a Unix socket in that directory and asks the agent to
// dial it (agentwire.OpChannel); the session over that connection then carries every
// operation, files and preview connections included, without passing through Docker.
// The exec's session stays open: it keeps the agent alive and takes over when the
// direct channel cannot be made (Caddy in a container of its own, an engine in a VM, a
// container made before the directory was mounted) or ends.

// directMount is where the container sees its directory.
const directMount = "/run/mcp-sandbox-agent"

// directSocket is the longest name of a socket in the directory: "a" or "b" and 8 hex
// digits (agent_direct.go makes a new one each time).
const directSocket = "a12345678"

// directTimeout bounds making the direct channel: the agent's dial and its greeting.
const directTimeout = 3 * time.Second

// maxSocketPath is the longest socket path Linux accepts (sun_path less its NUL).
const maxSocketPath = 107

// directDir returns the host directory shared with the container for its direct
// channel, or "" when there is none: no directory configured, an engine that is not on
// this machine, or a path too long for a socket (logged once).
func (s *agentLink) directDir() string {
	if s.cfg.AgentSocketDir == "" || s.cfg.NoAgent || !s.caps().LocalFiles {
		return ""
	}
	// The engine's address too: two engines may hold containers of the same name.
	sum := sha256.Sum256([]byte(s.cli.DaemonHost() + "\x00" + s.cfg.Container))
	dir := filepath.Join(s.cfg.AgentSocketDir, hex.EncodeToString(sum[:8]))
	if n := len(filepath.Join(dir, directSocket)); n > maxSocketPath {
		if s.warnedPath.CompareAndSwap(false, true) {
			s.log.Warn("the agent's direct channel is off: its socket path would be longer than Linux allows; shorten Caddy's data directory (XDG_DATA_HOME)",
				zap.String("dir", dir), zap.Int("bytes", n), zap.Int("max", maxSocketPath))
		}
		return ""
	}
	return dir
}

// newSocket listens on a new socket in dir, named prefix and 8 random hex digits,
// removed when closed; it returns the socket's path in the container.
func newSocket(dir, prefix string) (*net.UnixListener, string, error) {
	name := prefix + randomHex(4)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unix"})
	if err != nil {
		return nil, "", err
	}
	ln.SetUnlinkOnClose(true)
	return ln, directMount + "/" + name, nil
}

// directBind returns the mount of a new container's directory for its direct channel
// (read-only at directMount), creating the directory; ok is false for none.
func (s *agentLink) directBind() (m boxapi.Mount, ok bool) {
	dir := s.directDir()
	if dir == "" {
		return boxapi.Mount{}, false
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.log.Warn("cannot make the directory of the agent's direct channel; the agent's channel goes through Docker",
			zap.String("dir", dir), zap.Error(err))
		return boxapi.Mount{}, false
	}
	return boxapi.Mount{Source: dir, Destination: directMount, ReadOnly: true}, true
}

// directTokenForTest changes the token the agent is told (another dialer's).
var directTokenForTest testHook[func(string) string]

// AgentDirect tells whether the agent's direct channel carries the sandbox's
// operations, and if not, why.
func (s *Sandbox) AgentDirect() (bool, string) {
	s.link.agentMu.Lock()
	defer s.link.agentMu.Unlock()
	if s.link.agent.direct != nil && s.link.agent.direct.Err() == nil {
		return true, ""
	}
	if s.link.agent.directOff != "" {
		return false, s.link.agent.directOff
	}
	if s.link.agent.sess != nil && s.link.agent.direct != nil {
		return false, "the direct channel ended and is being made again; calls go through Docker meanwhile"
	}
	return false, "no agent runs"
}

// bindRefused reports whether err is the engine refusing the bind of the direct
// channel's directory; if so, containers are made without it from now on.
func (s *agentLink) bindRefused(err error) bool {
	dir := s.directDir()
	if dir == "" || !strings.Contains(err.Error(), dir) {
		return false
	}
	s.noBind.Store(true)
	s.log.Warn("the Docker engine cannot mount the directory of the agent's direct channel (it does not see Caddy's files); "+
		"the sandbox works without it, through Docker", zap.String("dir", dir), zap.Error(err))
	return true
}

// preferDirect returns the direct channel of the agent that sess reaches while it
// runs, else sess.
func (s *agentLink) preferDirect(sess *agentwire.Session) *agentwire.Session {
	s.agentMu.Lock()
	defer s.agentMu.Unlock()
	if d := s.agent.direct; sess != nil && d != nil && d.Err() == nil && s.agent.sess == sess {
		return d
	}
	return sess
}

// isDirect reports whether sess is an agent's direct channel, which outruns Docker's
// archive API: bulk bytes then go through it rather than a transfer container.
func (s *agentLink) isDirect(sess *agentwire.Session) bool {
	if sess == nil {
		return false
	}
	s.agentMu.Lock()
	defer s.agentMu.Unlock()
	return sess == s.agent.direct
}

// startDirect makes the direct channel of the agent that sess reaches, or returns why
// it could not.
func (s *agentLink) startDirect(ctx context.Context, sess *agentwire.Session) (*agentwire.Session, error) {
	dir := s.directDir()
	if dir == "" {
		return nil, errors.New("no directory shared with the container")
	}
	if s.noBind.Load() {
		return nil, errors.New("the Docker engine does not see Caddy's directory " + dir)
	}
	if why := s.sb.life.runtimeNow().noHostSocket(); why != "" {
		return nil, errors.New(why)
	}
	// A budget of its own, whatever the agent's start left.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), directTimeout)
	defer cancel()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Only the dial this call asks for is accepted: the socket goes once it came.
	ln, sock, err := newSocket(dir, "a")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	token := randomHex(16)
	told := token
	if f := directTokenForTest.Get(); f != nil {
		told = (*f)(token)
	}
	req, _ := agentwire.Encode(agentwire.ChannelRequest{Path: sock, Token: told})
	st, err := sess.Open(req)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	select {
	case <-st.Done():
	case <-ctx.Done():
		return nil, fmt.Errorf("the agent did not dial within %v", directTimeout)
	}
	if code, ok := st.Status(); !ok || code != 0 {
		why := fmt.Sprintf("exit code %d", code)
		if st.Err() != nil {
			why = st.Err().Error()
		}
		return nil, s.dialFailed(ctx, sess, dir, why)
	}
	conn, err := ln.AcceptUnix()
	if err != nil {
		return nil, fmt.Errorf("the agent's dial did not arrive: %w", err)
	}
	ln.Close()
	stopConn := context.AfterFunc(ctx, func() { conn.Close() })
	d, err := agentwire.Client(bufio.NewReaderSize(conn, 256<<10), conn, conn, agentwire.HelloMsg{}, s.agentAccept)
	if !stopConn() {
		if err == nil {
			d.Close()
		}
		return nil, fmt.Errorf("no greeting on the direct channel within %v", directTimeout)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	if d.Peer().Token != token {
		d.Close()
		return nil, errors.New("whoever dialed did not know the agent's token")
	}
	return d, nil
}

// directRedials is how many times a direct channel that ended while its agent runs
// is made again (its server, the job runner, was killed or ended) before the agent's
// calls stay on its exec until the next agent.
const directRedials = 3

// directRedialPause is the wait before a direct channel that could not be made again
// is tried once more.
const directRedialPause = 200 * time.Millisecond

// watchDirect makes the direct channel again when it ends while the agent runs on, up
// to directRedials times; after that, or when it cannot, it notes why: calls go through
// the exec's channel until the next agent. It closes the direct channel when the agent
// ends.
func (s *agentLink) watchDirect(direct, sess *agentwire.Session) {
	tries := 0 // to make it again, for this agent
	for {
		select {
		case <-direct.Done():
		case <-sess.Done():
			direct.Close()
			return
		}
		ended := direct.Err()
		var d *agentwire.Session
		var failed error
		for d == nil && tries < directRedials && sess.Err() == nil {
			if failed != nil {
				time.Sleep(directRedialPause)
			}
			if !s.stopsNot() {
				break
			}
			tries++
			d, failed = s.startDirect(context.Background(), sess)
		}
		if d != nil {
			s.agentMu.Lock()
			mine := s.agent.direct == direct && s.agent.sess == sess
			if mine {
				s.agent.direct = d
			}
			s.agentMu.Unlock()
			if !mine {
				d.Close()
				return
			}
			s.log.Info("the agent's direct channel ended and was made again", zap.NamedError("ended", ended))
			direct = d
			continue
		}
		why := fmt.Sprintf("the direct channel ended (%v); calls go through Docker until the next agent", ended)
		if failed != nil {
			why = fmt.Sprintf("the direct channel ended (%v) and could not be made again (%v); calls go through Docker until the next agent", ended, failed)
		}
		s.agentMu.Lock()
		mine := s.agent.direct == direct && s.agent.sess == sess
		if mine {
			s.agent.directOff = why
		}
		s.agentMu.Unlock()
		if mine && sess.Err() == nil {
			s.log.Info("the agent's direct channel ended; calls go through the agent's exec", zap.String("why", why))
		}
		return
	}
}

// stopsNot reports whether no stop is under way: a stop closes the direct channel
// first, and one made again then would be held across a save of the container's memory.
func (s *agentLink) stopsNot() bool {
	_, ok := s.agentLife()
	return ok
}

// dialFailed explains an agent's failed dial of its socket. A socket that is not there
// means either a container made before it had the directory (none is mounted), or an
// engine that does not see Caddy's files (Caddy in a container of its own, a socket
// forwarded from another machine, an engine in a VM): Docker then made an empty
// directory of the same name on its own machine. In that case no container is given the
// directory any more.
func (s *agentLink) dialFailed(ctx context.Context, sess *agentwire.Session, dir, why string) error {
	err := fmt.Errorf("the agent could not dial its socket: %s", why)
	switch {
	case strings.Contains(why, "no such file"):
		if _, serr := agentStat(ctx, sess, directMount); errors.Is(serr, boxapi.ErrNotFound) {
			return fmt.Errorf("%w (a container made before its directory %s was shared has none: recreating the sandbox adds it)", err, dir)
		}
		s.noBind.Store(true)
		s.log.Warn("the Docker engine does not see Caddy's files (Caddy in a container of its own, an engine in a VM or on another machine); "+
			"the agent's channel goes through Docker. To use the direct channel, mount the directory at the same path for both",
			zap.String("dir", s.cfg.AgentSocketDir))
		return fmt.Errorf("%w (the Docker engine does not see Caddy's directory %s)", err, dir)
	case strings.Contains(why, "permission denied"):
		return fmt.Errorf("%w (root in the container is not root on this machine, as with user namespaces or SELinux: the channel goes through Docker)", err)
	}
	return err
}

// bulkMin is the size from which an upload's bytes go over a connection of their own
// (bulkSocket) when the agent has a direct channel; unknown sizes do too.
const bulkMin = 1 << 20

// bulkAccepts bounds the connections a bulk socket takes before the agent's: another
// program in the container may dial it first.
const bulkAccepts = 4

// bulkSocket is a socket in the container's directory that the agent dials for one
// write's bytes (agentwire.Request.Socket).
type bulkSocket struct {
	ln    *net.UnixListener
	path  string // in the container
	token string
}

// bulkListen opens a bulk socket for a write on the direct channel sess, or returns
// nil (the write then goes on sess's frames).
func (s *agentLink) bulkListen(sess *agentwire.Session) *bulkSocket {
	dir := s.directDir()
	if dir == "" || !s.isDirect(sess) {
		return nil
	}
	b, err := newBulkSocket(dir)
	if err != nil {
		s.log.Debug("no bulk socket; the write goes on the agent's channel", zap.Error(err))
		return nil
	}
	return b
}

// newBulkSocket listens on a new socket in dir, the container's directory.
func newBulkSocket(dir string) (*bulkSocket, error) {
	ln, p, err := newSocket(dir, "b")
	if err != nil {
		return nil, err
	}
	return &bulkSocket{ln: ln, path: p, token: randomHex(16)}, nil
}

// Close removes the socket.
func (b *bulkSocket) Close() {
	if b != nil {
		b.ln.Close()
	}
}

// send takes the agent's connection, checks that it knows the token, and copies body
// to it. werr is a failure on the agent's side (its reply says why), rerr one of body.
// The copy ends when done is closed (the write's stream ended).
func (b *bulkSocket) send(ctx context.Context, done <-chan struct{}, body io.Reader) (n int64, werr, rerr error) {
	deadline := time.Now().Add(directTimeout)
	_ = b.ln.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { b.ln.Close() })
	var conn *net.UnixConn
	for i := 0; conn == nil; i++ {
		if i == bulkAccepts {
			stop()
			return 0, fmt.Errorf("%d connections to the transfer's socket did not know its token", i), nil
		}
		c, err := b.ln.AcceptUnix()
		if err != nil {
			stop()
			return 0, fmt.Errorf("the agent did not dial the transfer's socket: %w", err), nil
		}
		_ = c.SetReadDeadline(deadline)
		got := make([]byte, len(b.token))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != b.token {
			c.Close()
			continue
		}
		conn = c
	}
	stop()
	b.ln.Close()
	defer conn.Close()
	stopConn := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopConn()
	// Nothing more comes from the agent on the connection; a write that stalls
	// because the agent stopped reading ends with the stream, or after
	// uploadStepTimeout without progress.
	sent := make(chan struct{})
	defer close(sent)
	go func() {
		select {
		case <-done:
			conn.Close()
		case <-sent:
		}
	}()
	buf := make([]byte, 256<<10)
	for {
		m, err := body.Read(buf)
		if m > 0 {
			_ = conn.SetWriteDeadline(time.Now().Add(uploadStepTimeout))
			if _, err := conn.Write(buf[:m]); err != nil {
				return n, err, nil
			}
			n += int64(m)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, nil, err
		}
	}
	return n, conn.CloseWrite(), nil
}
