package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// runFile serves a file operation.
func runFile(st *agentwire.Stream, req agentwire.Request) {
	var p string
	switch req := req.(type) {
	case *agentwire.StatRequest:
		p = req.Path
	case *agentwire.ReadRequest:
		p = req.Path
	case *agentwire.WriteRequest:
		p = req.Path
	case *agentwire.ListRequest:
		p = req.Path
	case *agentwire.TarRequest:
		p = req.Path
	}
	if !path.IsAbs(p) {
		st.Reset("a file operation needs an absolute path")
		return
	}
	switch req := req.(type) {
	case *agentwire.StatRequest:
		runStat(st, *req)
	case *agentwire.ReadRequest:
		runRead(st, *req)
	case *agentwire.WriteRequest:
		runWrite(st, *req)
	case *agentwire.ListRequest:
		runList(st, *req)
	case *agentwire.TarRequest:
		runTar(st, *req)
	}
}

// fileChunk is the size of the Data frames a file goes out in.
const fileChunk = agentwire.MaxData - 1

// reply sends a file operation's first answer: the reply on channel 2, then its end.
func reply(st *agentwire.Stream, r agentwire.FileReply) error {
	b, _ := json.Marshal(r)
	if _, err := st.Write(agentwire.Stderr, b); err != nil {
		return err
	}
	return st.CloseChannel(agentwire.Stderr)
}

// fail answers a file operation with the error err and ends the stream.
func fail(st *agentwire.Stream, err error) {
	_ = reply(st, agentwire.FileReply{Err: fileErr(err), Msg: err.Error()})
	st.Exit(1)
}

// fileErr names an error of the file system for Caddy.
func fileErr(err error) string {
	var e *fileError
	switch {
	case errors.As(err, &e):
		return e.kind
	case errors.Is(err, syscall.ENOENT):
		return agentwire.FileNotFound
	case errors.Is(err, syscall.EISDIR):
		return agentwire.FileIsDir
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENXIO):
		return agentwire.FileNotRegular
	case errors.Is(err, syscall.EEXIST):
		return agentwire.FileExists
	}
	return agentwire.FileFailed
}

type fileError struct{ kind, msg string }

func (e *fileError) Error() string { return e.msg }

func infoReply(p string, fi fs.FileInfo) agentwire.FileReply {
	return agentwire.FileReply{Path: p, Size: fi.Size(), Mode: uint32(fi.Mode()), MTime: fi.ModTime().UnixNano()}
}

// openNoBlock opens p without waiting on a FIFO or a device, then makes reads and
// writes block again.
func openNoBlock(p string, flag int, perm uint32) (*os.File, error) {
	fd, err := syscall.Open(p, flag|syscall.O_NONBLOCK|syscall.O_CLOEXEC, perm)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	_ = syscall.SetNonblock(fd, false)
	return os.NewFile(uintptr(fd), p), nil
}

// openRegular opens the regular file p for reading.
func openRegular(p string) (*os.File, fs.FileInfo, error) {
	f, err := openNoBlock(p, syscall.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		kind := agentwire.FileNotRegular
		if fi.IsDir() {
			kind = agentwire.FileIsDir
		}
		err = &fileError{kind, p + " is not a regular file"}
	}
	if err != nil {
		f.Close()
		return nil, fi, err
	}
	return f, fi, nil
}

func runStat(st *agentwire.Stream, req agentwire.StatRequest) {
	fi, err := os.Stat(req.Path)
	if err != nil {
		fail(st, err)
		return
	}
	_ = reply(st, infoReply(req.Path, fi))
	st.Exit(0)
}

// runRead sends a range of a regular file: no more than its size when opened, so a
// file that grows while it is read ends where it ended then.
func runRead(st *agentwire.Stream, req agentwire.ReadRequest) {
	f, fi, err := openRegular(req.Path)
	if err != nil {
		if fi != nil {
			r := infoReply(req.Path, fi)
			r.Err, r.Msg = fileErr(err), err.Error()
			_ = reply(st, r)
			st.Exit(1)
			return
		}
		fail(st, err)
		return
	}
	defer f.Close()
	if req.Offset < 0 || req.Offset > fi.Size() {
		r := infoReply(req.Path, fi)
		r.Err, r.Msg = agentwire.FileRange, fmt.Sprintf("offset %d is beyond the end of the file (%d bytes)", req.Offset, fi.Size())
		_ = reply(st, r)
		st.Exit(1)
		return
	}
	n := fi.Size() - req.Offset
	if req.Length >= 0 {
		n = min(n, req.Length)
	}
	if reply(st, infoReply(req.Path, fi)) != nil {
		return
	}
	if err := sendFile(st, io.NewSectionReader(f, req.Offset, n)); err != nil {
		st.Reset("reading " + req.Path + ": " + err.Error())
		return
	}
	st.Exit(0)
}

