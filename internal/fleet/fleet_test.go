package fleet

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// pool stands in for the caller's pool: it makes one entry per container, on a Docker
// host nothing listens on (nothing here may reach an engine), and counts the holds.
type pool struct {
	t        *testing.T
	entries  map[string]*Entry
	held     atomic.Int32
	acquired []sandbox.Config
}

func newPool(t *testing.T) *pool { return &pool{t: t, entries: map[string]*Entry{}} }

func (p *pool) acquire(eng Engine, cfg sandbox.Config) (*Entry, func() error, error) {
	p.acquired = append(p.acquired, cfg)
	e := p.entries[cfg.Container]
	if e == nil {
		dc, err := client.NewClientWithOpts(client.WithHost("unix:///nonexistent/docker.sock"), client.WithAPIVersionNegotiation())
		if err != nil {
			p.t.Fatal(err)
		}
		cli := sandbox.Docker(dc)
		sb, err := sandbox.New(cli, cfg, nil)
		if err != nil {
			p.t.Fatal(err)
		}
		e = NewEntry(EntryOptions{Sandbox: sb, Client: cli, Engine: eng})
		p.entries[cfg.Container] = e
		p.t.Cleanup(func() { _ = e.Destruct() })
	}
	p.held.Add(1)
	var once atomic.Bool
	return e, func() error {
		if once.CompareAndSwap(false, true) {
			p.held.Add(-1)
		}
		return nil
	}, nil
}

func testBase(container string) sandbox.Config {
	cfg := sandbox.DefaultConfig()
	cfg.Container, cfg.Volume = container, container+"-data"
	return cfg
}

// TestBeginKeepsBusy: a command under way keeps the sandbox from idling until it
// returns, and its end counts as a use.
func TestBeginKeepsBusy(t *testing.T) {
	f, err := New(Options{Base: testBase("begin-test"), Acquire: newPool(t).acquire})
	if err != nil {
		t.Fatal(err)
	}
	e := f.Operator()
	e.idle.last.Store(time.Now().Add(-time.Hour).UnixNano())
	if d := e.IdleFor(); d < 59*time.Minute {
		t.Fatalf("idle for %v, want an hour", d)
	}
	done := e.Begin()
	e.idle.last.Store(time.Now().Add(-time.Hour).UnixNano())
	if d := e.IdleFor(); d != 0 {
		t.Errorf("idle for %v while a command runs", d)
	}
	done()
	if d := e.IdleFor(); d > time.Minute {
		t.Errorf("idle for %v right after a command", d)
	}
	e.idle.last.Store(time.Now().Add(-time.Hour).UnixNano())
	if _, err := f.For(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	if d := e.IdleFor(); d > time.Minute {
		t.Errorf("idle for %v right after For", d)
	}
}

func TestIdleCheckEvery(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		2 * time.Second: time.Second, 20 * time.Second: 5 * time.Second, 30 * time.Minute: time.Minute,
	} {
		if got := idleCheckEvery(d); got != want {
			t.Errorf("idleCheckEvery(%v) = %v, want %v", d, got, want)
		}
	}
}

// TestPersonOfContainer: a container is a person's sandbox of the site when it is
// named <container>-<person> and labelled with that person; made before the label, on
// the volume <volume>-<person>, only while that person is configured (it could be
// another server's sandbox named that way). The operator's and other sites' are not.
func TestPersonOfContainer(t *testing.T) {
	base := sandbox.Config{Container: "sb", Volume: "sb-data"}
	configured := func(p string) bool { return p == "alice" }
	for _, tc := range []struct {
		c    sandbox.Container
		want string
		ok   bool
	}{
		{sandbox.Container{Name: "sb-carol", Volume: "sb-data-carol", Person: "carol"}, "carol", true},
		{sandbox.Container{Name: "sb-alice", Volume: "sb-data-alice"}, "alice", true},
		{sandbox.Container{Name: "sb-carol", Volume: "sb-data-carol"}, "", false},
		{sandbox.Container{Name: "sb-alice", Volume: "other"}, "", false},
		{sandbox.Container{Name: "sb-carol", Volume: "sb-data-carol", Person: "dave"}, "", false},
		{sandbox.Container{Name: "sb", Volume: "sb-data"}, "", false},
		{sandbox.Container{Name: "sbx-carol", Volume: "sb-data-carol", Person: "carol"}, "", false},
		{sandbox.Container{Name: "sb-Carol!", Volume: "sb-data-Carol!", Person: "Carol!"}, "", false},
		// A warm sandbox carol took: her name, a warm volume of the site's.
		{sandbox.Container{Name: "sb-carol", Volume: "sb-data_warm_0a1b", Warm: true}, "carol", true},
		{sandbox.Container{Name: "sb-carol", Volume: "other_warm_0a1b", Warm: true}, "", false},
		{sandbox.Container{Name: "sb_warm_0a1b", Volume: "sb-data_warm_0a1b", Warm: true}, "", false},
	} {
		got, ok := personOfContainer(base, tc.c, configured)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%+v: %q %v, want %q %v", tc.c, got, ok, tc.want, tc.ok)
		}
	}
}

