package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
)

// The agent: one `docker exec -i <agent> serve` per sandbox, kept open, carries every
// command as a stream of the agentwire protocol instead of a Docker exec each. Where it
// cannot run (no binary for the architecture, a read-only or noexec filesystem, no
// space) the sandbox falls back by itself to one Docker exec per call, logs it once and
// tries again after agentRetryAfter or when this Sandbox starts, restarts or replaces
// the container.
//
// The fallback is for a running container where the agent cannot run, nothing else.
// While this Sandbox stops its container (Stop, Restart, Recreate, Restore, Delete) no
// agent starts in it, and an agent start that fails in a container that no longer runs,
// was started again, or is being stopped (the engine's "is not running", a failed
// upgrade of the exec's connection, garbage from a dying exec) only costs that call:
// the sandbox does not fall back for it (agentFault). The container's life as this
// Sandbox sees it is a generation (agentState.gen), bumped when a stop begins or ends
// and when it starts the container: an agent begun under another one is not kept.

// agentRetryAfter is how long a sandbox runs without its agent after it failed to start.
const agentRetryAfter = 5 * time.Minute

// agentStartTimeout bounds copying the agent in, starting it and its greeting.
const agentStartTimeout = 10 * time.Second

// Test hooks: a container setting no configuration can ask for (a read-only root), and
// another program in the agent's place (a hostile one).
var (
	hostConfigForTest testHook[func(*container.HostConfig)]
	agentArgvForTest  testHook[func(path string) []string]
)

// testHook is a function a test sets while the sandbox's goroutines may read it.
type testHook[F any] struct{ p atomic.Pointer[F] }

func (h *testHook[F]) Set(f F) { h.p.Store(&f) }
func (h *testHook[F]) Clear()  { h.p.Store(nil) }
func (h *testHook[F]) Get() *F { return h.p.Load() }

// agentGreetTimeout bounds the wait for the agent's greeting.
const agentGreetTimeout = 5 * time.Second

type agentState struct {
	group singleflight.Group
	sess  *agentwire.Session
	// direct is the agent's second session, over a Unix socket (agent_direct.go); nil
	// while it has none. It ends when sess does.
	direct    *agentwire.Session
	directOff string      // why the last agent has no direct channel
	off       string      // why the agent does not run; "" when it runs or was not tried
	retry     time.Time   // no new try before then
	logged    string      // the last reason logged
	started   int         // agents started
	broken    []time.Time // when recent agents broke the protocol
	// The container IDs where the binary in the read-only directory started (its
	// copy is never tried there again) and where it could not be executed at all.
	readOnlyRan, readOnlyUnusable string
	// listeners are ListenPort's listeners, by their stream.
	listeners map[listenerKey]listener

	stopping int           // stops of the container under way (beginStop)
	gen      uint64        // the container's life as this Sandbox sees it (see above)
	sessGen  uint64        // gen when sess started
	life     containerLife // the container the agent was last installed in
}

// containerLife is one run of one container: its ID and when the engine started it.
type containerLife struct {
	id        string
	startedAt time.Time
}

func (l containerLife) same(o containerLife) bool {
	return l.id == o.id && l.startedAt.Equal(o.startedAt)
}

// beginStop marks a stop of the container under way until end is called: no agent
// starts meanwhile, the agent's channel is closed now, and an agent start under way
// is not kept nor its failure held against the container.
func (s *agentLink) beginStop() (end func()) {
	s.agentMu.Lock()
	s.agent.stopping++
	s.agent.gen++
	s.agentMu.Unlock()
	s.sb.CloseAgent()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.agentMu.Lock()
			s.agent.stopping--
			s.agent.gen++
			s.agentMu.Unlock()
		})
	}
}

// agentFresh gives the agent a new try at once in a container this Sandbox has just
// started, restarted or made: a failure met before does not hold it on the fallback.
func (s *agentLink) agentFresh() {
	s.agentMu.Lock()
	s.agent.gen++
	s.agent.off, s.agent.retry = "", time.Time{}
	s.agentMu.Unlock()
}

