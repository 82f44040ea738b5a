package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// The native job runner: a JobRequest is what jobs.sh's "run" mode does, done by the
// agent without starting bash for the runner (sandbox/testdata/jobs holds the cases both
// must answer alike, byte for byte).
// It claims the job's id, starts the job's own runner ("sandbox-agent job", jobwait.go,
// which outlives the agent), waits as asked and answers in jobs.sh's format (an MCPJOB1
// header, then the output on channels 1 and 2). The files it writes are those of
// jobs.sh, so the fallback (one Docker exec per call running jobs.sh) follows, feeds
// and kills a job started here, and the other way round.

// runJob serves an OpJob request.
func runJob(st *agentwire.Stream, req agentwire.JobRequest) {
	a, err := checkJob(req)
	if err != nil {
		st.Reset("bad job request: " + err.Error())
		return
	}
	answer := func(why string) {
		st.Write(agentwire.Stdout, []byte("MCPJOB1 "+why+"\n"))
		st.Exit(0)
	}
	fail := func(err error) {
		st.Write(agentwire.Stderr, []byte("sandbox-agent: "+err.Error()+"\n"))
		st.Exit(3)
	}
	command, agent := req.Command, req.Agent
	env := mergeEnv(baseEnv(), req.Env)
	if v := bashVersion(env); v != "" {
		answer("oldbash " + v)
		return
	}
	if a.tty {
		if fi, err := os.Stat(agent); agent == "" || err != nil || fi.Mode()&0o111 == 0 {
			answer("notty")
			return
		}
	}
	if err := os.MkdirAll(a.dir, 0o777); err != nil {
		fail(err)
		return
	}
	if err := syscall.Mkfifo(a.dir+"/.tick", 0o666); err != nil && err != syscall.EEXIST {
		fail(fmt.Errorf("making %s/.tick: %w", a.dir, err))
		return
	}
	if fi, err := os.Stat(a.cwd); err != nil || !fi.IsDir() || syscall.Access(a.cwd, 1) != nil {
		answer("nocwd")
		return
	}
	d := a.dir + "/" + a.id
	// Claim the id (another call may have drawn the same one): .meta names the agent
	// as the runner until the job's own starts.
	t0 := epochReal(time.Now())
	inter := "0"
	if a.interactive {
		inter = "1"
	}
	meta := func(runner string) string {
		return t0 + " " + a.timeout + " " + inter + " " + runner + " " + a.cwd + "\n"
	}
	// With the runner known and the command at hand, .meta is written whole at once.
	claim, known := meta(agentName()), ""
	if !a.fromStdin {
		if known = jobRunner.current(); known != "" {
			claim = meta(known) + clip(command, 300) + "\n"
		}
	}
	if taken, err := agentBlanks.claimFile(a.dir, d+".meta", claim); taken {
		answer("taken")
		return
	} else if err != nil {
		fail(err)
		return
	}
	preview := command
	if a.fromStdin {
		if err := readCommand(st, d+".cmd"); err != nil {
			fail(err)
			return
		}
		if b, err := readSmall(d+".cmd", 300); err == nil {
			preview = string(b)
		}
	}
	// The input FIFO exists, held open, before the answer: job_input may come at once.
	var hold *os.File
	if a.interactive {
		hold = openInput(d + ".in")
	}
	// As under jobs.sh, whose bash changed into cwd from /, the runner's directory.
	jenv := mergeEnv(env, []string{"MCP_SANDBOX_CMD=" + command, "MCP_SANDBOX_AGENT=" + agent, "PWD=" + a.cwd, "OLDPWD=/", shlvl(env)})
	tty := "0"
	if a.tty {
		tty = "1"
	}
	src := "env"
	if a.fromStdin {
		src = "stdin"
	}
	runner, ended, err := jobRunner.start([]string{a.dir, a.id, a.timeout, inter, tty, a.cwd, src}, jenv, hold, st.Done())
	if err != nil {
		if hold != nil {
			hold.Close()
		}
		// The job ends here: nothing runs it.
		_ = writeFile(d+".exit", "126 "+epochReal(time.Now())+"\n")
		fail(fmt.Errorf("starting the job's runner: %w", err))
		return
	}
	if runner != known {
		_ = replaceFile(d+".meta", meta(runner)+clip(preview, 300)+"\n")
	}
	state := "running"
	switch {
	case a.wait < 0:
		select {
		case <-ended:
			state = "done"
		case <-st.Done():
			return
		}
	case a.wait > 0:
		t := time.NewTimer(a.wait)
		select {
		case <-ended:
			state = "done"
		case <-t.C:
		case <-st.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
	emit(st, a.dir, a.id, state, a.head, a.tail)
	st.Exit(0)
}

// jobArgs is a JobRequest checked, in the forms the job's files and runner take.
type jobArgs struct {
	dir, id          string
	timeout          string // seconds with three decimals, as .meta and the listing show it
	wait             time.Duration
	interactive, tty bool
	cwd              string
	head, tail       int64
	fromStdin        bool
}

// checkJob checks a job request; wait is -1 for "to the end".
func checkJob(r agentwire.JobRequest) (jobArgs, error) {
	a := jobArgs{dir: r.JobsDir, id: r.ID, interactive: r.Interactive, tty: r.TTY, cwd: r.Cwd,
		head: r.Head, tail: r.Tail, fromStdin: r.CommandOnStdin}
	if !strings.HasPrefix(a.dir, "/") || !validID(a.id) || a.cwd == "" {
		return a, errors.New("bad directory, id or cwd")
	}
	if r.TimeoutMS < 0 || r.WaitMS < -1 || a.head < 0 || a.tail < 0 {
		return a, errors.New("bad timeout, wait, head or tail")
	}
	a.timeout = strconv.FormatInt(r.TimeoutMS/1000, 10) + "." + leftPad(strconv.FormatInt(r.TimeoutMS%1000, 10), 3)
	a.wait = time.Duration(r.WaitMS) * time.Millisecond
	if r.WaitMS < 0 {
		a.wait = -1
	}
	return a, nil
}

// startRetrying starts the command newCmd makes, trying again for up to 30 s while the
// container is at its process limit (a fork bomb that its job's runner kills soon), as
// bash does.
func startRetrying(newCmd func() *exec.Cmd, stop <-chan struct{}) (*exec.Cmd, error) {
	wait := 50 * time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	for {
		cmd := newCmd()
		hangups.RLock()
		err := startCmd(cmd)
		hangups.RUnlock()
		if !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			return cmd, err
		}
		select {
		case <-time.After(wait):
		case <-stop:
			return cmd, err
		}
		wait = min(2*wait, time.Second)
	}
}

// openInput makes a job's input FIFO and returns it held open for reading and writing
// (nil when it could not be opened). A FIFO that nobody holds open drops what was
// written to it as its last holder closes it (and a writer alone gets EPIPE), so input
// sent before the job's runner has opened the FIFO would be lost: the agent holds it
// until the runner does (runnerProc). It is made under another name and moved in
// place once held, so no call finds it without a holder.
func openInput(path string) *os.File {
	tmp := path + ".new"
	if err := syscall.Mkfifo(tmp, 0o666); err != nil {
		_ = syscall.Mkfifo(path, 0o666)
		return nil
	}
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		f = nil
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		if f != nil {
			f.Close()
		}
		_ = syscall.Mkfifo(path, 0o666)
		return nil
	}
	return f
}