// sendFile sends what r gives on channel 1.
func sendFile(st *agentwire.Stream, r io.Reader) error {
	buf := make([]byte, 8*fileChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := st.Write(agentwire.Stdout, buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// runWrite writes channel 0 to a file, as a shell redirection would (in place, a
// symbolic link written through), or to a new file only (Excl).
func runWrite(st *agentwire.Stream, req agentwire.WriteRequest) {
	perm := uint32(fs.FileMode(req.Mode).Perm())
	if req.Mode == 0 {
		perm = 0o644
	}
	f, created, err := openForWrite(req.Path, req.Excl, req.Mkdir, perm)
	if err != nil {
		fail(st, err)
		return
	}
	abort := func(err error) {
		f.Close()
		if created {
			os.Remove(f.Name())
		}
		if err != nil {
			fail(st, err)
		} else {
			st.Exit(1)
		}
	}
	if created {
		// The mode asked for, whatever the umask; setuid and the like included.
		if err := f.Chmod(fs.FileMode(req.Mode) | fs.FileMode(perm)); err != nil {
			abort(err)
			return
		}
	} else if err := f.Truncate(0); err != nil {
		abort(err)
		return
	}
	if req.Socket != "" {
		n, err := receiveBulk(st, req, f)
		if err != nil {
			abort(err)
			return
		}
		if n < 0 {
			abort(nil)
			return
		}
		finishWrite(st, req, f, created)
		return
	}
	st.SetReceiveWindow(agentwire.FileWindow)
	var n int64
	for {
		c, err := st.ReadChunk()
		if err != nil {
			abort(nil) // Caddy gave up: the stream is gone
			return
		}
		if c.Ch != agentwire.Stdin {
			continue
		}
		if c.EOF {
			break
		}
		n += int64(len(c.Data))
		if req.Max > 0 && n > req.Max {
			abort(&fileError{agentwire.FileTooLarge, fmt.Sprintf("more than %d bytes", req.Max)})
			return
		}
		if _, err := f.Write(c.Data); err != nil {
			abort(err)
			return
		}
	}
	finishWrite(st, req, f, created)
}

// finishWrite closes a written file and answers with what it is.
func finishWrite(st *agentwire.Stream, req agentwire.WriteRequest, f *os.File, created bool) {
	fi, err := f.Stat()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if created {
			os.Remove(f.Name())
		}
		fail(st, err)
		return
	}
	r := infoReply(req.Path, fi)
	r.Created = created
	_ = reply(st, r)
	st.Exit(0)
}

// openForWrite opens p for writing, creating it (and, with mkdir, its parent
// directories, or those of the file a dangling symbolic link at p points to) when
// missing. It refuses what is not a regular file, never waiting on a FIFO.
func openForWrite(p string, excl, mkdir bool, perm uint32) (f *os.File, created bool, err error) {
	for range 40 { // as many symbolic links as Linux follows
		if !excl {
			f, err = openNoBlock(p, syscall.O_WRONLY, 0)
			if err == nil {
				break
			}
			if !errors.Is(err, syscall.ENOENT) {
				return nil, false, err
			}
			if l, lerr := os.Readlink(p); lerr == nil {
				// A dangling link: O_EXCL would not follow it; create where it points.
				if !path.IsAbs(l) {
					l = path.Join(path.Dir(p), l)
				}
				p = l
				continue
			}
		}
		f, err = openNoBlock(p, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, perm)
		if err == nil {
			created = true
			break
		}
		if errors.Is(err, syscall.EEXIST) && !excl {
			continue // made meanwhile; open it as it is
		}
		if !errors.Is(err, syscall.ENOENT) || !mkdir {
			return nil, false, err
		}
		mkdir = false
		if merr := os.MkdirAll(path.Dir(p), 0o755); merr != nil {
			if errors.Is(merr, syscall.ENOTDIR) || errors.Is(merr, syscall.EEXIST) {
				return nil, false, &fileError{agentwire.FileNotRegular, path.Dir(p) + " is not a directory"}
			}
			return nil, false, merr
		}
	}
	if err != nil {
		return nil, false, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = &fileError{agentwire.FileNotRegular, p + " is not a regular file"}
	}
	if err != nil {
		f.Close()
		return nil, false, err
	}
	return f, created, nil
}

// runList lists the regular files of a directory in the listing script's format.
func runList(st *agentwire.Stream, req agentwire.ListRequest) {
	d, err := os.Open(req.Path)
	if err != nil {
		_ = reply(st, agentwire.FileReply{})
		st.Exit(0) // like `cd` failing: nothing to list
		return
	}
	defer d.Close()
	var stats, names strings.Builder
	count := int64(0)
	for count < req.Max {
		ents, err := d.ReadDir(256)
		for _, e := range ents {
			if count == req.Max {
				break
			}
			name := e.Name()
			if !e.Type().IsRegular() || (req.Hide != "" && strings.HasPrefix(name, req.Hide)) {
				continue
			}
			fi, err := e.Info()
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			count++
			stats.WriteString(strconv.FormatInt(fi.Size(), 10) + " " + strconv.FormatInt(fi.ModTime().Unix(), 10) + "\n")
			names.WriteString(name + "\x00")
		}
		if err != nil {
			break
		}
	}
	if reply(st, agentwire.FileReply{}) != nil {
		return
	}
	if count > 0 {
		out := stats.String() + "\x00" + names.String()
		if _, err := st.Write(agentwire.Stdout, []byte(out)); err != nil {
			return
		}
	}
	st.Exit(0)
}

// runTar sends a directory as a tar stream, going on past files it cannot read as tar
// does.
func runTar(st *agentwire.Stream, req agentwire.TarRequest) {
	real, err := filepath.EvalSymlinks(req.Path)
	var fi fs.FileInfo
	if err == nil {
		fi, err = os.Stat(real)
	}
	if err == nil && !fi.IsDir() {
		err = &fileError{agentwire.FileNotDir, req.Path + " is not a directory"}
	}
	if err != nil {
		fail(st, err)
		return
	}
	if reply(st, infoReply(real, fi)) != nil {
		return
	}
	w := &streamWriter{st: st}
	if err := writeTar(w, real); err != nil {
		st.Reset("archiving " + req.Path + ": " + err.Error())
		return
	}
	st.Exit(0)
}

// writeTar writes the tree at dir to w, entries named under its base name.
func writeTar(w io.Writer, dir string) error {
	base := path.Base(dir)
	if dir == "/" {
		base = "."
	}
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	buf := make([]byte, 4*fileChunk)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && p != dir {
				return fs.SkipDir
			}
			return nil // unreadable: left out
		}
		name := base
		if p != dir {
			name = base + "/" + strings.TrimPrefix(strings.TrimPrefix(p, dir), "/")
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		h := &tar.Header{Name: name, ModTime: fi.ModTime(), Mode: int64(fi.Mode().Perm())}
		switch {
		case fi.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
			return tw.WriteHeader(h)
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return nil
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, l
			return tw.WriteHeader(h)
		case !fi.Mode().IsRegular():
			return nil // devices, FIFOs, sockets
		}
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok && sys.Nlink > 1 {
			key := inode{uint64(sys.Dev), uint64(sys.Ino)}
			if first, ok := seen[key]; ok {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				return tw.WriteHeader(h)
			}
			seen[key] = name
		}
		f, ofi, err := openRegular(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		h.Typeflag, h.Size = tar.TypeReg, ofi.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		// Exactly the size the header says: what a growing file adds is left out, and
		// a file that shrank is padded with zeros, as tar does.
		// A failed read leaves zeros; a failed write fails the padding too.
		n, _ := io.CopyBuffer(tw, io.LimitReader(f, h.Size), buf)
		if n < h.Size {
			if _, err := io.CopyN(tw, zeros{}, h.Size-n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// streamWriter writes to channel 1 of a stream, in frames of the largest size.
type streamWriter struct{ st *agentwire.Stream }

func (w *streamWriter) Write(p []byte) (int, error) { return w.st.Write(agentwire.Stdout, p) }

// growPipes makes the pipes of the agent's channel hold more than the default 64 KiB,
// so that a transfer does not wait on Docker's copy for every other frame.
func growPipes() {
	const size = 1 << 20
	for _, fd := range []uintptr{0, 1} {
		_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETPIPE_SZ, size)
	}
}