// agentLife returns the container's life now, when an agent may start in it: false
// while a stop is under way.
func (s *agentLink) agentLife() (gen uint64, ok bool) {
	s.agentMu.Lock()
	defer s.agentMu.Unlock()
	return s.agent.gen, s.agent.stopping == 0
}

// sameLife reports whether no stop is under way and none began or ended, nor a start
// happened, since gen.
func (s *agentLink) sameLife(gen uint64) bool {
	g, ok := s.agentLife()
	return ok && g == gen
}

// faultInspectTimeout bounds agentFault's look at the container.
const faultInspectTimeout = 5 * time.Second

// agentFault reports whether err, met by an agent begun in the container's life gen,
// says that the agent cannot run in this container: not when the call ended, a stop
// began or a start happened since, the engine did not answer or says the container is
// not running, or the container now is not the running one the agent was installed in
// (stopped, stopping, paused, restarted or replaced). Only then does the sandbox fall
// back to one Docker exec per call.
func (s *agentLink) agentFault(ctx context.Context, gen uint64, err error) bool {
	if ctx.Err() != nil || !s.sameLife(gen) || containerGone(err) || EngineDown(err) || errors.Is(err, errNotRunning) {
		return false
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), faultInspectTimeout)
	defer cancel()
	info, ierr := s.cli.InspectBox(ictx, s.cfg.Container)
	if st := info.State; ierr != nil || !st.Running || st.Paused || st.Restarting || st.Dead || st.Status != boxapi.StateRunning {
		return false
	}
	s.agentMu.Lock()
	life := s.agent.life
	s.agentMu.Unlock()
	if !life.same(containerLife{info.ID, info.State.StartedAt}) {
		return false
	}
	return s.sameLife(gen) // a stop may have begun while the engine answered
}

// AgentStatus tells whether commands go through the agent, and if not, why.
func (s *Sandbox) AgentStatus() (running bool, why string) {
	s.link.agentMu.Lock()
	defer s.link.agentMu.Unlock()
	if s.link.agent.sess != nil && s.link.agent.sess.Err() == nil {
		return true, ""
	}
	return false, s.link.agent.off
}

// AgentStarts counts the agents this sandbox has started.
func (s *Sandbox) AgentStarts() int {
	s.link.agentMu.Lock()
	defer s.link.agentMu.Unlock()
	return s.link.agent.started
}

// agentOpen reports whether the agent's channel is open, without starting an agent.
func (s *agentLink) agentOpen() bool {
	s.agentMu.Lock()
	sess := s.agent.sess
	s.agentMu.Unlock()
	return sess != nil && sess.Err() == nil
}

// agentSession returns the running agent's channel, starting an agent when none runs;
// nil means "use a Docker exec for this call".
func (s *agentLink) agentSession(ctx context.Context) *agentwire.Session {
	if s.cfg.NoAgent {
		return nil
	}
	s.agentMu.Lock()
	sess := s.agent.sess
	s.agentMu.Unlock()
	if sess != nil && sess.Err() == nil {
		return s.preferDirect(sess)
	}
	if sess != nil {
		// Its end is accounted for before another agent starts: it may be the one that
		// sends the sandbox to the fallback.
		s.agentEnded(sess)
	}
	s.agentMu.Lock()
	retry := s.agent.retry
	s.agentMu.Unlock()
	gen, ok := s.agentLife()
	if !ok || time.Now().Before(retry) {
		// A stop under way: this call uses a Docker exec, which meets the container
		// as it is.
		return nil
	}
	ch := s.agent.group.DoChan("start", func() (any, error) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), agentStartTimeout)
		defer cancel()
		return s.startAgent(sctx, gen)
	})
	select {
	case r := <-ch:
		sess, _ := r.Val.(*agentwire.Session)
		return s.preferDirect(sess)
	case <-ctx.Done():
		return nil
	}
}