// jobRunner is the agent's runner of jobs, "sandbox-agent jobs" (jobwait.go).
var jobRunner = &runnerProc{}

// runnerProc starts jobs on a runner process, starting one when none runs. In the
// runner itself (local set), it runs them in this process.
type runnerProc struct {
	mu      sync.Mutex
	name    string // the runner as .meta names it; "" when none runs
	stdin   *os.File
	waiting map[string]*pending    // by job id
	asked   map[string]chan string // channels handed to the runner, by ref: its answer
	refs    int
	local   *localRunner
}

// becomeLocal makes r the runner of this process, a runner.
func (r *runnerProc) becomeLocal(l *localRunner) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.local, r.name = l, runnerName(os.Getpid())
}

// pending is a job handed to the runner.
type pending struct {
	done chan struct{} // closed at "done <id>"
	hold *os.File      // the job's input FIFO, held until "open <id>" (the runner holds it then); nil when none
}

// release closes the job's input FIFO, which the runner holds now (or never will).
func (p *pending) release() {
	if p.hold != nil {
		p.hold.Close()
		p.hold = nil
	}
}

// start hands a job to the runner and returns the runner's name and a channel closed
// when the job's status is written (or the runner is gone). hold (may be nil) is the
// job's input FIFO held open: it is closed once the runner holds it, or is gone; it
// is the caller's to close when start fails.
func (r *runnerProc) start(args, env []string, hold *os.File, stop <-chan struct{}) (string, <-chan struct{}, error) {
	if r.local != nil {
		w, timeout, ok := newJob(args, env)
		if !ok {
			return "", nil, errors.New("not a job")
		}
		p := &pending{done: make(chan struct{}), hold: hold}
		finished := func() {
			p.release()
			close(p.done)
		}
		if !r.local.run(func() { w.run(timeout, p.release, finished) }) {
			return "", nil, errors.New("the job runner is ending")
		}
		return r.name, p.done, nil
	}
	line, err := json.Marshal(runnerLine{Args: args, Env: env})
	if err != nil {
		return "", nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := &pending{done: make(chan struct{}), hold: hold}
	err = r.send(line, stop, func() func() {
		waiting := r.waiting
		waiting[args[1]] = p
		return func() { delete(waiting, args[1]) }
	})
	if err != nil {
		return "", nil, err
	}
	return r.name, p.done, nil
}

// send writes line to the runner, starting one when none runs; r.mu is held. note
// records what the line asks in the runner's maps before it is written, and returns
// how to take it back. A runner that cannot be written to is gone (killed, and follow
// has not seen it yet): it is dropped and the line sent once more, to a new one.
func (r *runnerProc) send(line []byte, stop <-chan struct{}, note func() (undo func())) error {
	line = append(line, '\n')
	for attempt := 0; ; attempt++ {
		if r.name == "" {
			if err := r.launch(stop); err != nil {
				return err
			}
		}
		undo := note()
		_, err := r.stdin.Write(line)
		if err == nil {
			return nil
		}
		undo()
		if attempt > 0 {
			return err
		}
		r.stdin.Close()
		r.name, r.stdin, r.waiting, r.asked = "", nil, nil, nil
	}
}

// errRunnerDial is the runner's failure to dial a channel's socket.
type errRunnerDial struct{ why string }

func (e errRunnerDial) Error() string { return e.why }

// channelAnswer bounds the wait for the runner's answer to a channel.
const channelAnswer = channelDialTimeout + time.Second

// channel hands the direct channel at path to the runner, starting one when none
// runs. The error is an errRunnerDial when the runner could not dial; any other means
// that no runner took it.
func (r *runnerProc) channel(path, token string, stop <-chan struct{}) error {
	err := r.channelOnce(path, token, stop)
	var dial errRunnerDial
	if errors.As(err, &dial) && dial.why == runnerEnded {
		// It died before it answered (killed as the channel before it ended): a new one.
		err = r.channelOnce(path, token, stop)
	}
	return err
}

// runnerEnded is the answer to what was asked of a runner that ended first.
const runnerEnded = "the job runner ended"

func (r *runnerProc) channelOnce(path, token string, stop <-chan struct{}) error {
	r.mu.Lock()
	r.refs++
	ref := "c" + strconv.Itoa(r.refs)
	line, err := json.Marshal(runnerLine{Channel: path, Token: token, Ref: ref, Env: os.Environ()})
	if err != nil {
		r.mu.Unlock()
		return err
	}
	answer := make(chan string, 1)
	var asked map[string]chan string
	err = r.send(line, stop, func() func() {
		asked = r.asked
		asked[ref] = answer
		return func() { delete(asked, ref) }
	})
	r.mu.Unlock()
	if err != nil {
		return err
	}
	t := time.NewTimer(channelAnswer)
	defer t.Stop()
	select {
	case why := <-answer:
		if why == "ok" {
			return nil
		}
		return errRunnerDial{why}
	case <-t.C:
	case <-stop:
	}
	r.mu.Lock()
	delete(asked, ref)
	r.mu.Unlock()
	return errors.New("the job runner did not answer")
}

// current is the name of the runner that runs now, or "".
func (r *runnerProc) current() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.name
}

