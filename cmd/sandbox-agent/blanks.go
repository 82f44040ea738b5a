package main

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Blank files made ahead. Every `execute` creates a job's five files (.meta, .out,
// .err, .pid, .exit) in the container's filesystem, and creating a file is where a
// busy host spends most of a sandbox's time: ext4 without a journal (Docker's overlay
// sits on it) passes over every inode of the directory's group freed in the last
// minutes before it takes one, and a host that makes and removes containers, or a
// sandbox that installs packages, frees thousands. So the agent and the runner each
// keep a few empty files made while they are quiet, in <jobs dir>/.blank, and a job's
// file is one of them renamed into place (a rename takes no inode). A file with
// content is written before the rename, so it appears whole. When no blank is at
// hand, the file is created as before; jobs.sh knows nothing of them, and the
// directory's dot keeps it out of every listing of jobs.

const (
	// blankQuiet is how long a process has taken no blank before it makes more.
	blankQuiet = time.Second
	// blankDir is the blanks' directory in the jobs directory.
	blankDir = ".blank"
	// staleRead is how many entries of the blanks' directory a process looks at for
	// blanks left by others.
	staleRead = 1024
)

// blankPool is one process's blanks: the agent's ("a", for .meta) or the runner's ("r").
type blankPool struct {
	tag  string // the first letter of its blanks' names
	keep int    // how many it makes

	mu      sync.Mutex
	dir     string   // <jobs dir>/.blank; "" until a job names the jobs directory
	free    []string // blanks made and not taken, as paths
	seq     int
	lastUse time.Time
	timer   *time.Timer
}

var (
	agentBlanks  = &blankPool{tag: "a", keep: 24}
	runnerBlanks = &blankPool{tag: "r", keep: 96}
)

// take returns a blank in jobsDir's blank directory, or "" when none is at hand (the
// first jobs, a burst longer than the blanks made, another jobs directory). Taking one
// schedules more for when the process is quiet.
func (p *blankPool) take(jobsDir string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keep == 0 {
		return ""
	}
	dir := jobsDir + "/" + blankDir
	if p.dir == "" {
		p.dir = dir
		p.timer = time.AfterFunc(blankQuiet, p.fillWhenQuiet)
	}
	p.lastUse = time.Now()
	p.timer.Reset(blankQuiet)
	if p.dir != dir || len(p.free) == 0 {
		return ""
	}
	b := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return b
}

// fillWhenQuiet makes blanks up to keep once blankQuiet has passed since the last take.
func (p *blankPool) fillWhenQuiet() {
	p.mu.Lock()
	if quiet := time.Since(p.lastUse); quiet < blankQuiet {
		p.timer.Reset(blankQuiet - quiet)
		p.mu.Unlock()
		return
	}
	dir, first, want := p.dir, p.seq == 0, p.keep-len(p.free)
	p.mu.Unlock()
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return
	}
	// The container's commands can change the jobs directory: blanks go only into a
	// directory of ours, not where a link in its place points.
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return
	}
	if first {
		p.removeStale(dir)
	}
	for range want {
		p.mu.Lock()
		p.seq++
		name := dir + "/" + p.tag + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(p.seq)
		busy := time.Since(p.lastUse) < blankQuiet
		if busy {
			// Jobs came meanwhile: the rest waits for the next quiet spell.
			p.timer.Reset(blankQuiet)
		}
		p.mu.Unlock()
		if busy {
			return
		}
		fd, err := openRetrying(name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o666)
		if err == syscall.EEXIST {
			continue // left by an earlier process of the same pid
		}
		if err != nil {
			return
		}
		syscall.Close(fd)
		p.mu.Lock()
		p.free = append(p.free, name)
		p.mu.Unlock()
	}
}

// removeStale removes the blanks of this pool's kind left by processes that are gone
// (a runner of before a restart); those of one still running are its own.
func (p *blankPool) removeStale(dir string) {
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	// A bounded read: a command may have filled the directory.
	ents, _ := f.ReadDir(staleRead)
	f.Close()
	me := os.Getpid()
	for _, e := range ents {
		pid, _, ok := strings.Cut(strings.TrimPrefix(e.Name(), p.tag), "-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || !strings.HasPrefix(e.Name(), p.tag) || n == me {
			continue
		}
		if syscall.Kill(n, 0) == syscall.ESRCH {
			os.Remove(dir + "/" + e.Name())
		}
	}
}

// putBlank writes content to blank and renames it to path; noReplace leaves an
// existing path as it is (exists is then true). placed is false when the blank could
// not be used; the caller then makes the file itself.
func putBlank(blank, path, content string, noReplace bool) (placed, exists bool) {
	fd, err := openRetrying(blank, syscall.O_WRONLY|syscall.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, false
	}
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return false, false
	}
	if writeAll(fd, blank, content) == nil {
		if !noReplace {
			err = syscall.Rename(blank, path)
		} else if err = renameNoReplace(blank, path); err != nil && err != syscall.EEXIST && err != syscall.ENOENT {
			// No renameat2 here (an old kernel, gVisor, a filesystem without it).
			noRenameat2.Store(true)
		}
		if err == nil {
			return true, false
		}
	}
	os.Remove(blank)
	return false, err == syscall.EEXIST
}

// placeFile gives path content, from one of pool's blanks when one is at hand (the
// file then appears whole), else as writeFile does.
func (p *blankPool) placeFile(jobsDir, path, content string) error {
	if b := p.take(jobsDir); b != "" {
		if placed, _ := putBlank(b, path, content, false); placed {
			return nil
		}
	}
	return writeFile(path, content)
}

// noRenameat2 is set once renameat2 failed: claims are then made with O_EXCL.
var noRenameat2 atomic.Bool

// claimFile creates path with content unless it exists (taken is then true), from
// one of pool's blanks when one is at hand, else with O_EXCL.
func (p *blankPool) claimFile(jobsDir, path, content string) (taken bool, err error) {
	if !noRenameat2.Load() {
		if b := p.take(jobsDir); b != "" {
			if placed, exists := putBlank(b, path, content, true); placed || exists {
				return exists, nil
			}
		}
	}
	fd, err := openRetrying(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o666)
	if err != nil {
		return true, nil
	}
	return false, writeAll(fd, path, content)
}

// openFresh opens path, for reading and writing, as an empty file: one of pool's
// blanks renamed into place when one is at hand, else created or emptied.
func (p *blankPool) openFresh(jobsDir, path string) (*os.File, error) {
	if b := p.take(jobsDir); b != "" {
		f, err := openNoBlock(b, syscall.O_RDWR|syscall.O_TRUNC|syscall.O_NOFOLLOW, 0)
		if err == nil {
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && syscall.Rename(b, path) == nil {
				return f, nil
			}
			f.Close()
		}
		os.Remove(b)
	}
	return openNoBlock(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_TRUNC, 0o666)
}
