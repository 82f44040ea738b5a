package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A job's small files read and write as before, and a FIFO put in the place of one
// (the command may do that) neither blocks the agent nor reads as content.
func TestJobFilesBareCalls(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "j1.exit")
	if err := writeFile(p, "0 1.5\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(p, "3 2.5\n"); err != nil { // replaced, not appended
		t.Fatal(err)
	}
	if line, ok := firstLine(p); !ok || line != "3 2.5" {
		t.Fatalf("firstLine = %q, %v; want \"3 2.5\", true", line, ok)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o666&^umask() {
		t.Fatalf("mode %v %v, want %v", fi.Mode(), err, os.FileMode(0o666&^umask()))
	}
	if _, ok := firstLine(filepath.Join(dir, "missing")); ok {
		t.Fatal("a missing file read as present")
	}
	if b, err := readSmall(p, 2); err != nil || string(b) != "3 " {
		t.Fatalf("readSmall(2) = %q, %v", b, err)
	}
	if err := writeFile(filepath.Join(dir, "no", "such"), "x"); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}

	fifo := filepath.Join(dir, "j2.exit")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if line, ok := firstLine(fifo); line != "" {
			t.Errorf("a FIFO with no writer read as %q, %v", line, ok)
		}
		if err := writeFile(fifo, "0 1\n"); err == nil {
			t.Error("writing to a FIFO with no reader succeeded")
		}
		// With a writer holding it open and nothing written: empty, at once.
		w, err := os.OpenFile(fifo, os.O_RDWR, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer w.Close()
		if b, err := readSmall(fifo, 10); err != nil || len(b) != 0 {
			t.Errorf("a FIFO with a silent writer read as %q, %v", b, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("reading or writing a FIFO in a job file's place blocked")
	}
}

// umask is the process's file creation mask.
func umask() os.FileMode {
	m := syscall.Umask(0)
	syscall.Umask(m)
	return os.FileMode(m)
}