// launch starts a runner; r.mu is held. The container's main process starts it when it
// takes requests (spawn.go), so that it and its jobs outlive a save of the container's
// memory; else this agent does.
func (r *runnerProc) launch(stop <-chan struct{}) error {
	fromInit, initEvents, initPid, err := launchFromInit(stop)
	if err == nil {
		r.started(runnerName(initPid), initEvents, fromInit)
		return nil
	}
	select {
	case <-stop:
		return err // whoever asked is gone: no runner of the agent's own for nobody
	default:
	}
	in, feed, err := os.Pipe()
	if err != nil {
		return err
	}
	events, w, err := os.Pipe()
	if err != nil {
		in.Close()
		feed.Close()
		return err
	}
	devnull, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	cmd, err := startRetrying(func() *exec.Cmd {
		// Its own process group, in /: no job's kill or cwd reaches it.
		return &exec.Cmd{Path: "/proc/self/exe", Args: []string{os.Args[0], "jobs"}, Dir: "/",
			Stdin: in, Stdout: devnull, Stderr: devnull, ExtraFiles: []*os.File{w},
			SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	}, stop)
	in.Close()
	w.Close()
	if devnull != nil {
		devnull.Close()
	}
	if err != nil {
		feed.Close()
		events.Close()
		return err
	}
	pid := cmd.Process.Pid
	children.register(pid) // reaped when it ends
	cmd.Process.Release()
	r.started(runnerName(pid), events, feed)
	return nil
}

// started records a runner that runs now; r.mu is held.
func (r *runnerProc) started(name string, events, feed *os.File) {
	waiting, asked := map[string]*pending{}, map[string]chan string{}
	r.name, r.stdin, r.waiting, r.asked = name, feed, waiting, asked
	go r.follow(events, feed, waiting, asked)
}

// follow reads a runner's "open <id>", "done <id>" and "channel <ref> <answer>"
// lines; when it is gone, the jobs it ran are answered for as they stand (lost, unless
// their status was written), and the channels it was asked for are refused.
func (r *runnerProc) follow(events, feed *os.File, waiting map[string]*pending, asked map[string]chan string) {
	sc := bufio.NewScanner(events)
	for sc.Scan() {
		ev, id, _ := strings.Cut(sc.Text(), " ")
		r.mu.Lock()
		if ev == "channel" {
			ref, why, _ := strings.Cut(id, " ")
			if c := asked[ref]; c != nil {
				c <- why
				delete(asked, ref)
			}
		} else if p := waiting[id]; p != nil {
			switch ev {
			case "open":
				p.release()
			case "done":
				p.release()
				close(p.done)
				delete(waiting, id)
			}
		}
		r.mu.Unlock()
	}
	events.Close()
	r.mu.Lock()
	for id, p := range waiting {
		p.release()
		close(p.done)
		delete(waiting, id)
	}
	for ref, c := range asked {
		c <- runnerEnded
		delete(asked, ref)
	}
	if r.stdin == feed {
		r.name, r.stdin, r.waiting, r.asked = "", nil, nil, nil
	}
	r.mu.Unlock()
	feed.Close()
}

// readCommand writes what comes on channel 0 to path.
func readCommand(st *agentwire.Stream, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return err
	}
	for {
		c, err := st.ReadChunk()
		if err != nil {
			f.Close()
			return fmt.Errorf("reading the command: %w", err)
		}
		if c.Ch != agentwire.Stdin {
			continue
		}
		if c.EOF {
			return f.Close()
		}
		if _, err := f.Write(c.Data); err != nil {
			f.Close()
			return err
		}
	}
}

