package main

import (
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
)

// The agent must keep working when a command fills the container's process limit (a
// fork bomb): there it cannot make a new thread, and the Go runtime ends a program that
// needs one and cannot get it. So nothing blocks a thread per command: one SIGCHLD
// handler reaps every child (instead of a wait4 each), stdin and stdout are
// non-blocking (the runtime polls them), and the few threads the agent needs are made
// at its start, while it still can, and kept idle for reuse.

// spareThreads is how many threads the agent makes at its start.
const spareThreads = 8

type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
}

var children = reaper{waiting: map[int]chan syscall.WaitStatus{}}

var reaperOnce sync.Once

func startReaper() { reaperOnce.Do(runReaper) }

func runReaper() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		for range sig {
			children.poll()
		}
	}()
}

// wait returns pid's status once it has ended; pid must have been registered.
func (r *reaper) register(pid int) <-chan syscall.WaitStatus {
	startReaper()
	c := make(chan syscall.WaitStatus, 1)
	r.mu.Lock()
	r.waiting[pid] = c
	r.mu.Unlock()
	r.poll() // it may have ended before it was registered
	return c
}

// poll reaps the registered children that have ended.
func (r *reaper) poll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid, c := range r.waiting {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if got == pid || err == syscall.ECHILD {
			c <- ws
			delete(r.waiting, pid)
		}
	}
}

// oneProcessor runs the program's goroutines on one processor at a time. The agent
// and the runner wait on the channel, on files and on children far more than they
// compute, and fifty sandboxes on a host of two processors run two hundred such
// processes: with a processor each of the runtime's threads would look for work on
// the others' (spinning, sleeping, waking each other) at every call. It also stops
// the runtime from reading the container's processor limit again every second.
func oneProcessor() { runtime.GOMAXPROCS(1) }

// makeThreads has the runtime create n threads now, which then stay idle for reuse.
func makeThreads(n int) {
	var ready, release sync.WaitGroup
	ready.Add(n)
	release.Add(1)
	for range n {
		go func() {
			runtime.LockOSThread()
			ready.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	release.Done()
}

// pollable returns fd as a file the runtime polls instead of blocking a thread on it.
func pollable(fd int, name string) *os.File {
	if err := syscall.SetNonblock(fd, true); err != nil {
		return os.NewFile(uintptr(fd), name)
	}
	return os.NewFile(uintptr(fd), name)
}

// Hangups. A runner ignores SIGHUP, and the jobs it starts inherit that (as jobs.sh
// has them ignore it). A program that an exec request starts gets SIGHUP's default action, as
// under the agent, also where the runner serves the agent's channel: while it starts,
// the runner catches SIGHUP instead of ignoring it (a caught signal's action is reset
// at exec, an ignored one is kept). Jobs start under the read lock, so none starts
// while the action is switched.
var hangups struct {
	sync.RWMutex
	caught chan os.Signal
}

// startWithHangups starts a program (start) with SIGHUP's default action.
func startWithHangups(start func() error) error {
	if jobRunner.local == nil {
		return start()
	}
	hangups.Lock()
	defer hangups.Unlock()
	if hangups.caught == nil {
		hangups.caught = make(chan os.Signal, 1)
	}
	signal.Notify(hangups.caught, syscall.SIGHUP)
	defer signal.Ignore(syscall.SIGHUP)
	return start()
}
