package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// spawnerIn points the agent at a spawn directory of its own, in a container age old
// whose main process makes it.
func spawnerIn(t *testing.T, age time.Duration) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "spawn")
	oldDir, oldAge, oldMain := spawnDir, containerAge, mainCmdline
	spawnDir = dir
	containerAge = func() time.Duration { return age }
	mainCmdline = func() string { return "bash\x00-c\x00d=" + dir + ";mkfifo $d/spawn" }
	t.Cleanup(func() { spawnDir, containerAge, mainCmdline = oldDir, oldAge, oldMain })
	return dir
}

// serveSpawns is the main process's side after delay: it makes the FIFO and answers
// each request with "pid <pid>", holding the runner's FIFOs as a runner would.
func serveSpawns(t *testing.T, dir string, delay time.Duration, pid string) {
	t.Helper()
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		time.Sleep(delay)
		if os.MkdirAll(dir, 0o700) != nil || syscall.Mkfifo(dir+"/spawn", 0o600) != nil {
			return
		}
		f, err := os.OpenFile(dir+"/spawn", os.O_RDWR, 0)
		if err != nil {
			return
		}
		go func() { <-done; f.Close() }()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			id, _, _ := strings.Cut(sc.Text(), " ")
			in, err1 := os.OpenFile(dir+"/"+id+".in", os.O_RDONLY, 0)
			ev, err2 := os.OpenFile(dir+"/"+id+".ev", os.O_WRONLY, 0)
			if err1 != nil || err2 != nil {
				return
			}
			_, _ = ev.WriteString("pid " + pid + "\n")
			go func() { <-done; in.Close(); ev.Close() }()
		}
	}()
}

// TestLaunchWaitsForAYoungSpawner: an agent started in a container before its main
// process took requests waits for it, so that the runner descends from the main
// process (and outlives a save of the container's memory), not from the agent.
func TestLaunchWaitsForAYoungSpawner(t *testing.T) {
	dir := spawnerIn(t, time.Second)
	serveSpawns(t, dir, 300*time.Millisecond, "4242")
	begin := time.Now()
	feed, events, pid, err := launchFromInit(nil)
	if err != nil {
		t.Fatalf("launch in a young container whose main process takes requests 300 ms later: %v", err)
	}
	feed.Close()
	events.Close()
	if pid != 4242 {
		t.Errorf("pid %d, want the main process's runner, 4242", pid)
	}
	if took := time.Since(begin); took < 300*time.Millisecond {
		t.Errorf("answered in %v, before the main process took requests", took)
	}
}

// TestLaunchNoSpawner: past the grace, at stop, past spawnerPatience, in a container
// whose main process makes no FIFO (one made before), or where the FIFO's directory
// cannot be made (a read-only root), a main process that takes no requests is not
// waited for, or not for long.
func TestLaunchNoSpawner(t *testing.T) {
	for _, c := range []struct {
		name      string
		age       time.Duration
		stop      bool
		otherMain bool
		within    time.Duration
	}{
		{name: "old container", age: spawnerGrace + time.Second, within: time.Second},
		{name: "age unknown", age: -1, within: time.Second},
		{name: "stopped", age: time.Second, stop: true, within: time.Second},
		{name: "another main process", age: time.Second, otherMain: true, within: time.Second},
		{name: "no FIFO ever", age: time.Second, within: spawnerPatience + time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			spawnerIn(t, c.age)
			if c.otherMain {
				mainCmdline = func() string { return "sleep\x00infinity" }
			}
			stop := make(chan struct{})
			if c.stop {
				time.AfterFunc(100*time.Millisecond, func() { close(stop) })
			}
			begin := time.Now()
			_, _, _, err := launchFromInit(stop)
			if err == nil {
				t.Fatal("a runner from a main process that takes no requests")
			}
			if took := time.Since(begin); took > c.within {
				t.Errorf("gave up after %v, want within %v", took, c.within)
			}
		})
	}
	spawnerIn(t, time.Second)
	if !spawnerComing(time.Second) {
		t.Error("a young container whose FIFO's directory can be made: not waited for")
	}
	spawnDir = filepath.Join(t.TempDir(), "missing", "spawn")
	if spawnerComing(time.Second) {
		t.Error("a young container where the FIFO's directory cannot be made: waited for")
	}
}

// TestLaunchStoppedStartsNothing: a caller that went while the agent waited for the
// main process gets no runner of the agent's own.
func TestLaunchStoppedStartsNothing(t *testing.T) {
	spawnerIn(t, time.Second)
	stop := make(chan struct{})
	time.AfterFunc(50*time.Millisecond, func() { close(stop) })
	r := &runnerProc{}
	r.mu.Lock()
	err := r.launch(stop)
	r.mu.Unlock()
	if err == nil || r.name != "" {
		t.Fatalf("launch for a caller that went: %v, runner %q", err, r.name)
	}
}
