package main

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// jobsMain is the runner of the jobs the agent starts (job.go), a process of its own so
// that a job's status is written when the agent is gone (killed, replaced by a new
// version, its Caddy stopped):
//
//	sandbox-agent jobs
//
// It reads one job a line on stdin, as JSON ({"args": [<dir>, <id>, <timeout s>,
// <interactive 0|1>, <tty 0|1>, <cwd>, <env|stdin>], "env": [...]}), and for each
// starts the command (bash -c "$MCP_SANDBOX_CMD", or bash <id>.cmd), under the pty
// holder "$MCP_SANDBOX_AGENT pty" for a tty job, in a process group of its own; kills
// the group at the timeout; waits for it; hands what it left holding its output over to
// a job of its own, as jobs.sh does; writes .exit; then writes "done <id>" on fd 3. For
// an interactive job it writes "open <id>" once it holds the input FIFO open (or could
// not): the agent holds it until then (openInput). A line may instead ask it to serve
// the agent's direct channel (runnerLine): the jobs asked for there it starts itself.
// At the end of stdin (the agent is gone) it closes those channels, takes no more jobs
// and exits once those it runs have ended. It execs nothing but the commands, what the
// requests on its channels start, and itself once, at its start (raiseSlack).
func jobsMain(args []string) int {
	if len(args) > 1 || len(args) == 1 && args[0] != announceArg {
		fmt.Fprintln(os.Stderr, "usage: sandbox-agent jobs ["+announceArg+"]")
		return 2
	}
	raiseSlack()
	oneProcessor()
	// It may serve a direct channel (runnerLine): as the agent, nothing else in the
	// container traces it or reads its memory.
	undumpable()
	startReaper()
	// Threads made now, while the container has room: a fork bomb may leave none later.
	makeThreads(spareThreads)
	// Commands inherit this (as from jobs.sh's trap '' HUP); SIGPIPE stays as it is, so
	// that `yes | head` ends. Writes to fd 3 fail with EPIPE once the agent is gone.
	signal.Ignore(syscall.SIGHUP)
	// Not passed on: what a command leaves running must not hold the agent's pipe.
	syscall.CloseOnExec(3)
	events := os.NewFile(3, "events")
	if len(args) == 1 {
		defer announce(events)()
	}
	here := &localRunner{conns: map[net.Conn]struct{}{}}
	jobRunner.becomeLocal(here)
	var mu sync.Mutex
	event := func(ev string) {
		mu.Lock()
		_, _ = events.Write([]byte(ev + "\n"))
		mu.Unlock()
	}
	in := bufio.NewScanner(pollable(0, "stdin"))
	in.Buffer(make([]byte, 64<<10), 4<<20)
	for in.Scan() {
		var req runnerLine
		if json.Unmarshal(in.Bytes(), &req) != nil {
			continue
		}
		if req.Channel != "" {
			if validRef(req.Ref) {
				here.serveChannel(req.Channel, req.Token, req.Env, func(err error) {
					if err != nil {
						event("channel " + req.Ref + " " + oneLine(err.Error()))
					} else {
						event("channel " + req.Ref + " ok")
					}
				})
			}
			continue
		}
		w, timeout, ok := newJob(req.Args, req.Env)
		if !ok {
			continue
		}
		here.run(func() {
			w.run(timeout, func() { event("open " + w.id) }, func() { event("done " + w.id) })
		})
	}
	// The agent is gone: its channels end with it, and the jobs run to their end.
	here.end()
	return 0
}

// runnerLine is one line of a runner's stdin: a job (Args and Env, see jobsMain), or
// a direct channel (agentwire.OpChannel) that the runner dials and serves in the
// agent's place, so that a job it runs is one process away from Caddy, not two. The
// runner answers a channel on fd 3, "channel <ref> ok" or "channel <ref> <why not>";
// Env is then the agent's environment, which the channel's requests start from.
type runnerLine struct {
	Args    []string `json:"args,omitempty"`
	Env     []string `json:"env,omitempty"`
	Channel string   `json:"channel,omitempty"`
	Token   string   `json:"token,omitempty"`
	Ref     string   `json:"ref,omitempty"`
}

