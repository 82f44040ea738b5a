package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// inode is the inode number of the file at p (0 when there is none).
func inode(p string) uint64 {
	var st syscall.Stat_t
	if syscall.Lstat(p, &st) != nil {
		return 0
	}
	return st.Ino
}

// A pool makes its blanks once its process is quiet, and a job's files are those blanks
// renamed into place: with their content, never over an existing claim, and made
// afresh once the blanks are used up. A blank that is no longer a regular file is not
// used.
func TestBlanks(t *testing.T) {
	dir := t.TempDir()
	p := &blankPool{tag: "t", keep: 3}
	defer func() {
		p.mu.Lock()
		p.timer.Stop()
		p.mu.Unlock()
	}()
	// The first take names the directory and finds nothing yet.
	if b := p.take(dir); b != "" {
		t.Fatalf("first take = %q, want none", b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		n := len(p.free)
		p.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d blanks after a quiet spell, want 3", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ents, err := os.ReadDir(filepath.Join(dir, blankDir))
	if err != nil || len(ents) != 3 {
		t.Fatalf("blank directory: %v, %v", ents, err)
	}
	inodes := map[uint64]bool{}
	for _, e := range ents {
		inodes[inode(filepath.Join(dir, blankDir, e.Name()))] = true
	}

	meta := filepath.Join(dir, "j1.meta")
	if taken, err := p.claimFile(dir, meta, "claim\n"); taken || err != nil {
		t.Fatalf("claim: taken %v, %v", taken, err)
	}
	if b, _ := os.ReadFile(meta); string(b) != "claim\n" || !inodes[inode(meta)] {
		t.Fatalf(".meta %q (inode %d) is not a blank with its content", b, inode(meta))
	}
	// A claim of a name that exists is refused, and leaves the file as it was.
	if taken, _ := p.claimFile(dir, meta, "other\n"); !taken {
		t.Fatal("a second claim of the same job succeeded")
	}
	if b, _ := os.ReadFile(meta); string(b) != "claim\n" {
		t.Fatalf(".meta became %q", b)
	}
	out := filepath.Join(dir, "j1.out")
	f, err := p.openFresh(dir, out)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("hello")
	f.Close()
	if b, _ := os.ReadFile(out); string(b) != "hello" || !inodes[inode(out)] {
		t.Fatalf(".out %q (inode %d) is not a blank", b, inode(out))
	}
	// Used up (the refused claim took one): made as before, and more are made at the
	// next quiet spell.
	p.mu.Lock()
	left := len(p.free)
	p.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d blanks left, want 0", left)
	}
	exit := filepath.Join(dir, "j1.exit")
	if err := p.placeFile(dir, exit, "0 1.5\n"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(exit); string(b) != "0 1.5\n" {
		t.Fatalf(".exit %q", b)
	}

	// A blank swapped for a FIFO is not used (nor waited on).
	p.mu.Lock()
	fifo := filepath.Join(dir, blankDir, "tfifo")
	p.free = append(p.free, fifo)
	p.mu.Unlock()
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	pid := filepath.Join(dir, "j1.pid")
	if err := p.placeFile(dir, pid, "42\n"); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(pid, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		t.Fatalf(".pid is not a regular file: %v", err)
	}
}

// Blanks left by a process that is gone are removed; a live one's stay.
func TestBlanksStale(t *testing.T) {
	dir := t.TempDir()
	bd := filepath.Join(dir, blankDir)
	os.Mkdir(bd, 0o700)
	gone := filepath.Join(bd, "t999999999-1")
	mine := filepath.Join(bd, "t1-1") // pid 1 runs
	other := filepath.Join(bd, "x999999999-1")
	for _, f := range []string{gone, mine, other} {
		os.WriteFile(f, nil, 0o666)
	}
	(&blankPool{tag: "t", keep: 1}).removeStale(bd)
	if _, err := os.Stat(gone); err == nil {
		t.Error("a gone process's blank stayed")
	}
	for _, f := range []string{mine, other} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s was removed: %v", f, err)
		}
	}
}

// A link put in the place of the blanks' directory (the container's commands can) is
// not followed: no blank is made where it points, and files are made as before.
func TestBlanksNotThroughALink(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(dir, blankDir)); err != nil {
		t.Fatal(err)
	}
	p := &blankPool{tag: "t", keep: 3}
	p.take(dir)
	time.Sleep(blankQuiet + 500*time.Millisecond)
	p.mu.Lock()
	p.timer.Stop()
	n := len(p.free)
	p.mu.Unlock()
	if ents, _ := os.ReadDir(elsewhere); n != 0 || len(ents) != 0 {
		t.Fatalf("%d blanks, %d files where the link points", n, len(ents))
	}
	if err := p.placeFile(dir, filepath.Join(dir, "j1.exit"), "0 1\n"); err != nil {
		t.Fatal(err)
	}
}
