package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// version is the agent protocol version this binary speaks.
var version = strconv.Itoa(agentwire.Version)

// drainAfterExit is how long output is still read after a program has exited: what it
// wrote is in the pipe already; a process it left behind holding the pipe does not keep
// the stream open longer.
const drainAfterExit = 10 * time.Millisecond

// serveMain speaks the protocol over stdin and stdout until Caddy closes stdin. Programs
// it started keep running when it ends: jobs keep their state in files, not here.
func serveMain(args []string) int {
	raiseSlack()
	oneProcessor()
	undumpable()
	startReaper()
	makeThreads(spareThreads)
	growPipes()
	if err := serve(pollable(0, "stdin"), pollable(1, "stdout")); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-agent:", err)
		return 1
	}
	return 0
}

func serve(r io.Reader, w io.Writer) error {
	return agentwire.Serve(r, w, hello(""), handle)
}

// hello is the agent's greeting; token answers a direct channel's (OpChannel).
func hello(token string) agentwire.HelloMsg {
	return agentwire.HelloMsg{PID: os.Getpid(), Build: filepath.Base(os.Args[0]), Token: token}
}

func handle(st *agentwire.Stream) {
	req, err := agentwire.Decode(st.Request())
	if err != nil {
		st.Reset("bad request: " + err.Error())
		return
	}
	switch req := req.(type) {
	case *agentwire.ExecRequest:
		if len(req.Argv) == 0 {
			st.Reset("exec without a program")
			return
		}
		runExec(st, *req)
	case *agentwire.JobRequest:
		runJob(st, *req)
	case *agentwire.DialRequest:
		runDial(st, *req)
	case *agentwire.ListenRequest:
		runListen(st, *req)
	case *agentwire.ChannelRequest:
		runChannel(st, *req)
	case *agentwire.StatRequest, *agentwire.ReadRequest, *agentwire.WriteRequest, *agentwire.ListRequest, *agentwire.TarRequest:
		runFile(st, req)
	default:
		st.Reset(fmt.Sprintf("operation %q is not served here", req.Op()))
	}
}

// proc is a program the agent started.
type proc struct {
	cmd   *exec.Cmd
	pid   int
	outs  []*os.File     // what the agent reads: the pipes' or the terminal's side
	stdin io.WriteCloser // nil: the program reads /dev/null
	term  *os.File       // the terminal's master side, for a tty
	ended <-chan syscall.WaitStatus
}

// startProc starts req's program.
func startProc(req agentwire.ExecRequest) (*proc, error) {
	env := mergeEnv(baseEnv(), req.Env)
	cmd := &exec.Cmd{Path: lookPath(req.Argv[0], env), Args: req.Argv, Env: env, Dir: req.Dir}
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	p := &proc{cmd: cmd}
	var closeAfterStart []*os.File
	fail := func(err error) (*proc, error) {
		for _, f := range append(p.outs, closeAfterStart...) {
			f.Close()
		}
		if p.stdin != nil && p.term == nil {
			p.stdin.Close()
		}
		return nil, err
	}
	if req.TTY {
		m, s, err := openPTY()
		if err != nil {
			return fail(fmt.Errorf("opening a terminal: %w", err))
		}
		rows, cols := req.Rows, req.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		_ = setWinsize(m, rows, cols)
		p.term, p.outs, closeAfterStart = m, []*os.File{m}, []*os.File{s}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		if !hasEnv(req.Env, "TERM") {
			cmd.Env = mergeEnv(cmd.Env, []string{"TERM=dumb"})
		}
		if req.Stdin {
			p.stdin = m
		}
	} else {
		for range 2 {
			r, w, err := os.Pipe()
			if err != nil {
				return fail(err)
			}
			p.outs, closeAfterStart = append(p.outs, r), append(closeAfterStart, w)
		}
		cmd.Stdout, cmd.Stderr = closeAfterStart[0], closeAfterStart[1]
		if req.Stdin || req.Spare {
			r, w, err := os.Pipe()
			if err != nil {
				return fail(err)
			}
			cmd.Stdin, p.stdin, closeAfterStart = r, w, append(closeAfterStart, r)
		}
		// Its own process group: a command's `kill 0` does not reach the agent.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := startWithHangups(func() error { return startCmd(cmd) }); err != nil {
		return fail(err)
	}
	for _, f := range closeAfterStart {
		f.Close()
	}
	p.pid = cmd.Process.Pid
	p.ended = children.register(p.pid)
	return p, nil
}