// newJob makes the waiter of a job line and its timeout; ok is false for a line that
// is not one.
func newJob(a, env []string) (*waiter, time.Duration, bool) {
	if len(a) != 7 || !validID(a[1]) {
		return nil, 0, false
	}
	secs, err := strconv.ParseFloat(a[2], 64)
	if err != nil || secs < 0 {
		return nil, 0, false
	}
	w := &waiter{dir: a[0], id: a[1], d: a[0] + "/" + a[1], cwd: a[5],
		interactive: a[3] == "1", tty: a[4] == "1", fromFile: a[6] == "stdin"}
	for _, e := range env {
		switch name, v, _ := strings.Cut(e, "="); name {
		case "MCP_SANDBOX_CMD":
			w.cmd = v
		case "MCP_SANDBOX_AGENT":
			w.agent = v
		default:
			w.env = append(w.env, e)
		}
	}
	return w, time.Duration(secs * float64(time.Second)), true
}

// localRunner is what a runner holds: the jobs it runs and the channels it serves.
type localRunner struct {
	mu       sync.Mutex
	running  sync.WaitGroup
	ending   bool
	conns    map[net.Conn]struct{}
	agentEnv []string // the environment of the agent whose channel it serves
}

// run runs f (a job) in a goroutine of its own, unless the runner is ending.
func (l *localRunner) run(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ending {
		return false
	}
	l.running.Add(1)
	go func() {
		defer l.running.Done()
		f()
	}()
	return true
}

// env is the environment a channel's requests start from: the agent's.
func (l *localRunner) env() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.agentEnv != nil {
		return l.agentEnv
	}
	return os.Environ()
}

// serveChannel dials the socket at path and serves a session over it, as the agent
// does (runChannel); dialed is called with the dial's outcome first.
func (l *localRunner) serveChannel(path, token string, env []string, dialed func(error)) {
	go func() {
		conn, err := dialChannel(path)
		if err != nil {
			dialed(err)
			return
		}
		l.mu.Lock()
		if l.ending {
			l.mu.Unlock()
			conn.Close()
			dialed(errors.New("the job runner is ending"))
			return
		}
		l.conns[conn] = struct{}{}
		if env != nil {
			l.agentEnv = env
		}
		l.mu.Unlock()
		dialed(nil)
		serveChannel(conn, token)
		l.mu.Lock()
		delete(l.conns, conn)
		l.mu.Unlock()
	}()
}

// end takes no more jobs, closes the channels and waits for the jobs that run.
func (l *localRunner) end() {
	l.mu.Lock()
	l.ending = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.running.Wait()
}

// validRef reports whether s can name a channel's answer: short, of letters and digits.
func validRef(s string) bool {
	return s != "" && len(s) <= 32 && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789") == ""
}

// oneLine is s on one line.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

type waiter struct {
	dir, id, d, cwd string
	interactive     bool
	tty, fromFile   bool
	cmd, agent      string
	env             []string
}

// beforeInputHold, when set (by tests), runs before a job's runner opens its input
// FIFO: a runner slow to start.
var beforeInputHold func()

