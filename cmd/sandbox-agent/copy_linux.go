//go:build linux

package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// The copy mode copies a sandbox's /sandbox for checkpoints (sandbox/checkpoint.go). It
// runs in a short-lived container of its own with both volumes mounted, never in the
// sandbox, and as root: it keeps owners, modes, times, hard links, symbolic links,
// device nodes and extended attributes (file capabilities) as `cp -a` does, and copies
// only the data of sparse files, never their holes, whatever `cp` the image has.
//
//	sandbox-agent copy save [-max-bytes N] [-timeout D] FROM TO
//	    FROM's contents into the directory TO (a checkpoint's volume).
//	sandbox-agent copy restore [-suffix HEX] [-timeout D] FROM TO
//	    FROM's contents in place of TO's: copied into a directory of TO named afresh
//	    (restoreStage + suffix), then swapped in with renames (the replaced contents
//	    go to restoreRetired + suffix, deleted after). A failure moves everything back
//	    first and deletes only its own copy; it never deletes anything else.
//
// The last line of the output is "copied <data bytes> <entries>". -max-bytes bounds the
// data written: past it nothing more is written and the exit code is exitOverBytes.
// -timeout bounds the copy (not the swap, which renames cut halfway would leave
// mixed): past it the copy stops, removes what it wrote and exits exitTimeout.

// Exit codes of a copy that stopped at -max-bytes, and at -timeout.
const (
	exitOverBytes = 3
	exitTimeout   = 4
)

// errOverBytes is a copy past its -max-bytes, errTimeout one past its -timeout.
var (
	errOverBytes = errors.New("over the bytes allowed")
	errTimeout   = errors.New("over the time allowed")
)

// copyChunk is the most data copied between two looks at the clock.
const copyChunk = 64 << 20

// Reserved name prefixes in the destination's top level during a restore; each
// restore adds 16 random hex digits (chosen by the caller, or here), so that nothing in
// the sandbox or its checkpoint names them beforehand.
const (
	restoreStage   = ".mcp-sandbox-restore-"
	restoreRetired = ".mcp-sandbox-replaced-"
)

func copyMain(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "usage: sandbox-agent copy save|restore [-max-bytes N] FROM TO")
		return 2
	}
	mode := args[0]
	fs := flag.NewFlagSet("copy", flag.ContinueOnError)
	max := fs.Int64("max-bytes", 0, "the most data bytes written (0: no bound)")
	timeout := fs.Duration("timeout", 0, "the longest the copy may take (0: no bound)")
	suffix := fs.String("suffix", "", "the hex digits of the restore's directories' names (default: random)")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 2 || (mode != "save" && mode != "restore") {
		fmt.Fprintln(os.Stderr, "usage: sandbox-agent copy save|restore [-max-bytes N] FROM TO")
		return 2
	}
	from, to := filepath.Clean(fs.Arg(0)), filepath.Clean(fs.Arg(1))
	c := &copier{max: *max, links: map[[2]uint64]string{}}
	if *timeout > 0 {
		c.deadline = time.Now().Add(*timeout)
	}
	var err error
	if mode == "save" {
		err = c.save(from, to)
	} else {
		err = c.restore(from, to, *suffix)
	}
	switch {
	case errors.Is(err, errOverBytes):
		fmt.Fprintf(os.Stderr, "sandbox-agent copy: the copy holds over %d bytes\n", *max)
		return exitOverBytes
	case errors.Is(err, errTimeout):
		fmt.Fprintf(os.Stderr, "sandbox-agent copy: the copy took over %s\n", *timeout)
		return exitTimeout
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-agent copy:", err)
		return 1
	}
	fmt.Printf("copied %d %d\n", c.written, c.entries)
	return 0
}

// copier copies trees; it counts the data bytes it wrote and the entries.
type copier struct {
	max      int64
	deadline time.Time // zero: none
	written  int64
	entries  int64
	links    map[[2]uint64]string // (device, inode) of a file with several links: its copy
}

// save copies from's contents, and from's own owner, mode and times, into to.
func (c *copier) save(from, to string) error {
	st, err := lstat(from)
	if err != nil {
		return err
	}
	if err := c.contents(from, to); err != nil {
		return err
	}
	return meta(from, to, st)
}