// replaceFile writes a file whole under a temporary name and moves it in place, so a
// reader sees the old content or the new.
func replaceFile(path, content string) error {
	i := strings.LastIndexByte(path, '/')
	tmp := path[:i+1] + "." + path[i+1:] + ".new"
	if err := writeFile(tmp, content); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// shlvl is the SHLVL the runner's bash passes on: its own level (one above env's), less
// the one bash takes off in the forked shell that execs the command.
func shlvl(env []string) string {
	n := 0
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "SHLVL="); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	return "SHLVL=" + strconv.Itoa(max(n, 0))
}

var agentNameOnce = sync.OnceValue(func() string { return runnerName(os.Getpid()) })

// agentName names the agent as a job's runner in .meta.
func agentName() string { return agentNameOnce() }

// bashVersion returns the version of the bash a command would run, "<major>.<minor>",
// when it is older than jobs.sh needs (5.1; the fallback must be able to follow the
// job), else "". The answer is kept until the file changes.
func bashVersion(env []string) string {
	path := lookPath("bash", env)
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	key := fileKey(path, fi)
	bashSeen.mu.Lock()
	defer bashSeen.mu.Unlock()
	if bashSeen.key == key {
		return bashSeen.old
	}
	out, err := exec.Command(path, "-c", `echo "${BASH_VERSINFO[0]} ${BASH_VERSINFO[1]}"`).Output()
	if err != nil {
		return ""
	}
	var major, minor int
	if _, err := fmt.Sscanf(string(out), "%d %d", &major, &minor); err != nil {
		return ""
	}
	bashSeen.key, bashSeen.old = key, ""
	if major < 5 || (major == 5 && minor < 1) {
		bashSeen.old = strconv.Itoa(major) + "." + strconv.Itoa(minor)
	}
	return bashSeen.old
}

