//go:build linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// tree lists dir's entries, recursively, as "path kind mode size [target|content]".
func treeOf(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		line := rel + " " + fi.Mode().String()
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case fi.Mode().IsRegular():
			b := make([]byte, 64)
			if f, err := os.Open(p); err == nil {
				n, _ := f.Read(b)
				b = b[:n]
				f.Close()
			}
			line += " " + strings.TrimRight(string(b), "\x00") + " " + fi.ModTime().UTC().String()
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func sh(t *testing.T, script string) {
	t.Helper()
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// TestCopySave: a copy keeps files, links, modes and times, writes only the data of a
// sparse file, and stops at -max-bytes.
func TestCopySave(t *testing.T) {
	from, to := t.TempDir(), t.TempDir()
	sh(t, "cd "+from+" && mkdir -p a/b && echo hi > a/b/f && chmod 4751 a/b/f && ln a/b/f hard && ln -s a/b/f soft && mkfifo pipe && "+
		"truncate -s 4G sparse && echo tail >> sparse && touch -d 2001-02-03 a/b/f a && chmod 700 a")
	c := &copier{links: map[[2]uint64]string{}}
	if err := c.save(from, to); err != nil {
		t.Fatal(err)
	}
	if a, b := treeOf(t, from), treeOf(t, to); strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Errorf("the copy differs:\n%s\n---\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(to, "sparse"), &st); err != nil || st.Size != 4<<30+5 || st.Blocks*512 > 1<<20 {
		t.Errorf("the sparse file's copy: size %d, %d bytes on disk (%v)", st.Size, st.Blocks*512, err)
	}
	var a, b syscall.Stat_t
	_ = syscall.Stat(filepath.Join(to, "hard"), &a)
	_ = syscall.Stat(filepath.Join(to, "a/b/f"), &b)
	if a.Ino != b.Ino {
		t.Errorf("a hard link became a file of its own")
	}
	if c.written > 1<<20 {
		t.Errorf("counted %d bytes written", c.written)
	}
	c = &copier{max: 4, links: map[[2]uint64]string{}}
	if err := c.save(from, t.TempDir()); !errors.Is(err, errOverBytes) {
		t.Errorf("a copy past -max-bytes: %v", err)
	}
}

// TestCopyRestoreReservedNames: a checkpoint, or a /sandbox, holding the names an old
// restore reserved (or one of this restore's prefix) is restored, twice, with nothing
// lost and nothing left; a restore that fails leaves the destination as it was.
func TestCopyRestoreReservedNames(t *testing.T) {
	from, to := t.TempDir(), t.TempDir()
	sh(t, "cd "+from+" && mkdir .mcp-sandbox-restore .mcp-sandbox-replaced .mcp-sandbox-restore-0 && echo r > .mcp-sandbox-restore/f && "+
		"echo p > .mcp-sandbox-replaced/f && echo saved > f")
	sh(t, "cd "+to+" && mkdir .mcp-sandbox-replaced && echo mine > .mcp-sandbox-replaced/g && echo changed > f && echo new > n")
	want := treeOf(t, from)
	for i := 0; i < 2; i++ {
		c := &copier{links: map[[2]uint64]string{}}
		if err := c.restore(from, to, ""); err != nil {
			t.Fatalf("restore %d: %v", i, err)
		}
		if got := treeOf(t, to); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("after restore %d:\n%s\nwant\n%s", i, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	sh(t, "echo changed > "+to+"/f")
	before := treeOf(t, to)
	c := &copier{max: 1, links: map[[2]uint64]string{}}
	if err := c.restore(from, to, ""); !errors.Is(err, errOverBytes) {
		t.Fatalf("a restore that cannot copy: %v", err)
	}
	if got := treeOf(t, to); strings.Join(got, "\n") != strings.Join(before, "\n") {
		t.Errorf("after a failed restore:\n%s\nwas\n%s", strings.Join(got, "\n"), strings.Join(before, "\n"))
	}
}
