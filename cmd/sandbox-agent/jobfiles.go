package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What the native job runner (job.go, jobwait.go) shares with sandbox/jobs.sh: the
// files of a job, in the formats that script's comment describes, and the scans of
// /proc it makes. Both runners read and write the same job directory, so either one
// picks up a job the other started.

// epochReal is the time as bash's EPOCHREALTIME gives it: seconds, a dot, microseconds.
func epochReal(t time.Time) string {
	return strconv.FormatInt(t.Unix(), 10) + "." + leftPad(strconv.Itoa(t.Nanosecond()/1000), 6)
}

func leftPad(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return strings.Repeat("0", n-len(s)) + s
}

// parseEpochReal reads a time epochReal wrote (or bash, with its locale's decimal
// point), in microseconds.
func parseEpochReal(s string) (int64, bool) {
	i := strings.IndexAny(s, ".,")
	if i < 1 || i > 12 || len(s)-i-1 != 6 || !digits(s[:i]) || !digits(s[i+1:]) {
		return 0, false
	}
	sec, _ := strconv.ParseInt(s[:i], 10, 64)
	us, _ := strconv.ParseInt(s[i+1:], 10, 64)
	return sec*1e6 + us, true
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// firstLine returns the first line of a small file, without its newline.
func firstLine(path string) (string, bool) {
	b, err := readSmall(path, 4096)
	if err != nil {
		return "", false
	}
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	return string(line), true
}

// readSmall reads up to max bytes of a file. The small files of jobs are read and
// written with bare system calls: the os package registers every file it opens with
// the runtime's poller (five more calls each, for files it cannot poll), and a call
// reads and writes about a dozen. A FIFO in a file's place (the container is the
// command's to change) is opened without waiting for a writer, and reads as empty.
func readSmall(path string, max int) ([]byte, error) {
	fd, err := openRetrying(path, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	b := make([]byte, max)
	for {
		n, err := syscall.Read(fd, b)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return b[:0], nil
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		return b[:n], nil
	}
}

// writeFile replaces a file's content, as bash's `echo ... >file` does (a FIFO in its
// place with no reader is an error, not a wait).
func writeFile(path, content string) error {
	fd, err := openRetrying(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC|syscall.O_NONBLOCK, 0o666)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	return writeAll(fd, path, content)
}

// writeAll writes content to fd, the file at path, and closes it.
func writeAll(fd int, path, content string) error {
	b := []byte(content)
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			syscall.Close(fd)
			return &os.PathError{Op: "write", Path: path, Err: err}
		}
		b = b[n:]
	}
	if err := syscall.Close(fd); err != nil {
		return &os.PathError{Op: "close", Path: path, Err: err}
	}
	return nil
}

// openRetrying is open(2), close-on-exec, again when a signal interrupted it.
func openRetrying(path string, flag int, perm uint32) (int, error) {
	for {
		fd, err := syscall.Open(path, flag|syscall.O_CLOEXEC, perm)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// touch creates an empty file (`: >file`).
func touch(path string) error { return writeFile(path, "") }

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// nonEmpty is bash's [ -s file ].
func nonEmpty(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Size() > 0
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// procStat is what a process's /proc/<pid>/stat says past its command name.
type procStat struct {
	state           string
	ppid, pgrp, sid int
	start           string // clock ticks since boot
}

// readStat reads a process's stat; false when it is gone.
func readStat(pid int) (procStat, bool) {
	b, err := readSmall("/proc/"+strconv.Itoa(pid)+"/stat", 2048)
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndex(b, []byte(") "))
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	sid, _ := strconv.Atoi(f[3])
	return procStat{state: f[0], ppid: ppid, pgrp: pgrp, sid: sid, start: f[19]}, true
}

// runnerName names a runner in .meta as "<pid>:<start time>", or "<pid>" when its
// start time cannot be read (its command line then names the job).
func runnerName(pid int) string {
	if st, ok := readStat(pid); ok {
		return strconv.Itoa(pid) + ":" + st.start
	}
	return strconv.Itoa(pid)
}

// pids lists the container's processes.
func pids() []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]int, 0, len(names))
	for _, n := range names {
		if p, err := strconv.Atoi(n); err == nil && p > 0 {
			out = append(out, p)
		}
	}
	return out
}