// startAgent puts the agent in place afresh, starts it and checks its greeting. The
// binary in the container's read-only directory is tried first; when it cannot be
// executed at all (an engine that sees another directory, a container root that may not
// enter it), a copy in the container's filesystem is, from then on for that container.
// An agent from the directory that started and then died, or gave no greeting, was
// stopped by something in the container: the copy, which the container could replace,
// is not tried then, nor ever once the directory's binary has run in that container.
// gen is the container's life the start belongs to (agentLife): a failure is held
// against the container only by agentFault's judgement.
func (s *agentLink) startAgent(ctx context.Context, gen uint64) (*agentwire.Session, error) {
	sess, path, err := s.startAgentFrom(ctx, gen, true)
	if err == nil || !strings.HasPrefix(path, directMount+"/") || ctx.Err() != nil {
		return sess, err
	}
	if !s.agentFault(ctx, gen, err) {
		return nil, err
	}
	id := s.agentContainer()
	s.agentMu.Lock()
	ran := s.agent.readOnlyRan == id
	unusable := errors.Is(err, errAgentNoExec) && !ran
	if unusable {
		s.agent.readOnlyUnusable = id
	}
	s.agentMu.Unlock()
	if !unusable {
		s.agentFailed(err.Error())
		return nil, err
	}
	s.log.Info("the agent cannot be executed from the container's read-only directory; starting a copy in the container",
		zap.Error(err))
	sess, _, err = s.startAgentFrom(ctx, gen, false)
	return sess, err
}

// errAgentNoExec: the engine could not execute the agent's binary itself: its exec
// ended with 126 or 127 without the agent's greeting, and the engine's message names
// the binary and a reason of the file's (binaryUnusable).
var errAgentNoExec = errors.New("the agent's binary could not be executed")

// binaryUnusable reports whether the engine's message for an exec of path that could
// not start says that the file itself cannot be executed there: missing, not
// permitted, or not a program for this machine. An exec that could not start for want
// of resources (the container's pids used up: "read init-p: connection reset by
// peer", "resource temporarily unavailable") is not: that passes, and a copy in the
// container, which root there could replace, must not be started for it. The message
// is the engine's (runc's, crun's): nothing in the container ran to write it.
func binaryUnusable(msg, path string) bool {
	msg = strings.ToLower(msg)
	if !strings.Contains(msg, strings.ToLower(path)) {
		return false
	}
	for _, why := range []string{"no such file or directory", "permission denied", "exec format error", "not a directory"} {
		if strings.Contains(msg, why) {
			return true
		}
	}
	return false
}

// agentContainer returns the ID of the container the agent was last installed in.
func (s *agentLink) agentContainer() string {
	s.sb.mu.Lock()
	defer s.sb.mu.Unlock()
	return s.agentArch.id
}

// readOnlyUsable reports whether the container's read-only directory is still to be
// tried for the agent: not in a container where its binary could not be executed.
func (s *agentLink) readOnlyUsable(id string) bool {
	s.agentMu.Lock()
	defer s.agentMu.Unlock()
	return s.agent.readOnlyUnusable != id
}