// fileKey names a file's content as it stands: path, device and inode, size, and the
// times of its last change. Not its access time: running bash may touch that (once a
// day under relatime), and every call would then ask bash its version again.
func fileKey(path string, fi os.FileInfo) string {
	key := fmt.Sprintf("%s %d %d", path, fi.Size(), fi.ModTime().UnixNano())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		key += fmt.Sprintf(" %d %d %d.%d", st.Dev, st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
	}
	return key
}

var bashSeen struct {
	mu       sync.Mutex
	key, old string
}

// emit is jobs.sh's emit: it sends the output produced since the last delivery (the
// head and tail of a range longer than head+tail), after a header line, then records it
// as delivered, in .off and, with the offsets before, in .prev (to send it again).
func emit(st *agentwire.Stream, dir, id, state string, head, tail int64) {
	d := dir + "/" + id
	var oo, eo int64
	line, hadOff := firstLine(d + ".off")
	if hadOff {
		f := strings.Fields(line)
		if len(f) > 0 {
			oo, _ = strconv.ParseInt(f[0], 10, 64)
		}
		if len(f) > 1 {
			eo, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	osz, esz := fileSize(d+".out"), fileSize(d+".err")
	// A file cut shorter (say, by the command itself) restarts delivery at its end.
	oo, eo = min(oo, osz), min(eo, esz)
	ex, exitLine := "-", ""
	if state == "done" {
		exitLine, _ = firstLine(d + ".exit")
		f := strings.Fields(exitLine)
		if len(f) > 0 && len(f[0]) <= 3 && digits(f[0]) {
			ex = f[0]
		} else {
			state = "lost"
		}
	}
	ran := ranMS(d, state, exitLine)
	var flags strings.Builder
	for _, w := range []string{"timedout", "killed", "cancelled"} {
		if exists(d + "." + w) {
			flags.WriteString(w + ",")
		}
	}
	if nonEmpty(d + ".held") {
		h, _ := firstLine(d + ".held")
		flags.WriteString("held:" + h + ",")
	}
	if nonEmpty(d + ".bg") {
		line, _ := firstLine(d + ".bg")
		f := strings.SplitN(line, " ", 3)
		for len(f) < 3 {
			f = append(f, "")
		}
		flags.WriteString("bg:" + f[0] + ":" + f[1] + ":" + f[2] + ",")
	}
	if state == "running" && exists(d+".inw") {
		if _, ok := inputWriter(d, id); ok {
			flags.WriteString("inputwaiting,")
		}
	}
	on, en := max(osz-oo, 0), max(esz-eo, 0)
	osend, esend := on, en
	ol, el, of, ef := "-", "-", "-", "-"
	// Lines are counted up to 100 MB; beyond, the marker gives bytes only.
	const countMax = 100000000
	if on > head+tail {
		osend = head + tail
		if on <= countMax {
			ol = strconv.FormatInt(countLines(d+".out", oo, on), 10)
		}
	}
	if en > head+tail {
		esend = head + tail
		if en <= countMax {
			el = strconv.FormatInt(countLines(d+".err", eo, en), 10)
		}
	}
	// The line a range that may be cut starts in, for the marker to name the lines left out.
	if on > head && oo+on <= countMax {
		of = strconv.FormatInt(countLines(d+".out", 0, oo)+1, 10)
	}
	if en > head && eo+en <= countMax {
		ef = strconv.FormatInt(countLines(d+".err", 0, eo)+1, 10)
	}
	fl := flags.String()
	if fl == "" {
		fl = "-"
	}
	hdr := fmt.Sprintf("MCPJOB1 %s %s %d %d %d %d %d %d %s %s %s %s %s %s\n",
		state, ex, osz, esz, oo, eo, osend, esend, ol, el, of, ef, ran, fl)
	if _, err := st.Write(agentwire.Stdout, []byte(hdr)); err != nil {
		return
	}
	if sendRange(st, agentwire.Stdout, d+".out", oo, on, head, tail) != nil ||
		sendRange(st, agentwire.Stderr, d+".err", eo, en, head, tail) != nil {
		return
	}
	// Recorded as delivered only once sent, and not when the call waiting for this
	// answer was cancelled (.cancelled: it reaches nobody); .prev keeps the offsets
	// before and after, for "poll ... again".
	if exists(d + ".cancelled") {
		return
	}
	// No file, as no output: both read as nothing delivered.
	if !hadOff && osz == 0 && esz == 0 {
		return
	}
	_ = writeFile(d+".prev", fmt.Sprintf("%d %d %d %d\n", oo, eo, osz, esz))
	_ = writeFile(d+".off", fmt.Sprintf("%d %d\n", osz, esz))
}

// ranMS is how long the job has run (running) or ran (done), in ms, or "-"; exitLine
// is the first line of a done job's .exit.
func ranMS(d, state, exitLine string) string {
	line, _ := firstLine(d + ".meta")
	f := strings.Fields(line)
	if len(f) == 0 {
		return "-"
	}
	t0, ok := parseEpochReal(f[0])
	if !ok {
		return "-"
	}
	var t1 int64
	switch state {
	case "done":
		f := strings.Fields(exitLine)
		if len(f) < 2 {
			return "-"
		}
		if t1, ok = parseEpochReal(f[1]); !ok {
			return "-"
		}
	case "running":
		t1 = time.Now().UnixMicro()
	default:
		return "-"
	}
	return strconv.FormatInt(max((t1-t0)/1000, 0), 10)
}

// sendRange sends n bytes of a file from offset from on channel ch, or its first head
// and last tail bytes when longer.
func sendRange(st *agentwire.Stream, ch byte, path string, from, n, head, tail int64) error {
	if n == 0 {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil // as head and tail: nothing to send
	}
	defer f.Close()
	send := func(off, k int64) error {
		if k <= 0 {
			return nil
		}
		buf := make([]byte, min(k, 64<<10))
		for k > 0 {
			m, rerr := f.ReadAt(buf[:min(k, int64(len(buf)))], off)
			if m > 0 {
				if _, err := st.Write(ch, buf[:m]); err != nil {
					return err
				}
				off, k = off+int64(m), k-int64(m)
			}
			if rerr != nil {
				return nil
			}
		}
		return nil
	}
	if n <= head+tail {
		return send(from, n)
	}
	if err := send(from, head); err != nil {
		return err
	}
	return send(from+n-tail, tail)
}

// countLines counts the newlines in n bytes of a file from offset from.
func countLines(path string, from, n int64) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var lines int64
	buf := make([]byte, 256<<10)
	r := io.NewSectionReader(f, from, n)
	for {
		m, err := r.Read(buf)
		lines += int64(bytes.Count(buf[:m], []byte{'\n'}))
		if err != nil {
			return lines
		}
	}
}

// baseEnv is the environment the programs a request starts get before the request's
// own: the agent's, also where a runner serves the agent's channel.
func baseEnv() []string {
	if l := jobRunner.local; l != nil {
		return l.env()
	}
	return os.Environ()
}
