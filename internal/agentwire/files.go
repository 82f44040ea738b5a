package agentwire

// File operations. Each answers first with one FileReply, JSON on channel 2 ended by
// EOF, then (read, list, tar) bytes on channel 1, then Exit 0. A failure after the reply
// resets the stream.
const (
	// OpStat describes the file Path leads to (symbolic links followed).
	OpStat = "stat"
	// OpRead sends Length bytes (-1: to the end as the reply's Size says) of the
	// regular file at Path from Offset.
	OpRead = "read"
	// OpWrite writes what comes on channel 0 until its EOF to the file at Path, in
	// place (symbolic links followed, a dangling one created where it points), and
	// answers once the file is closed. Past Max bytes, or when the stream ends before
	// channel 0 does, a file it created is removed.
	OpWrite = "write"
	// OpList lists up to Length regular files of the directory Path (not symbolic
	// links, not names starting with Hide) as the listing script does: a "size mtime"
	// line each, a NUL, then the names, each ended by a NUL. A missing directory lists
	// as empty.
	OpList = "list"
	// OpTar sends the directory Path (symbolic links to it followed) as a tar stream
	// whose entries are named under the directory's base name, as `tar -C dir base`
	// does: directories, regular files, symbolic links and hard links.
	OpTar = "tar"
)

// FileReply is the first answer of a file operation.
type FileReply struct {
	Err     string `json:"err,omitempty"` // one of the FileErr values; "" on success
	Msg     string `json:"msg,omitempty"` // the system's words
	Path    string `json:"path,omitempty"`
	Size    int64  `json:"size,omitempty"`
	Mode    uint32 `json:"mode,omitempty"`  // an fs.FileMode
	MTime   int64  `json:"mtime,omitempty"` // Unix nanoseconds
	Created bool   `json:"created,omitempty"`
}

// FileReply errors.
const (
	FileNotFound   = "not_found"
	FileIsDir      = "is_dir"
	FileNotRegular = "not_regular" // not a regular file, or a path that leads to none
	FileNotDir     = "not_dir"
	FileTooLarge   = "too_large"
	FileExists     = "exists"
	FileRange      = "range" // an offset beyond the end of the file
	FileFailed     = "failed"
)

// FileWindow is the window of a file's bytes, each way: a transfer is not held to a
// round trip per InitialWindow.
const FileWindow = 4 << 20

// MaxFileReply bounds a FileReply as Caddy reads it.
const MaxFileReply = 8 << 10
