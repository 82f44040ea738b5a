package egress

import (
	"context"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// scripted answers questions as told and counts them.
type scripted struct {
	answer Answer
	err    error
	wait   chan struct{} // if set, each question waits for it
	asked  atomic.Int32
}

func (s *scripted) Ask(ctx context.Context, q Question) (Answer, error) {
	s.asked.Add(1)
	if s.wait != nil {
		select {
		case <-s.wait:
		case <-ctx.Done():
			return Deny, ctx.Err()
		}
	}
	return s.answer, s.err
}

type memKV struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (k *memKV) Load(_ context.Context, key string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, ok := k.m[key]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return b, nil
}

func (k *memKV) Store(_ context.Context, key string, v []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[key] = v
	return nil
}

func askGateway(t *testing.T, a Asker, ap Approvals) *Gateway {
	t.Helper()
	g := NewGateway(Options{Sandbox: newBox()})
	if err := g.Configure(Settings{Person: "alice", Asker: a, Approvals: ap}); err != nil {
		t.Fatal(err)
	}
	return g
}

const jobA, jobB = "j0123456789aa", "j0123456789bb"

func notAllowed(host string) *Refusal {
	return &Refusal{Host: host, Port: 443, Reason: ReasonNotAllowed}
}

func TestAskOnceIsPerJob(t *testing.T) {
	s := &scripted{answer: AllowOnce}
	g := askGateway(t, s, nil)
	ctx := context.Background()
	if r := g.ask(ctx, jobA, notAllowed("pkg.test")); r != nil {
		t.Fatalf("allow once refused: %v", r)
	}
	if r := g.ask(ctx, jobA, notAllowed("pkg.test")); r != nil || s.asked.Load() != 1 {
		t.Fatalf("the same command asked again (%d) or was refused: %v", s.asked.Load(), r)
	}
	if r := g.ask(ctx, jobB, notAllowed("pkg.test")); r != nil || s.asked.Load() != 2 {
		t.Fatalf("the next command was not asked: %d, %v", s.asked.Load(), r)
	}
}

func TestAskDenyTimeoutAndNobody(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		s      *scripted
		reason string
	}{
		{&scripted{answer: Deny}, ReasonDeclined},
		{&scripted{err: fmt.Errorf("no session: %w", ErrCannotAsk)}, ReasonCannotAsk},
		{&scripted{err: context.DeadlineExceeded}, ReasonNoAnswer},
	} {
		g := askGateway(t, c.s, nil)
		r := g.ask(ctx, jobA, notAllowed("pkg.test"))
		if r == nil || r.Reason != c.reason || r.Host != "pkg.test" {
			t.Fatalf("want %q, got %v", c.reason, r)
		}
	}
	// Only hosts the operator did not list are asked about.
	s := &scripted{answer: AllowAlways}
	g := askGateway(t, s, nil)
	if r := g.ask(ctx, jobA, &Refusal{Host: "x.test", Port: 443, Reason: ReasonDenied}); r == nil || r.Reason != ReasonDenied || s.asked.Load() != 0 {
		t.Fatalf("a denied host was asked about: %v", r)
	}
	if r := g.ask(ctx, "not-a-job", notAllowed("x.test")); r == nil || s.asked.Load() != 0 {
		t.Fatalf("a connection without a job was asked about: %v", r)
	}
	// Without an asker, the refusal stands.
	g = askGateway(t, nil, nil)
	if r := g.ask(ctx, jobA, notAllowed("x.test")); r == nil || r.Reason != ReasonNotAllowed {
		t.Fatalf("%v", r)
	}
}

func TestAskAlwaysIsKeptAndRevocable(t *testing.T) {
	kv := &memKV{m: map[string][]byte{}}
	store := NewApprovalStore(kv, "approvals.json", nil)
	s := &scripted{answer: AllowAlways}
	g := askGateway(t, s, store)
	ctx := context.Background()
	if r := g.ask(ctx, jobA, notAllowed("pkg.test")); r != nil {
		t.Fatal(r)
	}
	if r := g.ask(ctx, jobB, notAllowed("pkg.test")); r != nil || s.asked.Load() != 1 {
		t.Fatalf("asked again after allow always: %d %v", s.asked.Load(), r)
	}
	// A new store over the same storage (a restart) knows it.
	again := NewApprovalStore(kv, "approvals.json", nil)
	list, err := again.List(ctx)
	if err != nil || len(list) != 1 || list[0].Person != "alice" || list[0].Host != "pkg.test" || list[0].Port != 443 {
		t.Fatalf("%+v %v", list, err)
	}
	if ok, err := store.Revoke(ctx, list[0].ID); !ok || err != nil {
		t.Fatalf("revoke: %v %v", ok, err)
	}
	s.answer = Deny
	if r := g.ask(ctx, "j0123456789cc", notAllowed("pkg.test")); r == nil || s.asked.Load() != 2 {
		t.Fatalf("a revoked approval still applies: %d %v", s.asked.Load(), r)
	}
	// Another person's approval is not this one's.
	if err := store.Approve(ctx, "bob", "other.test", 443); err != nil {
		t.Fatal(err)
	}
	if store.Approved("alice", "other.test", 443) || !store.Approved("bob", "other.test", 443) {
		t.Fatal("approvals are not per person")
	}
}

