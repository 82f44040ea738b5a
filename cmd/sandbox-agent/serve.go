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
	startReaper()
	makeThreads(spareThreads)
	if err := serve(pollable(0, "stdin"), pollable(1, "stdout")); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-agent:", err)
		return 1
	}
	return 0
}

func serve(r io.Reader, w io.Writer) error {
	hello := agentwire.HelloMsg{PID: os.Getpid(), Build: filepath.Base(os.Args[0])}
	return agentwire.Serve(r, w, hello, handle)
}

func handle(st *agentwire.Stream) {
	var req agentwire.Request
	if err := json.Unmarshal(st.Request(), &req); err != nil {
		st.Reset("bad request: " + err.Error())
		return
	}
	switch req.Op {
	case agentwire.OpExec:
		if len(req.Argv) == 0 {
			st.Reset("exec without a program")
			return
		}
		runExec(st, req)
	default:
		st.Reset(fmt.Sprintf("unknown operation %q", req.Op))
	}
}

// runExec runs one program and relays its stdin, output, signals and exit status.
func runExec(st *agentwire.Stream, req agentwire.Request) {
	env := mergeEnv(os.Environ(), req.Env)
	cmd := &exec.Cmd{Path: lookPath(req.Argv[0], env), Args: req.Argv, Env: env, Dir: req.Dir}
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	var outs []*os.File // what the agent reads: the pipes' or the terminal's side
	var stdin io.WriteCloser
	var term *os.File
	var closeAfterStart []*os.File
	fail := func(err error) {
		for _, f := range append(outs, closeAfterStart...) {
			f.Close()
		}
		code := int32(agentwire.ExitCannotRun)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
			code = agentwire.ExitNotFound
		}
		st.Write(agentwire.Stderr, []byte("sandbox-agent: "+err.Error()+"\n"))
		st.Exit(code)
	}
	if req.TTY {
		m, s, err := openPTY()
		if err != nil {
			fail(fmt.Errorf("opening a terminal: %w", err))
			return
		}
		rows, cols := req.Rows, req.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		_ = setWinsize(m, rows, cols)
		term, outs, closeAfterStart = m, []*os.File{m}, []*os.File{s}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		if !hasEnv(req.Env, "TERM") {
			cmd.Env = mergeEnv(cmd.Env, []string{"TERM=dumb"})
		}
		if req.Stdin {
			stdin = m
		}
	} else {
		for range 2 {
			r, w, err := os.Pipe()
			if err != nil {
				fail(err)
				return
			}
			outs, closeAfterStart = append(outs, r), append(closeAfterStart, w)
		}
		cmd.Stdout, cmd.Stderr = closeAfterStart[0], closeAfterStart[1]
		if req.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				fail(err)
				return
			}
			cmd.Stdin, stdin, closeAfterStart = r, w, append(closeAfterStart, r)
		}
		// Its own process group: a command's `kill 0` does not reach the agent.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		if stdin != nil && stdin != term {
			stdin.Close()
		}
		fail(err)
		return
	}
	for _, f := range closeAfterStart {
		f.Close()
	}
	pid := cmd.Process.Pid
	ended := children.register(pid)
	if req.TimeoutMS > 0 {
		t := time.AfterFunc(time.Duration(req.TimeoutMS)*time.Millisecond, func() { syscall.Kill(-pid, syscall.SIGKILL) })
		defer t.Stop()
	}

	var copies sync.WaitGroup
	for i, f := range outs {
		copies.Add(1)
		go func() {
			defer copies.Done()
			relayOutput(st, byte(i+1), f)
		}()
	}
	go relayInput(st, stdin)
	go func() {
		for {
			select {
			case c := <-st.Controls():
				if c.Signal != 0 {
					syscall.Kill(-pid, syscall.Signal(c.Signal))
				} else if term != nil {
					_ = setWinsize(term, c.Rows, c.Cols)
				}
			case <-st.Done():
				return
			}
		}
	}()
	status := <-ended
	cmd.Process.Release()
	for _, f := range outs {
		_ = f.SetReadDeadline(time.Now().Add(drainAfterExit))
	}
	copies.Wait()
	for _, f := range outs {
		f.Close()
	}
	st.Exit(waitStatusCode(status))
}

// relayOutput sends what f gives on channel ch until it ends; when the stream is gone it
// closes f, so the program's next write fails as it would on a closed pipe.
func relayOutput(st *agentwire.Stream, ch byte, f *os.File) {
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if _, werr := st.Write(ch, buf[:n]); werr != nil {
				f.Close()
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// relayInput writes channel 0 to the program's stdin, closing it at the channel's end.
func relayInput(st *agentwire.Stream, stdin io.WriteCloser) {
	for {
		c, err := st.ReadChunk()
		if err != nil {
			break
		}
		if c.Ch != agentwire.Stdin || stdin == nil {
			continue
		}
		if c.EOF {
			if f, ok := stdin.(*os.File); ok && isTerminalMaster(f) {
				f.Write([]byte{4}) // ^D: the terminal's end of input
				continue
			}
			stdin.Close()
			stdin = nil
			continue
		}
		if _, err := stdin.Write(c.Data); err != nil {
			stdin.Close()
			stdin = nil
		}
	}
	if stdin != nil {
		if f, ok := stdin.(*os.File); !ok || !isTerminalMaster(f) {
			stdin.Close()
		}
	}
}

func isTerminalMaster(f *os.File) bool { return f.Name() == "/dev/ptmx" }

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