// runExec runs one program and relays its stdin, output, signals and exit status.
func runExec(st *agentwire.Stream, req agentwire.ExecRequest) {
	var p *proc
	if req.Spare && !req.TTY {
		p = spares.take(req)
		// The next spare starts once this program has ended, not while it runs: in a
		// container held to one CPU it would take that CPU from this call.
		defer func() { go spares.fill(req) }()
	}
	if p == nil {
		var err error
		if p, err = startProc(req); err != nil {
			code := int32(agentwire.ExitCannotRun)
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
				code = agentwire.ExitNotFound
			}
			st.Write(agentwire.Stderr, []byte("sandbox-agent: "+err.Error()+"\n"))
			st.Exit(code)
			return
		}
	}
	pid := p.pid
	if req.TimeoutMS > 0 {
		t := time.AfterFunc(time.Duration(req.TimeoutMS)*time.Millisecond, func() { syscall.Kill(-pid, syscall.SIGKILL) })
		defer t.Stop()
	}

	var copies sync.WaitGroup
	var exited atomic.Bool
	for i, f := range p.outs {
		copies.Add(1)
		go func() {
			defer copies.Done()
			relayOutput(st, byte(i+1), f, &exited)
		}()
	}
	go relayInput(st, p.stdin, req.Prefix, req.Stdin, p.term != nil)
	go func() {
		for {
			select {
			case c := <-st.Controls():
				if c.Signal != 0 {
					syscall.Kill(-pid, syscall.Signal(c.Signal))
				} else if p.term != nil {
					_ = setWinsize(p.term, c.Rows, c.Cols)
				}
			case <-st.Done():
				return
			}
		}
	}()
	status := <-p.ended
	p.cmd.Process.Release()
	exited.Store(true)
	for _, f := range p.outs {
		_ = f.SetReadDeadline(time.Now().Add(drainAfterExit))
	}
	copies.Wait()
	for _, f := range p.outs {
		f.Close()
	}
	st.Exit(waitStatusCode(status))
}

// spares holds programs started ahead of need (a job runner that has read its script
// already, waiting for its request on stdin): one per request shape, a few shapes.
var spares = sparePool{ready: map[string]*proc{}, filling: map[string]bool{}}

const maxSpareShapes = 4

type sparePool struct {
	mu      sync.Mutex
	ready   map[string]*proc
	filling map[string]bool
}

// spareKey is what must match for a spare to serve a request.
func spareKey(req agentwire.ExecRequest) string {
	b, _ := json.Marshal([]any{req.Argv, req.Env, req.Dir})
	return string(b)
}

// take returns a running spare for req, or nil.
func (sp *sparePool) take(req agentwire.ExecRequest) *proc {
	key := spareKey(req)
	sp.mu.Lock()
	p := sp.ready[key]
	delete(sp.ready, key)
	sp.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.ended: // killed while it waited
		p.cmd.Process.Release()
		p.stdin.Close()
		for _, f := range p.outs {
			f.Close()
		}
		return nil
	default:
		return p
	}
}

// fill starts a spare for req unless one is ready or starting.
func (sp *sparePool) fill(req agentwire.ExecRequest) {
	key := spareKey(req)
	sp.mu.Lock()
	if sp.ready[key] != nil || sp.filling[key] || len(sp.ready)+len(sp.filling) >= maxSpareShapes {
		sp.mu.Unlock()
		return
	}
	sp.filling[key] = true
	sp.mu.Unlock()
	p, err := startProc(req)
	sp.mu.Lock()
	delete(sp.filling, key)
	if err == nil {
		sp.ready[key] = p
	}
	sp.mu.Unlock()
}