// run runs the job to its end, calls opened once it holds an interactive job's input
// FIFO (or could not), and finished once its status is written; see jobsMain.
func (w *waiter) run(timeout time.Duration, opened, finished func()) {
	d := w.d
	var hold *os.File // the FIFO held open, so input written before the command reads waits in it
	// Opened by bare calls (openNoBlock): the command's files are passed on, never
	// read here, so the runtime's poller has nothing to do with them.
	stdin, _ := openNoBlock(os.DevNull, syscall.O_RDONLY, 0)
	if w.interactive {
		if beforeInputHold != nil {
			beforeInputHold()
		}
		if fi, err := os.Stat(d + ".in"); err == nil && fi.Mode()&fs.ModeNamedPipe != 0 {
			if h, err := os.OpenFile(d+".in", os.O_RDWR, 0); err == nil {
				if r, err := os.OpenFile(d+".in", os.O_RDONLY, 0); err == nil {
					stdin.Close()
					hold, stdin = h, r
				} else {
					h.Close()
				}
			}
		}
		opened()
	}
	argv := []string{"bash", "-c", w.cmd}
	if w.fromFile {
		argv = []string{"bash", d + ".cmd"}
	}
	if w.tty {
		_ = touch(d + ".tty")
		argv = append([]string{w.agent, "pty", "--"}, argv...)
	}
	e := 127
	c := 0
	var ended <-chan syscall.WaitStatus
	out, err1 := runnerBlanks.openFresh(w.dir, d+".out")
	errf, err2 := runnerBlanks.openFresh(w.dir, d+".err")
	if err := errors.Join(err1, err2); err == nil {
		env := w.env
		cmd, err := startRetrying(func() *exec.Cmd {
			return &exec.Cmd{Path: lookPath(argv[0], env), Args: argv, Env: env, Dir: w.cwd,
				Stdin: stdin, Stdout: out, Stderr: errf, SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
		}, nil)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, exec.ErrNotFound) {
				e = 126
			}
			fmt.Fprintf(errf, "sandbox-agent: %v\n", err)
		} else {
			c = cmd.Process.Pid
			ended = children.register(c)
			cmd.Process.Release()
			_ = runnerBlanks.placeFile(w.dir, d+".pid", strconv.Itoa(c)+"\n")
		}
	}
	for _, f := range []*os.File{out, errf, stdin} {
		if f != nil {
			f.Close()
		}
	}
	// The timeout: the job's group is killed, and what it left holding its output
	// (noted in .held) is killed at it too.
	timedOut := make(chan struct{})
	timer := time.AfterFunc(timeout, func() {
		_ = touch(d + ".timedout")
		killJob(d, w.id)
		close(timedOut)
	})
	if ended != nil {
		e = int(waitStatusCode(<-ended))
	}
	if hold != nil {
		hold.Close()
	}
	// Input nobody will read: a writer still waiting on the pipe goes too. One that
	// has written all of it (the input the command ended on) is given 0.5 s to end by
	// itself, so that its input counts as sent; with the pipe's read end closed here,
	// one still waiting ends at once, unless a process left behind holds it.
	if w.interactive {
		for i := 0; i < 10; i++ {
			if _, ok := inputWriter(d, w.id); !ok {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if wp, ok := inputWriter(d, w.id); ok {
			syscall.Kill(wp, syscall.SIGKILL)
		}
	}
	held, handed := 0, ""
	if groupAlive(c) {
		held = w.heldBy(c)
		if held != 0 {
			if b, ok := w.handover(c, held); ok {
				held, handed = 0, b
			}
		}
		if held != 0 {
			_ = writeFile(d+".held", strconv.Itoa(held)+"\n")
		}
	}
	if held == 0 {
		timer.Stop()
	}
	_ = runnerBlanks.placeFile(w.dir, d+".exit", strconv.Itoa(e)+" "+epochReal(time.Now())+"\n")
	finished()
	switch {
	case handed != "":
		watch(w.dir, handed, c)
	case held != 0:
		<-timedOut
	}
}

// heldBy returns a process the command left behind that still holds its output open
// 0.2 s after it ended, or 0. One scan can miss processes that live for moments (a
// command that forks and exits, over and over): while the group lives on and a scan
// finds no process of it that stays without the output, the scan is repeated, and after
// 2 s the leftovers count as holding it (jobs.sh does the same).
func (w *waiter) heldBy(c int) int {
	o := outputOf(w.d)
	held, seen := 0, 0
	for i := 0; i < 20; i++ {
		held = 0
		quiet := false
		for _, p := range pids() {
			if o.holds(p) {
				held, seen = p, p
				break
			}
			// Read after the check: a member still there had no output open.
			if !quiet {
				if st, ok := readStat(p); ok && st.pgrp == c && st.state != "Z" {
					quiet = true
				}
			}
		}
		if held == 0 {
			if quiet || !groupAlive(c) {
				break
			}
			held = seen
			if held == 0 {
				held = c
			}
		} else if i >= 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return held
}

// handover makes what the command left running with its output open (its process
// group, and the processes holding the output, pid among them) a job of its own with no
// timeout, whose runner is this process (watch), and records it in .bg.
func (w *waiter) handover(c, pid int) (string, bool) {
	if exists(w.d + ".timedout") {
		return "", false
	}
	t0 := epochReal(time.Now())
	me := runnerName(os.Getpid())
	var b string
	for range 3 {
		var r [2]byte
		_, _ = rand.Read(r[:])
		b = fmt.Sprintf("j%08x%04x", uint32(time.Now().Unix()), binary.BigEndian.Uint16(r[:]))
		f, err := os.OpenFile(w.dir+"/"+b+".meta", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if err == nil {
			_, err = fmt.Fprintf(f, "%s 0 0 %s %s\n", t0, me, w.cwd)
			f.Close()
			if err == nil {
				break
			}
		}
		b = ""
	}
	if b == "" {
		return "", false
	}
	off, err := os.OpenFile(w.d+".off", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o666)
	if err != nil {
		return "", false
	}
	off.Close()
	if writeFile(w.dir+"/"+b+".pid", strconv.Itoa(c)+"\n") != nil || writeFile(w.dir+"/"+b+".from", w.id+"\n") != nil {
		return "", false
	}
	cmd, _ := cmdline(pid)
	if cmd == "" {
		cmd = w.cmd
	}
	_ = writeFile(w.dir+"/"+b+".meta", fmt.Sprintf("%s 0 0 %s %s\n%s\n", t0, me, w.cwd, clip(cmd, 300)))
	hex := fmt.Sprintf("%x", clip(cmd, 80))
	if writeFile(w.d+".bg", b+" "+strconv.Itoa(pid)+" "+hex+"\n") != nil {
		return "", false
	}
	return b, true
}

// clip returns the first n bytes of s.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// watch is the runner of a job handed over (jobs.sh's watch): it ends when no process
// of the group pg runs and none holds the output. Their exit codes are not known: 0, or
// 137 when killed. A group that keeps the container at its process limit (a fork bomb)
// is killed after 3 s of it. Its files are links to those of the job it took over from
// (delivered offsets shared), made once the container has room.
func watch(dir, id string, pg int) {
	d := dir + "/" + id
	o := id
	if line, ok := firstLine(d + ".from"); ok && validID(line) {
		o = line
	}
	linked := false
	links := func() {
		for _, ext := range []string{".out", ".err", ".off"} {
			os.Remove(d + ext)
			if os.Link(dir+"/"+o+ext, d+ext) != nil {
				return
			}
		}
		linked = true
	}
	if !full(pg) {
		links()
	}
	f := 0
	for groupAlive(pg) || holdsAny(d) {
		if full(pg) {
			if f++; f >= 10 {
				killJob(d, id)
			}
		} else {
			f = 0
			if !linked {
				links()
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !linked {
		links()
	}
	e := 0
	if exists(d+".killed") || f >= 10 {
		e = 137
	}
	_ = writeFile(d+".exit", strconv.Itoa(e)+" "+epochReal(time.Now())+"\n")
}

// holdsAny reports whether a process holds the job's output.
func holdsAny(d string) bool {
	o := outputOf(d)
	for _, p := range pids() {
		if o.holds(p) {
			return true
		}
	}
	return false
}

// validID reports whether id has the form of a job id (j and 12 hex digits).
func validID(id string) bool {
	if len(id) != 13 || id[0] != 'j' {
		return false
	}
	return strings.Trim(id[1:], "0123456789abcdef") == ""
}