// TestConfig: the operator's sandbox keeps today's names and the site's limits; a
// person's is named after them and takes their own limits, the site's where they give
// none.
func TestConfig(t *testing.T) {
	base := testBase("box")
	base.Volume, base.CPUs, base.PidsLimit = "data", 2, 1000
	f := &Fleet{o: Options{Base: base, People: []Person{{Name: "alice"}, {Name: "bob", Memory: "1g", CPUs: 0.5, PidsLimit: 100}}}}
	op, err := f.Config("")
	if err != nil || op.Container != "box" || op.Volume != "data" || op.CPUs != 2 {
		t.Fatalf("operator: %+v %v", op, err)
	}
	alice, err := f.Config("alice")
	if err != nil || alice.Container != "box-alice" || alice.Volume != "data-alice" || alice.Person != "alice" ||
		alice.Memory != op.Memory || alice.CPUs != 2 || alice.PidsLimit != 1000 {
		t.Fatalf("alice: %+v %v", alice, err)
	}
	bob, err := f.Config("bob")
	gb, _ := sandbox.ParseMemory("1g")
	if err != nil || bob.Container != "box-bob" || bob.Memory != gb || bob.CPUs != 0.5 || bob.PidsLimit != 100 {
		t.Fatalf("bob: %+v %v", bob, err)
	}
	if _, err := f.Config("carol"); err == nil {
		t.Fatal("a person who is not configured has a sandbox")
	}
	if _, err := PersonConfig(base, Person{Name: "dave", Memory: "lots"}); err == nil || !strings.Contains(err.Error(), "person dave: memory") {
		t.Fatalf("a person's bad memory: %v", err)
	}
}

// TestMaxSandboxes: people get sandboxes of their own until max_sandboxes of them
// exist; the next new person is told the setting, while those who have one keep it.
func TestMaxSandboxes(t *testing.T) {
	f, err := New(Options{Base: testBase("max-sandboxes-test"), MaxSandboxes: 1, Acquire: newPool(t).acquire,
		People: []Person{{Name: "alice"}, {Name: "bob"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	a, err := f.For(t.Context(), "alice")
	if err != nil || a.Sandbox().Config().Container != "max-sandboxes-test-alice" {
		t.Fatalf("alice: %v", err)
	}
	if _, err := f.For(t.Context(), "bob"); err == nil || !strings.Contains(err.Error(), "max_sandboxes") {
		t.Fatalf("bob beyond max_sandboxes: %v", err)
	}
	if again, err := f.For(t.Context(), "alice"); err != nil || again != a {
		t.Fatalf("alice again: %v", err)
	}
}

// TestCloseGivesBack: Close gives back the operator's sandbox and every person's the
// fleet placed, and a call that outlives it gets no sandbox for a person not placed
// yet (nothing would give it back) and holds nothing.
func TestCloseGivesBack(t *testing.T) {
	p := newPool(t)
	f, err := New(Options{Base: testBase("close-test"), Acquire: p.acquire, People: []Person{{Name: "alice"}, {Name: "bob"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.For(t.Context(), "alice"); err != nil {
		t.Fatal(err)
	}
	if n := p.held.Load(); n != 2 {
		t.Fatalf("%d holds, want 2 (the operator's and alice's)", n)
	}
	if got := len(f.Entries()); got != 2 {
		t.Fatalf("%d entries, want 2", got)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := p.held.Load(); n != 0 {
		t.Fatalf("%d holds after Close", n)
	}
	if _, err := f.Entry(t.Context(), "bob"); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("bob after Close: %v, want ErrClosed", err)
	}
	if n := p.held.Load(); n != 0 {
		t.Fatalf("%d holds after placing bob on a closed fleet", n)
	}
	if f.Held("bob") != nil {
		t.Fatal("the closed fleet holds bob's sandbox")
	}
}

// TestPlacedHook: the caller readies a person's sandbox once, when it is first
// placed, and a failure there gives the sandbox back and is the caller's error.
func TestPlacedHook(t *testing.T) {
	p := newPool(t)
	var readied []string
	fail := errors.New("no egress for you")
	f, err := New(Options{Base: testBase("placed-test"), Acquire: p.acquire, People: []Person{{Name: "alice"}, {Name: "bob"}},
		Placed: func(e *Entry, person string) error {
			readied = append(readied, person+"="+e.Sandbox().Config().Container)
			if person == "bob" {
				return fail
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	for range 2 {
		if _, err := f.For(t.Context(), "alice"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.For(t.Context(), "bob"); !errors.Is(err, fail) {
		t.Fatalf("bob: %v, want the hook's error", err)
	}
	if got := strings.Join(readied, " "); got != "alice=placed-test-alice bob=placed-test-bob" {
		t.Fatalf("readied %q", got)
	}
	if n := p.held.Load(); n != 2 {
		t.Fatalf("%d holds, want 2: bob's failed placement is given back", n)
	}
	if _, err := f.For(t.Context(), "carol"); err == nil || !strings.Contains(err.Error(), `no person "carol"`) {
		t.Fatalf("carol, not configured: %v", err)
	}
}

// TestRunningRefusesStrangers: the console's look at a person's running sandbox
// knows only the configured people.
func TestRunningRefusesStrangers(t *testing.T) {
	f, err := New(Options{Base: testBase("running-test"), Acquire: newPool(t).acquire, People: []Person{{Name: "alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := f.Running(ctx, "mallory"); !errors.Is(err, ErrNotConfigured) {
		t.Fatalf("mallory: %v, want ErrNotConfigured", err)
	}
	// The engine does not answer: the look fails, and places nothing.
	if sb, err := f.Running(ctx, "alice"); err == nil || sb != nil {
		t.Fatalf("alice with no engine: %v %v", sb, err)
	}
	if f.Held("alice") != nil {
		t.Fatal("looking placed alice's sandbox")
	}
}
