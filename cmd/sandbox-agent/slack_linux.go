package main

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// Timer slack. A Go program's monitor thread wakes every 20 µs while any goroutine runs
// or waits in a system call, and a system call made after a quiet spell wakes it from
// its long sleep: every `execute` woke the agent's and the runner's some thirty times,
// each a switch between processes. On a busy host (fifty sandboxes on two processors)
// those switches cost more than the work. The agent and the runner raise their timer
// slack before the runtime starts its threads (the slack is kept across an exec and
// inherited by every thread), so the kernel lets those short sleeps last until another
// timer fires anyway; what they start gets the kernel's usual slack back.

const (
	prSetTimerslack = 29
	prGetTimerslack = 30

	// runtimeSlack is the agent's and the runner's timer slack: their timers (the
	// wait of a job, its timeout) are seconds long, and late by at most this.
	runtimeSlack = 4_000_000 // ns
	// childSlack is the kernel's default slack, which the processes they start get.
	childSlack = 50_000 // ns
)

// raised is set when the program runs with runtimeSlack.
var raised bool

// raiseSlack gives the program runtimeSlack: it sets it and execs the program again,
// so that the runtime's threads are made with it. It returns when the slack is
// already raised, or cannot be (gVisor has no timer slack; an exec that fails).
func raiseSlack() {
	cur, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prGetTimerslack, 0, 0)
	if e != 0 {
		return
	}
	if cur == runtimeSlack {
		raised = true
		return
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, runtimeSlack, 0); e != 0 {
		return
	}
	// By its own path, not /proc/self/exe, which would rename the process "exe".
	exe, err := os.Executable()
	if got, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, prGetTimerslack, 0, 0); got == runtimeSlack && err == nil {
		_ = syscall.Exec(exe, os.Args, os.Environ())
	}
	setSlack(cur)
}

// startCmd starts cmd with the kernel's usual timer slack (a child takes the slack of
// the thread that starts it): its thread has that slack while it does.
func startCmd(cmd *exec.Cmd) error {
	if !raised {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	setSlack(childSlack)
	defer setSlack(runtimeSlack)
	return cmd.Start()
}

// setSlack sets the calling thread's timer slack.
func setSlack(ns uintptr) {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, ns, 0)
}
