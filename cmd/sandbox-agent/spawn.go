package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A runner started by the container's main process. Under gVisor, the processes a
// `docker exec` started (the agent and whatever descends from it) are not restored
// from a checkpoint of the container's memory; those descending from its main process
// are. The sandbox's main process (its keepAlive, package sandbox) therefore reads
// requests on the FIFO spawnFIFO(), "<id> <agent binary>", and starts
// `<agent> jobs --announce` as its own child, with stdin and fd 3 the FIFOs
// <id>.in and <id>.ev next to it. The runner says its pid first on fd 3. Jobs, and
// what they leave running, then descend from the main process and outlive a save of
// the container's memory (keep_processes). Where the FIFO is missing or nobody reads
// it (a container made before, or the image lacks mkfifo), the agent starts the runner
// itself, as before; in a container started moments ago whose main process makes the
// FIFO, it first waits a little for it (spawnerComing).

// spawnDir holds the main process's FIFO (spawnFIFO) and the runners' FIFOs.
var spawnDir = "/run/mcp-sandbox"

// spawnFIFO is where the main process takes runner requests.
func spawnFIFO() string { return spawnDir + "/spawn" }

// spawnWait bounds how long the agent waits for a runner it asked for to say its pid.
const spawnWait = 5 * time.Second

// announceArg makes `jobs` say its pid on fd 3 first, and lead a process group of its
// own (as the agent's Setpgid does for a runner it starts).
const announceArg = "--announce"

// spawnerGrace is how long after the container's start the agent waits for its main
// process to take requests: the agent may be started before the main process has made
// its FIFO, and a runner the agent starts itself (with the jobs and the direct channel it
// serves) would not outlive a save of the container's memory. spawnerPatience bounds
// one such wait: less than Caddy waits for the direct channel (3 s), which the first
// runner serves, in case the FIFO never comes (an image without mkfifo).
const (
	spawnerGrace    = 5 * time.Second
	spawnerPatience = 2 * time.Second
)

// errNoSpawner is a main process that does not take requests (yet).
var errNoSpawner = errors.New("the container's main process takes no requests")

