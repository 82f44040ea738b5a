package main

import (
	"archive/tar"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// fileOp runs a file operation and returns its reply and what came on channel 1.
func fileOp(t *testing.T, s *agentwire.Session, req agentwire.Request, input string) (agentwire.FileReply, string, result) {
	t.Helper()
	r := run(t, s, req, input)
	var rep agentwire.FileReply
	if err := json.Unmarshal([]byte(r.stderr), &rep); err != nil {
		t.Fatalf("reply %q: %v", r.stderr, err)
	}
	return rep, r.stdout, r
}

func TestFileRead(t *testing.T) {
	s := agent(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("0123456789"), 0o640)
	os.Symlink("f", filepath.Join(dir, "link"))
	for _, c := range []struct {
		path           string
		offset, length int64
		want, err      string
	}{
		{p, 0, -1, "0123456789", ""},
		{filepath.Join(dir, "link"), 0, -1, "0123456789", ""},
		{p, 7, -1, "789", ""},
		{p, 2, 3, "234", ""},
		{p, 9, 100, "9", ""},
		{p, 10, -1, "", ""},
		{p, 11, -1, "", agentwire.FileRange},
		{dir, 0, -1, "", agentwire.FileIsDir},
		{filepath.Join(dir, "missing"), 0, -1, "", agentwire.FileNotFound},
		{filepath.Join(p, "under"), 0, -1, "", agentwire.FileNotRegular},
	} {
		rep, out, r := fileOp(t, s, agentwire.ReadRequest{Path: c.path, Offset: c.offset, Length: c.length}, "")
		if rep.Err != c.err || out != c.want || (c.err == "") != (r.code == 0) {
			t.Errorf("read %s at %d+%d: %+v %q %+v", c.path, c.offset, c.length, rep, out, r)
		}
		if c.err == "" && (rep.Size != 10 || fs.FileMode(rep.Mode) != 0o640) {
			t.Errorf("read %s: reply %+v", c.path, rep)
		}
	}
}

func TestFileReadFIFO(t *testing.T) {
	s := agent(t)
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip(err)
	}
	for _, req := range []agentwire.Request{agentwire.ReadRequest{Path: p, Length: -1}, agentwire.WriteRequest{Path: p}} {
		rep, _, _ := fileOp(t, s, req, "x")
		if rep.Err != agentwire.FileNotRegular {
			t.Errorf("%s of a FIFO: %+v", req.Op(), rep)
		}
	}
}

func TestFileWrite(t *testing.T) {
	s := agent(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b", "new")
	rep, _, _ := fileOp(t, s, agentwire.WriteRequest{Path: p, Mkdir: true}, "hello")
	if rep.Err != "" || !rep.Created || rep.Size != 5 || fs.FileMode(rep.Mode) != 0o644 {
		t.Fatalf("%+v", rep)
	}
	if b, _ := os.ReadFile(p); string(b) != "hello" {
		t.Fatalf("%q", b)
	}
	// In place: the file keeps its mode and inode, and is truncated.
	os.Chmod(p, 0o755)
	before, _ := os.Stat(p)
	rep, _, _ = fileOp(t, s, agentwire.WriteRequest{Path: p}, "hi")
	after, _ := os.Stat(p)
	if rep.Err != "" || rep.Created || after.Mode().Perm() != 0o755 || !os.SameFile(before, after) {
		t.Fatalf("%+v %v", rep, after.Mode())
	}
	if b, _ := os.ReadFile(p); string(b) != "hi" {
		t.Fatalf("%q", b)
	}
	// A dangling link is written where it points, its directories made.
	os.Symlink("sub/target", filepath.Join(dir, "dangling"))
	rep, _, _ = fileOp(t, s, agentwire.WriteRequest{Path: filepath.Join(dir, "dangling"), Mkdir: true}, "x")
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "target")); rep.Err != "" || string(b) != "x" {
		t.Fatalf("%+v %q", rep, b)
	}
	// Without mkdir a missing directory is not made.
	rep, _, _ = fileOp(t, s, agentwire.WriteRequest{Path: filepath.Join(dir, "no", "f")}, "x")
	if rep.Err != agentwire.FileNotFound {
		t.Fatalf("%+v", rep)
	}
	rep, _, _ = fileOp(t, s, agentwire.WriteRequest{Path: p, Excl: true}, "x")
	if rep.Err != agentwire.FileExists {
		t.Fatalf("%+v", rep)
	}
	rep, _, _ = fileOp(t, s, agentwire.WriteRequest{Path: dir}, "x")
	if rep.Err != agentwire.FileIsDir {
		t.Fatalf("%+v", rep)
	}
	rep, _, _ = fileOp(t, s, agentwire.WriteRequest{Path: filepath.Join(p, "x"), Mkdir: true}, "x")
	if rep.Err != agentwire.FileNotRegular {
		t.Fatalf("%+v", rep)
	}
	// setuid and the like are kept on a new file, whatever the umask.
	q := filepath.Join(dir, "suid")
	rep, _, _ = fileOp(t, s, agentwire.WriteRequest{Path: q, Mode: uint32(fs.ModeSetuid | 0o700)}, "x")
	if fi, _ := os.Stat(q); rep.Err != "" || fi.Mode() != fs.ModeSetuid|0o700 {
		t.Fatalf("%+v %v", rep, fi.Mode())
	}
}