// relayOutput sends what f gives on channel ch until it ends; when the stream is gone it
// closes f, so the program's next write fails as it would on a closed pipe. Once the
// program has exited, it stops when nothing more comes for drainAfterExit (a process
// left behind may hold the pipe open), however long sending what came takes.
func relayOutput(st chunkWriter, ch byte, f *os.File, exited *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		if exited.Load() {
			_ = f.SetReadDeadline(time.Now().Add(drainAfterExit))
		}
		n, err := f.Read(buf)
		if n > 0 {
			if _, werr := st.Write(ch, buf[:n]); werr != nil {
				f.Close()
				return
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				readReady(f, buf, func(p []byte) bool {
					if _, err := st.Write(ch, p); err != nil {
						f.Close()
						return false
					}
					return true
				})
			}
			return
		}
	}
}

// chunkWriter is the stream's side relayOutput writes to.
type chunkWriter interface {
	Write(ch byte, p []byte) (int, error)
}

// maxReadyDrain bounds what readReady hands on: more than a pipe holds.
const maxReadyDrain = 8 << 20

// readReady hands send what f holds already, without waiting for more, until send
// says stop. A read deadline can fire before the runtime's poller has noticed bytes a
// program wrote before it exited: the read then fails at once, and without this its
// last words (an upload's name, a command's last line) would be lost.
func readReady(f *os.File, buf []byte, send func([]byte) bool) {
	_ = f.SetReadDeadline(time.Time{})
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for sent := 0; sent < maxReadyDrain; {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), buf)
			return true // never wait: only what is there
		}); err != nil || rerr != nil || n <= 0 {
			return
		}
		if !send(buf[:n]) {
			return
		}
		sent += n
	}
}

// relayInput writes prefix, then channel 0 (when the program reads it), to the
// program's stdin, closing it at the channel's end.
func relayInput(st *agentwire.Stream, stdin io.WriteCloser, prefix []byte, relay, isTerm bool) {
	if stdin == nil {
		return
	}
	if len(prefix) > 0 {
		if _, err := stdin.Write(prefix); err != nil {
			stdin.Close()
			return
		}
	}
	if !relay {
		stdin.Close()
		return
	}
	for {
		c, err := st.ReadChunk()
		if err != nil {
			break
		}
		if c.Ch != agentwire.Stdin {
			continue
		}
		if c.EOF {
			if isTerm {
				_, _ = stdin.Write([]byte{4}) // ^D: the terminal's end of input
				continue
			}
			stdin.Close()
			return
		}
		if _, err := stdin.Write(c.Data); err != nil {
			if !isTerm {
				stdin.Close()
			}
			return
		}
	}
	if !isTerm {
		stdin.Close()
	}
}

func waitStatusCode(ws syscall.WaitStatus) int32 {
	if ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(ws.ExitStatus())
}

// mergeEnv returns base with extra's entries added, an entry of extra replacing one of
// base with the same name.
func mergeEnv(base, extra []string) []string {
	if len(extra) == 0 {
		return base
	}
	out := make([]string, 0, len(base)+len(extra))
	seen := map[string]bool{}
	for _, e := range extra {
		seen[envName(e)] = true
	}
	for _, e := range base {
		if !seen[envName(e)] {
			out = append(out, e)
		}
	}
	return append(out, extra...)
}

func envName(e string) string {
	name, _, _ := strings.Cut(e, "=")
	return name
}

func hasEnv(env []string, name string) bool {
	for _, e := range env {
		if envName(e) == name {
			return true
		}
	}
	return false
}

// lookPath finds a program as the command's own PATH says, not the agent's.
func lookPath(name string, env []string) string {
	if strings.Contains(name, "/") {
		return name
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return name
}
