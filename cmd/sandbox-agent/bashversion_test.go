package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBashVersionAskedOnce: the bash a command runs is asked its version once, not
// again because running it touched its access time; a new file is asked again.
func TestBashVersionAskedOnce(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	bash := filepath.Join(dir, "bash")
	script := "#!/bin/sh\necho x >> " + count + "\necho 4 4\n"
	if err := os.WriteFile(bash, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// An access time older than the change, as an image's file has it: the next
	// read updates it even under relatime.
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(bash, old, time.Time{}); err != nil {
		t.Fatal(err)
	}
	atime := func() int64 {
		var st syscall.Stat_t
		if err := syscall.Stat(bash, &st); err != nil {
			t.Fatal(err)
		}
		return st.Atim.Sec
	}
	before := atime()
	env := []string{"PATH=" + dir}
	asked := func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "x")
	}
	for i := range 3 {
		if v := bashVersion(env); v != "4.4" {
			t.Fatalf("call %d: bashVersion = %q, want 4.4", i+1, v)
		}
	}
	if atime() == before {
		t.Skip("running the file did not change its access time (a noatime mount): nothing to show")
	}
	if n := asked(); n != 1 {
		t.Fatalf("bash was asked its version %d times in 3 calls, want once", n)
	}
	// A bash replaced (a new file in its place) is asked again.
	if err := os.WriteFile(bash+".new", []byte(strings.Replace(script, "4 4", "5 2", 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bash+".new", bash); err != nil {
		t.Fatal(err)
	}
	if v := bashVersion(env); v != "" || asked() != 2 {
		t.Fatalf("after bash was replaced by 5.2: bashVersion = %q (want \"\"), asked %d times in all (want 2)", v, asked())
	}
}
