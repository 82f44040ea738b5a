package sandbox

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// setupIdleTree makes entries that are idle for two hours next to recent ones.
func setupIdleTree(t *testing.T, sb *Sandbox) {
	t.Helper()
	res := mustExec(t, sb, `set -e
		old="@$(( $(date +%s) - 7200 ))"
		echo x > old.txt; touch -d "$old" old.txt
		echo x > '.hidden old'; touch -d "$old" '.hidden old'
		mkdir -p olddir/sub; echo x > olddir/sub/f; touch -d "$old" olddir/sub/f olddir/sub olddir
		mkdir -p mixed/a/b; echo x > mixed/old; echo x > mixed/a/b/new.txt
		touch -d "$old" mixed/old mixed/a mixed
		mkdir -p newdir; echo x > newdir/f; touch -d "$old" newdir/f
		echo x > new.txt
		ls -A`, boxapi.ExecOptions{})
	if res.ExitCode != 0 {
		t.Fatalf("setup: %+v", res)
	}
}

func TestCleanupDeletesOnlyIdleEntries(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	cfg.FileTTL = time.Hour
	sb := newTestSandbox(t, cli, cfg)
	setupIdleTree(t, sb)

	deleted, err := sb.Cleanup(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(deleted)
	want := []string{"/sandbox/.hidden old", "/sandbox/old.txt", "/sandbox/olddir"}
	if !slices.Equal(deleted, want) {
		t.Errorf("deleted %q, want %q", deleted, want)
	}
	res := mustExec(t, sb, "ls -A; find mixed -type f | sort", boxapi.ExecOptions{})
	if res.Stdout != "mixed\nnew.txt\nnewdir\nmixed/a/b/new.txt\nmixed/old\n" {
		t.Errorf("left:\n%s", res.Stdout)
	}
	// A second pass finds nothing more.
	if deleted, err := sb.Cleanup(context.Background()); err != nil || len(deleted) != 0 {
		t.Errorf("second pass: %q, %v", deleted, err)
	}

	cfg.FileTTL = 0
	off, _ := New(cli, cfg, nil)
	if deleted, err := off.Cleanup(context.Background()); err != nil || deleted != nil {
		t.Errorf("TTL 0: %q, %v", deleted, err)
	}
}

func TestRunCleanupLoop(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	cfg.FileTTL = time.Hour
	cfg.CleanupInterval = 300 * time.Millisecond
	sb := newTestSandbox(t, cli, cfg)
	setupIdleTree(t, sb)

	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []string
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		sb.RunCleanup(ctx, func(paths []string) {
			mu.Lock()
			got = append(got, paths...)
			mu.Unlock()
		})
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("RunCleanup did not stop after cancel")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || !strings.Contains(strings.Join(got, ","), "/sandbox/olddir") {
		t.Errorf("loop deleted %q", got)
	}

	// With FileTTL 0 it returns at once.
	cfg.FileTTL = 0
	off, _ := New(cli, cfg, nil)
	done := make(chan struct{})
	go func() { off.RunCleanup(context.Background(), nil); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Error("RunCleanup with FileTTL 0 did not return")
	}
}
