package boxapi

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"
)

// FileInfo describes a file in the sandbox.
type FileInfo struct {
	Path    string      // the absolute path asked for, cleaned
	Name    string      // base name of Path
	Size    int64       // size in bytes of the file Path leads to
	ModTime time.Time   // modification time of that file
	Mode    fs.FileMode // mode of that file (symbolic links are followed)
}

// File is an open file in the sandbox: a stream of its bytes plus what Stat said.
// Close it to release the connection to Docker.
type File struct {
	io.ReadCloser
	FileInfo
}

// DirEntry is a file listed by sandbox.Sandbox.ListFiles.
type DirEntry struct {
	Name    string
	Size    int64
	ModTime time.Time
}

// Lines is a run of lines of a text file, as sandbox.Sandbox.ReadLines returns it.
type Lines struct {
	FileInfo
	First  int64    // number (1-based) of the first line in Lines
	Lines  []string // the lines without their newline, each cut to the line limit
	Cut    int      // how many of Lines were cut to the line limit
	More   bool     // the file goes on after the last line returned
	Capped bool     // fewer lines than asked for came back because of the byte limit
}

// MatchError says that the text to replace was not found exactly once.
type MatchError struct {
	Count int   // how many times the text occurs (overlapping occurrences count)
	Lines []int // line numbers (1-based) where the first occurrences start
	Near  *Near // with Count 0: where the text comes closest, if anywhere
}

func (e *MatchError) Error() string {
	if e.Count == 0 {
		return "the text to replace does not occur in the file"
	}
	return fmt.Sprintf("the text to replace occurs %d times (lines %s)", e.Count, joinInts(e.Lines))
}

// EditResult is what EditFile changed.
type EditResult struct {
	FileInfo
	Line int // line number (1-based) where the replacement starts
}

// UploadOptions describe the stream given to sandbox.Sandbox.Upload.
type UploadOptions struct {
	// Size is the stream's length when known (from Content-Length), else -1. A stream
	// that ends before Size bytes is an aborted upload.
	Size int64
	// Max is the largest file accepted, in bytes; 0 means no limit. It is enforced
	// while the bytes flow, whether or not Size is known.
	Max int64
}

// UploadResult says where an uploaded file landed.
type UploadResult struct {
	Path    string // absolute path of the file in the container, symbolic links in the directory resolved
	Name    string // its final name
	Renamed bool   // true when Name differs from the name asked for, because that one existed
	Size    int64  // bytes written
}

// ZipName is the file name of the zip archive of directory p: its base name and .zip.
func ZipName(p string) string {
	base := path.Base(path.Clean(p))
	if base == "/" || base == "." {
		base = "root"
	}
	return base + ".zip"
}

// joinInts writes numbers as "1, 2, 3".
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// CleanPath makes an absolute container path canonical, the way clients will ask for it.
func CleanPath(p string) string { return path.Clean("/" + p) }