// One question per host at a time: a second connection waits for the first's answer;
// a command asks about a few hosts at most.
func TestAskBounded(t *testing.T) {
	s := &scripted{answer: Deny, wait: make(chan struct{})}
	g := askGateway(t, s, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	results := make([]*Refusal, 3)
	for i := range results {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = g.ask(ctx, jobA, notAllowed("pkg.test")) }()
	}
	time.Sleep(100 * time.Millisecond)
	close(s.wait)
	wg.Wait()
	if s.asked.Load() != 1 {
		t.Fatalf("%d questions for one host at once", s.asked.Load())
	}
	for _, r := range results {
		if r == nil || r.Reason != ReasonDeclined {
			t.Fatalf("%v", r)
		}
	}
	for i := 0; i < MaxAskedPerJob; i++ {
		g.ask(ctx, jobB, notAllowed(fmt.Sprintf("h%d.test", i)))
	}
	r := g.ask(ctx, jobB, notAllowed("more.test"))
	if r == nil || r.Reason != ReasonAskedTooMuch || int(s.asked.Load()) != 1+MaxAskedPerJob {
		t.Fatalf("a flood was asked about: %d %v", s.asked.Load(), r)
	}
	// Questions open at once are bounded across the sandbox's commands.
	s.wait = make(chan struct{})
	var open sync.WaitGroup
	for i := 0; i < MaxAsking; i++ {
		open.Add(1)
		go func() { defer open.Done(); g.ask(ctx, fmt.Sprintf("j01234567890%c", 'c'+i), notAllowed("busy.test")) }()
		open.Add(1)
		go func() {
			defer open.Done()
			g.ask(ctx, fmt.Sprintf("j01234567890%c", 'c'+i), notAllowed(fmt.Sprintf("b%d.test", i)))
		}()
	}
	openNow := func() int { g.asking.mu.Lock(); defer g.asking.mu.Unlock(); return len(g.asking.open) }
	for i := 0; i < 300 && openNow() < MaxAsking; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	r = g.ask(ctx, "j0123456789zz", notAllowed("late.test"))
	close(s.wait)
	open.Wait()
	if r == nil || r.Reason != ReasonAskingBusy {
		t.Fatalf("more questions than MaxAsking were opened: %v", r)
	}
}

// The proxy puts a refused host to Ask and, allowed, reaches it (plain HTTP and
// CONNECT) without the credential the policy has for other hosts.
func TestProxyAsks(t *testing.T) {
	up, hits, _ := upstream(t)
	port := portOf(t, up.URL)
	var asked atomic.Int32
	f := newProxyFixtureWith(t, Rules{Hosts: map[string]string{"asked.test": "127.0.0.1", "no.test": "127.0.0.1"}}, func(p *Proxy) {
		p.Ask = func(_ context.Context, user string, r *Refusal) *Refusal {
			asked.Add(1)
			if r.Host == "asked.test" && user == jobA {
				return nil
			}
			return &Refusal{Host: r.Host, Port: r.Port, Reason: ReasonDeclined}
		}
	})
	res, err := f.client(jobA).Get("http://asked.test:" + port + "/x")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || hits.Load() != 1 {
		t.Fatalf("allowed host: %d, %d hits", res.StatusCode, hits.Load())
	}
	res, err = f.client(jobA).Get("http://no.test:" + port + "/x")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 403 || hits.Load() != 1 || asked.Load() != 2 {
		t.Fatalf("refused host: %d, %d hits", res.StatusCode, hits.Load())
	}
	if got := f.refusals(); len(got) != 1 || got[0] != jobA+" blocked: no.test (refused by the person)" {
		t.Fatalf("%q", got)
	}
}

// TestAskableMapped: a name mapped to an inside address is put to the person only when
// the sandbox's own block mapped it; public names and mappings to public addresses are.
func TestAskableMapped(t *testing.T) {
	pol, err := Compile(Rules{
		Hosts:     map[string]string{"site.test": "127.0.0.1", "own.test": "10.1.2.3", "public.test": "8.8.8.8"},
		AskMapped: []string{"OWN.test."},
	})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"site.test": false, "SITE.test": false, "own.test": true, "public.test": true,
		"example.com": true, "bad..name": false,
		// Addresses the proxy never dials are not put to the person.
		"127.0.0.1": false, "10.0.0.5": false, "192.168.1.1": false, "169.254.169.254": false,
		"::1": false, "fd00::1": false, "8.8.4.4": true,
	} {
		if got := pol.Askable(host); got != want {
			t.Errorf("Askable(%q) = %v, want %v", host, got, want)
		}
	}
}