// startAgentFrom installs the agent (in the read-only directory if mounted says so and
// the container has it), starts it and checks its greeting; it returns the binary's
// path. A failure to start from the directory is not recorded: the caller tries a copy.
func (s *agentLink) startAgentFrom(ctx context.Context, gen uint64, mounted bool) (*agentwire.Session, string, error) {
	path, err := s.installAgent(ctx, mounted)
	if err != nil {
		if s.agentFault(ctx, gen, err) {
			s.agentFailed("copying the agent into the container: " + err.Error())
		}
		return nil, "", err
	}
	argv := []string{path, "serve"}
	if f := agentArgvForTest.Get(); f != nil {
		argv = (*f)(path)
	}
	p, err := s.sb.runner.startEngineProc(ctx, container.ExecOptions{
		User: "root", WorkingDir: "/", AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: argv,
	})
	if err != nil {
		return nil, path, err
	}
	// The first bytes of its output are the engine's message when the exec could not
	// start.
	out := &procStdout{p: p, stderr: &boundedBuffer{max: 2048}, head: &boundedBuffer{max: 1024}}
	hctx, cancel := context.WithTimeout(ctx, agentGreetTimeout)
	defer cancel()
	stop := context.AfterFunc(hctx, func() { _ = p.Close() })
	sess, err := agentwire.Client(out, p, closerFunc(p.Close), agentwire.HelloMsg{}, s.agentAccept)
	if !stop() {
		if err == nil {
			sess.Close()
		}
		err = fmt.Errorf("no greeting within %v", agentGreetTimeout)
	}
	if err != nil {
		_ = p.Close()
		code, ok := p.exitCode(context.WithoutCancel(ctx), true)
		exit := "still running"
		if ok {
			exit = "exit code " + strconv.Itoa(code)
		}
		why := fmt.Sprintf("the agent did not start (%v; %s): %s", err, exit, human.Clip(out.stderr.String(), 300))
		if ok && (code == 126 || code == 127) {
			why += "; the engine said: " + human.Clip(out.head.String(), 300)
		}
		if strings.HasPrefix(path, directMount+"/") {
			if ok && (code == 126 || code == 127) && binaryUnusable(out.head.String(), path) {
				return nil, path, fmt.Errorf("%w: %s", errAgentNoExec, why)
			}
			return nil, path, errors.New(why)
		}
		if s.agentFault(ctx, gen, err) {
			s.agentFailed(why)
		}
		return nil, path, err
	}
	s.setAgentBinary(path)
	if strings.HasPrefix(path, directMount+"/") {
		id := s.agentContainer()
		s.agentMu.Lock()
		s.agent.readOnlyRan = id
		s.agentMu.Unlock()
	}
	direct, derr := s.startDirect(ctx, sess)
	directOff := ""
	if derr != nil {
		directOff = derr.Error()
	}
	s.agentMu.Lock()
	if s.agent.gen != gen || s.agent.stopping > 0 {
		// A stop began meanwhile: this agent is in a container being stopped.
		s.agentMu.Unlock()
		if direct != nil {
			direct.Close()
		}
		sess.Close()
		return nil, path, fmt.Errorf("the agent started in a container being stopped or restarted: %w", errNotRunning)
	}
	s.agent.sess, s.agent.sessGen, s.agent.off, s.agent.logged = sess, gen, "", ""
	s.agent.direct, s.agent.directOff = direct, directOff
	s.agent.started++
	s.agentMu.Unlock()
	s.log.Info("sandbox agent started", zap.Int("pid", sess.Peer().PID), zap.String("build", sess.Peer().Build),
		zap.Bool("direct_channel", direct != nil), zap.String("direct_channel_off", directOff))
	if direct != nil {
		go s.watchDirect(direct, sess)
	}
	go func() {
		<-sess.Done()
		if direct != nil {
			direct.Close()
		}
		s.log.Info("sandbox agent channel ended; the next call starts a new agent",
			zap.Error(sess.Err()), zap.String("agent_stderr", human.Clip(out.stderr.String(), 500)))
		s.agentEnded(sess)
	}()
	return sess, path, nil
}

// agentEnded accounts, once, for the end of an agent's channel: after agentMaxBroken
// agents that broke the protocol, the sandbox falls back.
func (s *agentLink) agentEnded(sess *agentwire.Session) {
	s.agentMu.Lock()
	if s.agent.sess != sess {
		s.agentMu.Unlock()
		return
	}
	s.agent.sess, s.agent.direct = nil, nil
	gen := s.agent.sessGen
	s.agentMu.Unlock()
	// The garbage of a dying exec (the container stopping) is not an agent's.
	if err := sess.Err(); errors.Is(err, agentwire.ErrProtocol) && s.agentFault(context.Background(), gen, err) && s.agentBroke() {
		s.agentFailed(fmt.Sprintf("%d agents in a row broke the protocol, the last with: %v", agentMaxBroken, err))
	}
}

// agentMaxBroken agents that break the protocol within agentBrokenWindow make the
// sandbox fall back for agentRetryAfter: something in the container keeps answering in
// the agent's place.
const (
	agentMaxBroken    = 3
	agentBrokenWindow = 10 * time.Minute
)

// agentBroke records an agent that broke the protocol and reports whether too many did.
func (s *agentLink) agentBroke() bool {
	s.agentMu.Lock()
	defer s.agentMu.Unlock()
	now := time.Now()
	recent := s.agent.broken[:0]
	for _, t := range s.agent.broken {
		if now.Sub(t) < agentBrokenWindow {
			recent = append(recent, t)
		}
	}
	s.agent.broken = append(recent, now)
	return len(s.agent.broken) >= agentMaxBroken
}