func TestFileWriteLimit(t *testing.T) {
	s := agent(t)
	p := filepath.Join(t.TempDir(), "big")
	rep, _, _ := fileOp(t, s, agentwire.WriteRequest{Path: p, Excl: true, Max: 4}, "12345")
	if rep.Err != agentwire.FileTooLarge {
		t.Fatalf("%+v", rep)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("the partial file is left: %v", err)
	}
}

// A write Caddy gives up on leaves no file it created.
func TestFileWriteCancelled(t *testing.T) {
	s := agent(t)
	p := filepath.Join(t.TempDir(), "part")
	b, _ := agentwire.Encode(agentwire.WriteRequest{Path: p, Excl: true})
	st, err := s.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	st.Write(agentwire.Stdin, []byte("some bytes"))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if fi, err := os.Stat(p); err == nil && fi.Size() == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the bytes never arrived")
		}
	}
	st.Close()
	select {
	case <-st.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the write did not end")
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("the partial file is left: %v", err)
	}
}

func TestFileStat(t *testing.T) {
	s := agent(t)
	dir := t.TempDir()
	os.Symlink("loop", filepath.Join(dir, "loop"))
	rep, _, _ := fileOp(t, s, agentwire.StatRequest{Path: dir}, "")
	if rep.Err != "" || !fs.FileMode(rep.Mode).IsDir() {
		t.Fatalf("%+v", rep)
	}
	rep, _, _ = fileOp(t, s, agentwire.StatRequest{Path: filepath.Join(dir, "loop")}, "")
	if rep.Err != agentwire.FileNotRegular {
		t.Fatalf("%+v", rep)
	}
}

func TestFileList(t *testing.T) {
	s := agent(t)
	dir := t.TempDir()
	for _, n := range []string{"a", ".hidden", ".mcp-upload-x.part", "b"} {
		os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.Symlink("a", filepath.Join(dir, "link"))
	_, out, _ := fileOp(t, s, agentwire.ListRequest{Path: dir, Max: 10, Hide: ".mcp-upload-"}, "")
	stats, names, _ := strings.Cut(out, "\x00")
	got := strings.Split(strings.TrimSuffix(names, "\x00"), "\x00")
	if len(got) != 3 || strings.Count(stats, "\n") != 3 || strings.Contains(names, "upload") || strings.Contains(names, "link") {
		t.Fatalf("%q", out)
	}
	_, out, _ = fileOp(t, s, agentwire.ListRequest{Path: dir, Max: 2}, "")
	if strings.Count(out, "\x00") != 3 {
		t.Fatalf("not capped at 2: %q", out)
	}
	rep, out, r := fileOp(t, s, agentwire.ListRequest{Path: filepath.Join(dir, "missing"), Max: 2}, "")
	if rep.Err != "" || out != "" || r.code != 0 {
		t.Fatalf("%+v %q", rep, out)
	}
}

func TestFileTar(t *testing.T) {
	s := agent(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "proj")
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.WriteFile(filepath.Join(root, "a.txt"), []byte("aaa"), 0o644)
	os.Link(filepath.Join(root, "a.txt"), filepath.Join(root, "sub", "hard"))
	os.Symlink("../a.txt", filepath.Join(root, "sub", "soft"))
	syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644)
	os.Symlink("proj", filepath.Join(dir, "via"))
	rep, out, r := fileOp(t, s, agentwire.TarRequest{Path: filepath.Join(dir, "via")}, "")
	if rep.Err != "" || rep.Path != root || r.code != 0 {
		t.Fatalf("%+v %+v", rep, r)
	}
	tr := tar.NewReader(strings.NewReader(out))
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got = append(got, string(h.Typeflag)+" "+h.Name+" "+h.Linkname+" "+string(b))
	}
	want := "5 proj/  |0 proj/a.txt  aaa|5 proj/sub/  |1 proj/sub/hard proj/a.txt |2 proj/sub/soft ../a.txt "
	if strings.Join(got, "|") != want {
		t.Fatalf("got  %q\nwant %q", strings.Join(got, "|"), want)
	}
	rep, _, _ = fileOp(t, s, agentwire.TarRequest{Path: filepath.Join(root, "a.txt")}, "")
	if rep.Err != agentwire.FileNotDir {
		t.Fatalf("%+v", rep)
	}
}
