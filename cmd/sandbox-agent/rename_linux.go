package main

import (
	"runtime"
	"syscall"
	"unsafe"
)

// renameNoReplace is renameat2(RENAME_NOREPLACE): from becomes to unless to exists
// (EEXIST).
func renameNoReplace(from, to string) error {
	const renameNoreplace = 1
	var nr uintptr
	switch runtime.GOARCH {
	case "amd64":
		nr = 316
	case "arm64":
		nr = 276
	default:
		return syscall.ENOSYS
	}
	f, err := syscall.BytePtrFromString(from)
	if err != nil {
		return err
	}
	t, err := syscall.BytePtrFromString(to)
	if err != nil {
		return err
	}
	atFDCWD := -100
	_, _, e := syscall.Syscall6(nr, uintptr(atFDCWD), uintptr(unsafe.Pointer(f)), uintptr(atFDCWD), uintptr(unsafe.Pointer(t)), renameNoreplace, 0)
	if e != 0 {
		return e
	}
	return nil
}