// byJob answers Deny for the one job a person's call runs and cannot ask for any other
// (a job id the sandbox made up).
type byJob struct {
	job   string
	asked atomic.Int32
}

func (b *byJob) Ask(_ context.Context, q Question) (Answer, error) {
	if q.Job != b.job {
		return Deny, fmt.Errorf("no call runs job %s: %w", q.Job, ErrCannotAsk)
	}
	b.asked.Add(1)
	return Deny, nil
}

// TestAskLimitNotResetByMadeUpJobs: made-up job ids, which nobody can be asked for,
// do not push a real job's count of questions out, so the limit holds.
func TestAskLimitNotResetByMadeUpJobs(t *testing.T) {
	b := &byJob{job: jobA}
	g := askGateway(t, b, nil)
	ctx := context.Background()
	for i := 0; i < MaxAskedPerJob; i++ {
		if r := g.ask(ctx, jobA, notAllowed(fmt.Sprintf("h%d.test", i))); r == nil || r.Reason != ReasonDeclined {
			t.Fatalf("question %d: %v", i, r)
		}
	}
	for i := 0; i <= maxAskJobs; i++ {
		if r := g.ask(ctx, fmt.Sprintf("j%012x", i), notAllowed("made-up.test")); r == nil || r.Reason != ReasonCannotAsk {
			t.Fatalf("made-up job %d: %v", i, r)
		}
	}
	if r := g.ask(ctx, jobA, notAllowed("more.test")); r == nil || r.Reason != ReasonAskedTooMuch {
		t.Fatalf("after %d made-up jobs the real one asked again: %v (asked %d)", maxAskJobs+1, r, b.asked.Load())
	}
	g.asking.mu.Lock()
	n := len(g.asking.jobs)
	g.asking.mu.Unlock()
	if n != 1 {
		t.Errorf("%d jobs kept, want the real one only", n)
	}
}

// TestAskOnceEndsWithJob: "allow once" is the asking job's for as long as it runs.
// Once it ends (or after AllowOnceFor, whichever comes first), a connection that
// carries its id is asked about again: a later command that reuses the id (the
// sandbox chooses proxy user names) does not inherit the answer.
func TestAskOnceEndsWithJob(t *testing.T) {
	s := &scripted{answer: AllowOnce}
	c := &clock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	g := NewGateway(Options{Sandbox: newBox(), Now: c.now})
	if err := g.Configure(Settings{Person: "alice", Asker: s}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if r := g.ask(ctx, jobA, notAllowed("pkg.test")); r != nil || s.asked.Load() != 1 {
		t.Fatalf("allow once: %d, %v", s.asked.Load(), r)
	}
	c.add(AllowOnceFor - time.Second)
	if r := g.ask(ctx, jobA, notAllowed("pkg.test")); r != nil || s.asked.Load() != 1 {
		t.Fatalf("the job that runs still was asked again (%d) or refused: %v", s.asked.Load(), r)
	}
	g.JobEnded(jobA)
	s.answer = Deny
	if r := g.ask(ctx, jobA, notAllowed("pkg.test")); r == nil || r.Reason != ReasonDeclined || s.asked.Load() != 2 {
		t.Fatalf("after the job ended its answer still applies: asked %d, %v", s.asked.Load(), r)
	}

	// Bounded in time too, for a job whose end nobody sees.
	s.answer = AllowOnce
	if r := g.ask(ctx, jobB, notAllowed("pkg.test")); r != nil || s.asked.Load() != 3 {
		t.Fatalf("allow once for %s: %d, %v", jobB, s.asked.Load(), r)
	}
	c.add(AllowOnceFor + time.Second)
	if r := g.ask(ctx, jobB, notAllowed("pkg.test")); r != nil || s.asked.Load() != 4 {
		t.Fatalf("after %v allow once was not asked again: %d, %v", AllowOnceFor, s.asked.Load(), r)
	}
	g.JobEnded(jobA)
	g.JobEnded(jobB)
	g.asking.mu.Lock()
	defer g.asking.mu.Unlock()
	if len(g.asking.once) != 0 || len(g.asking.jobs) != 0 || len(g.asking.asked) != 0 {
		t.Fatalf("ended jobs are kept: %v %v %v", g.asking.once, g.asking.jobs, g.asking.asked)
	}
}
