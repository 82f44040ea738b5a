package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// A command started on the slave the way runPTY starts it sees a terminal, the one
// openPTY named.
func TestOpenPTY(t *testing.T) {
	master, slave, err := openPTY()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	if err := setWinsize(master, 30, 100); err != nil {
		t.Fatal(err)
	}
	if err := plainNewlines(slave); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "tty; stty size")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	out, _ := io.ReadAll(master) // ends with EIO once the command closed the terminal
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sh: %v (output %q)", err, out)
	}
	want := slave.Name() + "\n30 100\n"
	if string(out) != want {
		t.Errorf("output %q, want %q (the slave's name, the size, plain newlines)", out, want)
	}
}

func TestRunPTY(t *testing.T) {
	run := func(input string, argv ...string) (int, string, string) {
		t.Helper()
		var out, errs bytes.Buffer
		code := runPTY(argv, 24, 80, strings.NewReader(input), &out, &errs)
		return code, out.String(), errs.String()
	}
	t.Setenv("TERM", "") // restored after the test
	os.Unsetenv("TERM")
	code, out, errs := run("", "sh", "-c", `[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo "tty $TERM"; stty size; echo oops >&2; exit 3`)
	if code != 3 || out != "tty dumb\n24 80\noops\n" || errs != "" {
		t.Errorf("got %d, %q, stderr %q; want 3, a terminal on all three streams, TERM=dumb, 24x80, stderr mixed in", code, out, errs)
	}
	// The child's status when a signal killed it, as the shell gives it.
	if code, out, _ := run("", "sh", "-c", "kill -9 $$"); code != 128+9 {
		t.Errorf("killed: got %d (%q), want 137", code, out)
	}
	// Input reaches the program through the terminal (echoed by it); at its end the
	// program sees end-of-file (^D), so cat ends.
	code, out, _ = run("hello\n", "cat")
	if code != 0 || strings.Count(out, "hello\n") != 2 {
		t.Errorf("cat: got %d, %q; want 0 and hello twice (echo, then cat)", code, out)
	}
	if code, _, errs := run("", "/nonexistent/program"); code != 127 || !strings.Contains(errs, "sandbox-agent pty:") {
		t.Errorf("missing program: got %d, stderr %q; want 127 and the holder's error", code, errs)
	}
	if code := ptyMain([]string{"--rows", "0", "--", "true"}); code != 2 {
		t.Errorf("bad --rows: got %d, want 2", code)
	}
}