// agentFailed records why the agent cannot run, logging each new reason once.
func (s *agentLink) agentFailed(why string) {
	s.setAgentBinary("")
	s.agentMu.Lock()
	s.agent.off, s.agent.retry = why, time.Now().Add(agentRetryAfter)
	fresh := s.agent.logged != why
	s.agent.logged = why
	s.agentMu.Unlock()
	if fresh {
		s.log.Warn("the sandbox agent cannot run in this container; commands use one Docker exec each",
			zap.String("reason", why))
	}
}

// CloseAgent ends the channel to the agent, which then exits; running jobs go on. The
// next command starts a new agent.
func (s *Sandbox) CloseAgent() {
	s.link.agentMu.Lock()
	sess, direct := s.link.agent.sess, s.link.agent.direct
	s.link.agent.sess, s.link.agent.direct = nil, nil
	s.link.agentMu.Unlock()
	if direct != nil {
		direct.Close()
	}
	if sess != nil {
		sess.Close()
	}
}

// agentExec starts a command on the agent.
func (s *agentLink) agentExec(sess *agentwire.Session, opts container.ExecOptions) (proc, error) {
	return s.agentStart(sess, agentwire.ExecRequest{Argv: opts.Cmd, Env: opts.Env,
		Dir: opts.WorkingDir, Stdin: opts.AttachStdin, TTY: opts.Tty})
}

// agentStart opens a stream for r on the agent.
func (s *agentLink) agentStart(sess *agentwire.Session, r agentwire.Request) (proc, error) {
	req, err := agentwire.Encode(r)
	if err != nil {
		return nil, err
	}
	st, err := sess.Open(req)
	if err != nil {
		return nil, err
	}
	return &agentProc{streamEnd: streamEnd{st}}, nil
}

// agentRunner starts a mode of the job runner other than "run" (which the agent's
// native runner serves, startJob) with args and env on the agent: on a spare runner
// started ahead of need (the script parsed already) when one is ready, the arguments
// and environment travelling on its stdin (jobs.sh, "spare").
func (s *agentLink) agentRunner(sess *agentwire.Session, args, env []string, stdin bool) (proc, error) {
	var prefix []byte
	field := func(v string) { prefix = append(append(prefix, v...), 0) }
	field(strconv.Itoa(len(env)))
	for _, e := range env {
		field(e)
	}
	field(strconv.Itoa(len(args)))
	for _, a := range args {
		field(a)
	}
	cmd, spareEnv := runnerExec([]string{"spare"}, nil)
	return s.agentStart(sess, agentwire.ExecRequest{Argv: cmd, Env: spareEnv,
		Dir: "/", Stdin: stdin, Spare: true, Prefix: prefix})
}

// agentExitCode waits up to wait for a command's end and returns its status.
func agentExitCode(ctx context.Context, st *agentwire.Stream, wait time.Duration) (int, bool) {
	if st == nil {
		return 0, false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-st.Done():
	case <-t.C:
	case <-ctx.Done():
	}
	return st.Status()
}

// streamEnd is what the connections carried by a stream share: writes go to channel 0,
// CloseWrite ends it, Close abandons the stream; a write deadline bounds the wait for
// the peer's credit, so a program that never reads cannot hold a writer.
type streamEnd struct{ st *agentwire.Stream }

func (c streamEnd) Write(p []byte) (int, error)       { return c.st.Write(agentwire.Stdin, p) }
func (c streamEnd) CloseWrite() error                 { return c.st.CloseChannel(agentwire.Stdin) }
func (c streamEnd) Close() error                      { return c.st.Close() }
func (c streamEnd) LocalAddr() net.Addr               { return agentAddr{} }
func (c streamEnd) SetReadDeadline(t time.Time) error { c.st.SetReadDeadline(t); return nil }
func (c streamEnd) SetWriteDeadline(t time.Time) error {
	c.st.SetWriteDeadline(t)
	return nil
}
func (c streamEnd) SetDeadline(t time.Time) error {
	c.st.SetReadDeadline(t)
	c.st.SetWriteDeadline(t)
	return nil
}

type agentAddr struct{}

func (agentAddr) Network() string { return "sandbox-agent" }
func (agentAddr) String() string  { return "sandbox-agent" }