// restore replaces to's contents by from's (see copyMain).
func (c *copier) restore(from, to, suffix string) error {
	st, err := lstat(from)
	if err != nil {
		return err
	}
	if suffix == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		suffix = hex.EncodeToString(b[:])
	}
	if _, err := hex.DecodeString(suffix); err != nil || len(suffix) < 16 {
		return fmt.Errorf("-suffix %q is not 16 hex digits or more", suffix)
	}
	stage, retired := restoreStage+suffix, restoreRetired+suffix
	for _, p := range []string{filepath.Join(from, stage), filepath.Join(from, retired), filepath.Join(to, stage), filepath.Join(to, retired)} {
		if lexists(p) {
			return fmt.Errorf("%s exists already: try again", p)
		}
	}
	stageDir, retiredDir := filepath.Join(to, stage), filepath.Join(to, retired)
	if err := os.Mkdir(stageDir, 0o700); err != nil {
		return err
	}
	if err := c.contents(from, stageDir); err != nil {
		if rerr := os.RemoveAll(stageDir); rerr != nil {
			return fmt.Errorf("%w (and removing the unfinished copy %s: %v)", err, stage, rerr)
		}
		return err
	}
	if err := os.Mkdir(retiredDir, 0o700); err != nil {
		_ = os.RemoveAll(stageDir)
		return err
	}
	// Every move is recorded, to be undone in reverse when one fails.
	type move struct{ from, to string }
	var done []move
	mv := func(a, b string) error {
		if lexists(b) {
			return fmt.Errorf("moving %s: %s exists", a, b)
		}
		if err := os.Rename(a, b); err != nil {
			return err
		}
		done = append(done, move{a, b})
		return nil
	}
	swap := func() error {
		current, err := names(to)
		if err != nil {
			return err
		}
		for _, n := range current {
			if n == stage || n == retired {
				continue
			}
			if err := mv(filepath.Join(to, n), filepath.Join(retiredDir, n)); err != nil {
				return err
			}
		}
		staged, err := names(stageDir)
		if err != nil {
			return err
		}
		for _, n := range staged {
			if err := mv(filepath.Join(stageDir, n), filepath.Join(to, n)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := swap(); err != nil {
		for i := len(done) - 1; i >= 0; i-- {
			if uerr := os.Rename(done[i].to, done[i].from); uerr != nil {
				// Nothing more is moved nor deleted: both sets of files stay where they are.
				return fmt.Errorf("%w; putting the files back failed too (%v): the sandbox's files are in %s and the checkpoint's in %s",
					err, uerr, retired, stage)
			}
		}
		_ = os.Remove(retiredDir)
		_ = os.RemoveAll(stageDir)
		return err
	}
	if err := os.Remove(stageDir); err != nil {
		return err
	}
	if err := meta(from, to, st); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-agent copy: keeping the owner and mode of the top directory:", err)
	}
	if err := os.RemoveAll(retiredDir); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox-agent copy: deleting the replaced files in %s: %v\n", retired, err)
	}
	return nil
}

// late reports whether the copy is past its deadline.
func (c *copier) late() bool { return !c.deadline.IsZero() && time.Now().After(c.deadline) }

func lexists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil || !errors.Is(err, os.ErrNotExist)
}

// names lists a directory's entries.
func names(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

func lstat(p string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	return &st, nil
}

// contents copies the entries of directory from into the existing directory to.
func (c *copier) contents(from, to string) error {
	list, err := names(from)
	if err != nil {
		return err
	}
	for _, n := range list {
		if err := c.entry(filepath.Join(from, n), filepath.Join(to, n)); err != nil {
			return err
		}
	}
	return nil
}

// entry copies from to the new path to, whatever it is, never following a link.
func (c *copier) entry(from, to string) error {
	st, err := lstat(from)
	if err != nil {
		return err
	}
	c.entries++
	if c.late() {
		return errTimeout
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		if err := os.Mkdir(to, 0o700); err != nil {
			return err
		}
		if err := c.contents(from, to); err != nil {
			return err
		}
	case syscall.S_IFREG:
		if st.Nlink > 1 {
			key := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
			if first, ok := c.links[key]; ok {
				return os.Link(first, to)
			}
			c.links[key] = to
		}
		if err := c.file(from, to); err != nil {
			return err
		}
	case syscall.S_IFLNK:
		target, err := os.Readlink(from)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, to); err != nil {
			return err
		}
	default: // devices, pipes, sockets
		if err := syscall.Mknod(to, st.Mode, int(st.Rdev)); err != nil {
			return &os.PathError{Op: "mknod", Path: to, Err: err}
		}
	}
	return meta(from, to, st)
}

const (
	seekData = 3 // SEEK_DATA
	seekHole = 4 // SEEK_HOLE
)

// file copies a regular file's data, extent by extent: its holes stay holes.
func (c *copier) file(from, to string) error {
	in, err := os.OpenFile(from, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(in.Fd()), &st); err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	size := st.Size
	for off := int64(0); off < size; {
		data, err := in.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			break // only a hole is left
		}
		if err != nil { // a filesystem without SEEK_DATA: all of it is data
			data = off
		}
		hole, err := in.Seek(data, seekHole)
		if err != nil || hole > size {
			hole = size
		}
		n := hole - data
		if c.max > 0 && c.written+n > c.max {
			return errOverBytes
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		for left := n; left > 0; {
			if c.late() {
				return errTimeout
			}
			m := min(left, copyChunk)
			if _, err := io.CopyN(out, in, m); err != nil {
				return fmt.Errorf("copying %s: %w", from, err)
			}
			left -= m
		}
		c.written += n
		off = hole
	}
	if err := out.Truncate(size); err != nil {
		return err
	}
	return out.Close()
}