// launchFromInit asks the container's main process for a runner. It returns the
// runner's stdin (to write) and events (to read), and its pid; an error when the main
// process does not take requests or the runner does not answer in time (nothing is
// left behind: a runner that starts late finds its stdin ended and exits). Within
// spawnerGrace of the container's start, a main process that does not take requests
// yet is waited for (until stop, for spawnerPatience at most), where it makes one.
func launchFromInit(stop <-chan struct{}) (feed, events *os.File, pid int, err error) {
	deadline := time.Now().Add(spawnerPatience)
	for {
		feed, events, pid, err = askInit()
		if !errors.Is(err, errNoSpawner) || time.Now().After(deadline) || !spawnerComing(containerAge()) {
			return feed, events, pid, err
		}
		select {
		case <-stop:
			return nil, nil, 0, err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// spawnerComing reports whether the main process of a container age old may yet take
// requests: it is young, it is one that makes the FIFO (its command line names the
// FIFO's directory: the sandbox's keepAlive, not a container made before), and the
// directory can be made (a read-only root never gets one).
func spawnerComing(age time.Duration) bool {
	if age < 0 || age >= spawnerGrace || !strings.Contains(mainCmdline(), spawnDir) {
		return false
	}
	if _, err := os.Stat(spawnDir); err == nil {
		return true
	}
	return syscall.Access(filepath.Dir(spawnDir), 2) == nil // W_OK
}

// mainCmdline is the container's first process's command line (docker-init's holds
// the main process's).
var mainCmdline = func() string {
	b, _ := readSmall("/proc/1/cmdline", 8192)
	return string(b)
}

// containerAge is how long the container's first process has run; -1 when unknown.
var containerAge = func() time.Duration {
	st, ok := readStat(1)
	up, err := readSmall("/proc/uptime", 64)
	if !ok || err != nil {
		return -1
	}
	f := strings.Fields(string(up))
	if len(f) == 0 {
		return -1
	}
	secs, err1 := strconv.ParseFloat(f[0], 64)
	ticks, err2 := strconv.ParseInt(st.start, 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	// Clock ticks are 1/100 s on Linux and gVisor alike (USER_HZ).
	return time.Duration((secs - float64(ticks)/100) * float64(time.Second))
}

// askInit asks the main process for a runner once; errNoSpawner when its FIFO is
// missing or nobody reads it.
func askInit() (feed, events *os.File, pid int, err error) {
	fi, err := os.Lstat(spawnFIFO())
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return nil, nil, 0, errNoSpawner
	}
	exe, err := os.Executable()
	if err != nil || strings.ContainsAny(exe, "\n") {
		return nil, nil, 0, fmt.Errorf("the agent's own path: %v", err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	in, ev := filepath.Join(spawnDir, id+".in"), filepath.Join(spawnDir, id+".ev")
	for _, p := range []string{in, ev} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			os.Remove(in)
			return nil, nil, 0, fmt.Errorf("making %s: %w", p, err)
		}
	}
	// The FIFOs stay while the runner holds them (gVisor saves no open FIFO that was
	// deleted): the runner removes them when it ends (announce).
	defer func() {
		if err != nil {
			os.Remove(in)
			os.Remove(ev)
		}
	}()
	// Both ends held here first, so that no open blocks; each is made one-way once
	// the runner holds its own end.
	inRW, err := os.OpenFile(in, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, 0, err
	}
	defer inRW.Close()
	evRW, err := os.OpenFile(ev, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, 0, err
	}
	defer evRW.Close()
	req, err := os.OpenFile(spawnFIFO(), os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%w: %w", errNoSpawner, err)
	}
	_, err = req.WriteString(id + " " + exe + "\n")
	req.Close()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("asking the container's main process for a runner: %w", err)
	}
	pid, err = readPid(evRW, spawnWait)
	if err != nil {
		return nil, nil, 0, err
	}
	// The runner holds the read end of in and the write end of ev now: these opens
	// return at once, and the runner's end of ev is then the only writer (its end
	// reaches EOF here when it is gone) and this feed the only one of in.
	if feed, err = os.OpenFile(in, os.O_WRONLY, 0); err != nil {
		return nil, nil, 0, err
	}
	if events, err = os.OpenFile(ev, os.O_RDONLY, 0); err != nil {
		feed.Close()
		return nil, nil, 0, err
	}
	return feed, events, pid, nil
}

// readPid reads the runner's "pid <n>" line from f, a byte at a time (nothing after
// it is taken), within wait.
func readPid(f *os.File, wait time.Duration) (int, error) {
	if err := f.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return 0, err
	}
	defer func() { _ = f.SetReadDeadline(time.Time{}) }()
	var line []byte
	one := make([]byte, 1)
	for len(line) < 32 {
		if _, err := f.Read(one); err != nil {
			return 0, fmt.Errorf("the runner asked of the container's main process did not answer: %w", err)
		}
		if one[0] == '\n' {
			break
		}
		line = append(line, one[0])
	}
	n, ok := strings.CutPrefix(string(line), "pid ")
	pid, err := strconv.Atoi(n)
	if !ok || err != nil || pid <= 0 {
		return 0, fmt.Errorf("the runner asked of the container's main process said %q, not its pid", line)
	}
	return pid, nil
}

// announce is the runner's side: it leads a process group of its own and says its pid
// on events. The returned function, called when the runner ends, removes its FIFOs.
func announce(events *os.File) (cleanup func()) {
	_ = syscall.Setpgid(0, 0)
	var mine []string
	for _, fd := range []string{"0", "3"} {
		p, err := os.Readlink("/proc/self/fd/" + fd)
		if err == nil && filepath.Dir(p) == spawnDir && (strings.HasSuffix(p, ".in") || strings.HasSuffix(p, ".ev")) {
			mine = append(mine, p)
		}
	}
	_, _ = events.WriteString("pid " + strconv.Itoa(os.Getpid()) + "\n")
	return func() {
		for _, p := range mine {
			os.Remove(p)
		}
	}
}
