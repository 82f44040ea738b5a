package main

import "syscall"

// undumpable keeps other processes of the container, root among them, from tracing
// the agent or reading its memory: without CAP_SYS_PTRACE they could otherwise make it
// exit as though its binary could not be executed, or speak in its place.
func undumpable() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)
}