// meta gives to from's owner, mode, extended attributes and times (of the link
// itself for a symbolic link). The owner goes first: a change of owner clears the
// set-user-ID bits and file capabilities.
func meta(from, to string, st *syscall.Stat_t) error {
	link := st.Mode&syscall.S_IFMT == syscall.S_IFLNK
	if err := syscall.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
		return &os.PathError{Op: "lchown", Path: to, Err: err}
	}
	if !link {
		if err := syscall.Chmod(to, st.Mode&0o7777); err != nil {
			return &os.PathError{Op: "chmod", Path: to, Err: err}
		}
		if err := xattrs(from, to); err != nil {
			return err
		}
	}
	ts := [2]syscall.Timespec{st.Atim, st.Mtim}
	p, err := syscall.BytePtrFromString(to)
	if err != nil {
		return err
	}
	const atFDCWD, atSymlinkNoFollow = -100, 0x100
	fd := atFDCWD
	if _, _, e := syscall.Syscall6(syscall.SYS_UTIMENSAT, uintptr(fd), uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(&ts[0])), atSymlinkNoFollow, 0, 0); e != 0 {
		return &os.PathError{Op: "utimensat", Path: to, Err: e}
	}
	return nil
}

// xattrs copies the extended attributes the copy can set: those of a namespace it may
// not write (trusted.*), or that the filesystem does not keep, are left.
func xattrs(from, to string) error {
	list, err := xattrCall(syscall.SYS_LLISTXATTR, from, "", nil)
	if err != nil || len(list) == 0 {
		return nil // none, or a filesystem without them
	}
	for _, name := range splitNames(list) {
		v, err := xattrCall(syscall.SYS_LGETXATTR, from, name, nil)
		if err != nil {
			continue
		}
		if _, err := xattrCall(syscall.SYS_LSETXATTR, to, name, v); err != nil &&
			!errors.Is(err, syscall.ENOTSUP) && !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EOPNOTSUPP) {
			return &os.PathError{Op: "setxattr " + strconv.Quote(name), Path: to, Err: err}
		}
	}
	return nil
}

func splitNames(b []byte) []string {
	var out []string
	start := 0
	for i, ch := range b {
		if ch == 0 {
			if i > start {
				out = append(out, string(b[start:i]))
			}
			start = i + 1
		}
	}
	return out
}

// xattrCall is llistxattr (name ""), lgetxattr, or lsetxattr (value set), with the
// buffer grown as the kernel asks.
func xattrCall(trap uintptr, p, name string, value []byte) ([]byte, error) {
	pp, err := syscall.BytePtrFromString(p)
	if err != nil {
		return nil, err
	}
	var np *byte
	if name != "" {
		if np, err = syscall.BytePtrFromString(name); err != nil {
			return nil, err
		}
	}
	if trap == syscall.SYS_LSETXATTR {
		var vp unsafe.Pointer
		if len(value) > 0 {
			vp = unsafe.Pointer(&value[0])
		}
		_, _, e := syscall.Syscall6(trap, uintptr(unsafe.Pointer(pp)), uintptr(unsafe.Pointer(np)), uintptr(vp), uintptr(len(value)), 0, 0)
		if e != 0 {
			return nil, e
		}
		return nil, nil
	}
	call := func(buf []byte) (int, syscall.Errno) {
		var bp unsafe.Pointer
		if len(buf) > 0 {
			bp = unsafe.Pointer(&buf[0])
		}
		var r uintptr
		var e syscall.Errno
		if trap == syscall.SYS_LLISTXATTR {
			r, _, e = syscall.Syscall(trap, uintptr(unsafe.Pointer(pp)), uintptr(bp), uintptr(len(buf)))
		} else {
			r, _, e = syscall.Syscall6(trap, uintptr(unsafe.Pointer(pp)), uintptr(unsafe.Pointer(np)), uintptr(bp), uintptr(len(buf)), 0, 0)
		}
		return int(r), e
	}
	for try := 0; try < 4; try++ {
		n, e := call(nil)
		if e != 0 {
			return nil, e
		}
		buf := make([]byte, n)
		if n == 0 {
			return buf, nil
		}
		m, e := call(buf)
		if e == syscall.ERANGE {
			continue // it grew meanwhile
		}
		if e != 0 {
			return nil, e
		}
		return buf[:m], nil
	}
	return nil, syscall.ERANGE
}
