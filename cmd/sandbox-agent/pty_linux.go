package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// openPTY returns a new pseudo-terminal's master and slave.
func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening /dev/ptmx: %w", err)
	}
	var unlock int32
	var n uint32
	if err = ioctl(master, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlocking the pseudo-terminal: %w", err)
	}
	if err = ioctl(master, syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("finding the pseudo-terminal's number: %w", err)
	}
	name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	// Opened with the syscall, not os.OpenFile: the slave stays a blocking descriptor,
	// as the program that inherits it expects.
	fd, err := syscall.Open(name, syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("opening %s: %w", name, err)
	}
	return master, os.NewFile(uintptr(fd), name), nil
}

// setWinsize sets the terminal's size.
func setWinsize(f *os.File, rows, cols uint16) error {
	ws := struct{ row, col, xpixel, ypixel uint16 }{row: rows, col: cols}
	if err := ioctl(f, syscall.TIOCSWINSZ, unsafe.Pointer(&ws)); err != nil {
		return fmt.Errorf("setting the terminal's size: %w", err)
	}
	return nil
}

// plainNewlines turns off the terminal's translation of "\n" into "\r\n" on output, so
// what a program prints reads as it would in a file.
func plainNewlines(f *os.File) error {
	var t syscall.Termios
	if err := ioctl(f, syscall.TCGETS, unsafe.Pointer(&t)); err != nil {
		return fmt.Errorf("reading the terminal's settings: %w", err)
	}
	t.Oflag &^= syscall.ONLCR
	if err := ioctl(f, syscall.TCSETS, unsafe.Pointer(&t)); err != nil {
		return fmt.Errorf("changing the terminal's settings: %w", err)
	}
	return nil
}

// ioctl runs one ioctl on f through its raw descriptor (f.Fd would make a pollable
// file blocking).
func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

const (
	// drainQuiet and drainMax bound how long output is still read once the command
	// ended but processes it left behind keep the terminal open: until it is quiet
	// that long, at most drainMax. Closing the master then hangs the terminal up.
	drainQuiet = 250 * time.Millisecond
	drainMax   = 2 * time.Second
)

// runPTY starts argv on a new pseudo-terminal of the given size and copies stdin to it
// and its output to stdout until the command ended and its output is read, then
// returns the command's exit status (128+n when signal n ended it). Its own errors go
// to stderr.
//
// The holder is a process of its own, not part of the serve agent: a tty job lives on
// when the agent dies or restarts, as any other job does.
func runPTY(argv []string, rows, cols uint16, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "sandbox-agent pty: %v\n", err)
		return 127
	}
	master, slave, err := openPTY()
	if err != nil {
		return fail(err)
	}
	defer master.Close()
	if err := setWinsize(master, rows, cols); err != nil {
		slave.Close()
		return fail(err)
	}
	if err := plainNewlines(slave); err != nil {
		slave.Close()
		return fail(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.Env = os.Environ()
	if _, ok := os.LookupEnv("TERM"); !ok {
		cmd.Env = append(cmd.Env, "TERM=dumb")
	}
	// A session of its own with the terminal as its controlling terminal (Ctty is the
	// child's descriptor 0, the slave). Should the holder be killed (SIGKILL from
	// job_kill or the timeout), the command is killed with it; what it started is hung
	// up when the master closes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	// Signals asking the holder to end go to the command's process group instead.
	// Caught here, they start out with their default action in the command even when
	// the holder was started ignoring them (the job runner ignores SIGHUP): as on any
	// terminal, what the command leaves running gets SIGHUP when it ends.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	// Pdeathsig follows the thread that started the command: keep it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		slave.Close()
		signal.Stop(sigs)
		return fail(err)
	}
	slave.Close()

	go func() {
		for sig := range sigs {
			_ = syscall.Kill(-cmd.Process.Pid, sig.(syscall.Signal))
		}
	}()

	// Input: when stdin ends, the terminal's end-of-file character (^D) is sent once,
	// so a program reading its input sees it end; the command is not killed.
	go func() {
		if stdin == nil {
			return
		}
		if _, err := io.Copy(master, stdin); err == nil {
			_, _ = master.Write([]byte{4})
		}
	}()

	var ended atomic.Bool
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 32<<10)
		out := stdout
		for {
			n, err := master.Read(buf)
			if n > 0 {
				if ended.Load() {
					_ = master.SetReadDeadline(time.Now().Add(drainQuiet))
				}
				if out != nil {
					if _, werr := out.Write(buf[:n]); werr != nil {
						out = nil // keep reading, so the command does not block
					}
				}
			}
			// EIO: no process has the terminal open any more.
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) && out != nil {
					readReady(master, buf, func(p []byte) bool {
						_, werr := out.Write(p)
						return werr == nil
					})
				}
				return
			}
		}
	}()

	werr := cmd.Wait()
	ended.Store(true)
	_ = master.SetReadDeadline(time.Now().Add(drainQuiet))
	select {
	case <-copied:
	case <-time.After(drainMax):
	}
	signal.Stop(sigs)
	return exitStatus(cmd.ProcessState, werr, stderr)
}

// exitStatus is the shell's view of how a process ended: its exit code, or 128+n when
// signal n killed it.
func exitStatus(ps *os.ProcessState, err error, stderr io.Writer) int {
	if ps == nil {
		fmt.Fprintf(stderr, "sandbox-agent pty: %v\n", err)
		return 127
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		fmt.Fprintf(stderr, "sandbox-agent pty: %v\n", err)
	}
	return ps.ExitCode()
}