// cmdline returns a process's arguments joined by spaces, as bash's ${a[*]} does.
func cmdline(pid int) (string, bool) {
	b, err := readSmall("/proc/"+strconv.Itoa(pid)+"/cmdline", 64<<10)
	if err != nil {
		return "", false
	}
	b = bytes.TrimSuffix(b, []byte{0})
	return string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), true
}

// jobOutput is a job's output files, to find the processes holding them.
type jobOutput struct{ out, err os.FileInfo }

func outputOf(d string) jobOutput {
	var o jobOutput
	o.out, _ = os.Stat(d + ".out")
	o.err, _ = os.Stat(d + ".err")
	return o
}

// holds reports whether a process has the job's output open as its stdout or stderr.
func (o jobOutput) holds(pid int) bool {
	if o.out == nil && o.err == nil {
		return false
	}
	base := "/proc/" + strconv.Itoa(pid) + "/fd/"
	for _, fd := range []string{"1", "2"} {
		fi, err := os.Stat(base + fd)
		if err != nil {
			continue
		}
		if (o.out != nil && os.SameFile(fi, o.out)) || (o.err != nil && os.SameFile(fi, o.err)) {
			return true
		}
	}
	return false
}

// groupAlive is `kill -0 -- -pg`.
func groupAlive(pg int) bool {
	return pg > 0 && syscall.Kill(-pg, 0) == nil
}

// inputWriter returns the pid of the process writing the job's last input when it
// still runs (it carries "mcpjob-input <id>" in its arguments).
func inputWriter(d, id string) (int, bool) {
	line, ok := firstLine(d + ".inw")
	if !ok {
		return 0, false
	}
	wp, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || wp <= 0 {
		return 0, false
	}
	args, ok := cmdline(wp)
	return wp, ok && strings.Contains(" "+args+" ", " mcpjob-input "+id+" ")
}

// killJob is jobs.sh's killjob: it kills the job's process group twice, around a scan
// for members a fork-heavy command may have started meanwhile (and, for a job handed
// over, for processes holding its output), and the writer of its input. For a tty job,
// the session of the terminal goes too: the holder's child leads it.
func killJob(d, id string) {
	if wp, ok := inputWriter(d, id); ok {
		syscall.Kill(wp, syscall.SIGKILL)
	}
	line, ok := firstLine(d + ".pid")
	if !ok {
		return
	}
	pg, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pg <= 1 {
		return
	}
	handed := exists(d + ".from")
	ts := -1
	if exists(d + ".tty") {
		for _, p := range pids() {
			if st, ok := readStat(p); ok && st.ppid == pg && st.sid == p {
				ts = p
				break
			}
		}
	}
	syscall.Kill(-pg, syscall.SIGKILL)
	var o jobOutput
	if handed {
		o = outputOf(d)
	}
	for _, p := range pids() {
		st, ok := readStat(p)
		if (ok && (st.pgrp == pg || st.sid == ts)) || (handed && o.holds(p)) {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
	syscall.Kill(-pg, syscall.SIGKILL)
}

// pidLimit returns the container's process limit and count; false when unknown.
func pidLimit() (max, cur int, ok bool) {
	for _, dir := range []string{"/sys/fs/cgroup/", "/sys/fs/cgroup/pids/"} {
		m, ok1 := firstLine(dir + "pids.max")
		n, ok2 := firstLine(dir + "pids.current")
		if ok1 && ok2 {
			if len(m) > 9 || len(n) > 9 || !digits(m) || !digits(n) {
				return 0, 0, false
			}
			max, _ = strconv.Atoi(m)
			cur, _ = strconv.Atoi(n)
			return max, cur, true
		}
	}
	return 0, 0, false
}

// full reports whether the container is at its process limit with half of it in the
// group pg.
func full(pg int) bool {
	m, n, ok := pidLimit()
	if !ok || n+10 < m {
		return false
	}
	k := 0
	for _, p := range pids() {
		if st, ok := readStat(p); ok && st.pgrp == pg {
			k++
		}
	}
	return 2*k >= m
}
