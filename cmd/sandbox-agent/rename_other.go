//go:build !linux

package main

import "syscall"

func renameNoReplace(from, to string) error { return syscall.ENOSYS }
