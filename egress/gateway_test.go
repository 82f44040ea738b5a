package egress

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// box plays a sandbox for a Gateway: its listener is a loopback one the test dials,
// its files a map. What a real container does is judged by the plugin's Docker tests;
// here the listener's failures and ends come when the test says.
type box struct {
	mu      sync.Mutex
	files   map[string][]byte
	fail    error         // what Listen fails with, nil: it listens
	started chan struct{} // closed by the test: the sandbox was made to run
	listens int
	port    int
	ln      net.Listener
	done    chan struct{} // the current listener's channel; closed: it ended
	stopped bool
	running bool // Running says true even though Listen fails with ErrNotRunning (a stop under way)
}

func newBox() *box { return &box{files: map[string][]byte{}, started: make(chan struct{})} }

func (b *box) Listen(_ context.Context, port int, serve func(net.Conn)) (func(), <-chan struct{}, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.listens++
	if b.fail != nil {
		return nil, nil, b.fail
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	b.ln, b.done, b.port = ln, done, port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	var once sync.Once
	stop := func() {
		b.mu.Lock()
		b.stopped = true
		b.mu.Unlock()
		once.Do(func() { ln.Close(); close(done) })
	}
	return stop, done, nil
}

// end ends the current listener, as an agent that goes does.
func (b *box) end() {
	b.mu.Lock()
	ln, done := b.ln, b.done
	b.mu.Unlock()
	ln.Close()
	close(done)
}

func (b *box) Started() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started
}

// start is the sandbox made to run: the next Started channel is a new one.
func (b *box) start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.started)
	b.started = make(chan struct{})
}

func (b *box) Running(context.Context) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running || !errors.Is(b.fail, ErrNotRunning), nil
}

func (b *box) Open(_ context.Context, p string) (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.files[p]
	if !ok {
		return nil, fmt.Errorf("%s: not found", p)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (b *box) WriteFile(_ context.Context, p string, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.files[p] = bytes.Clone(data)
	return nil
}

func (b *box) JobID(name string) bool { return len(name) == 13 && name[0] == 'j' }

func (b *box) file(p string) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.files[p]
}

func (b *box) state() (listens int, addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ln != nil {
		addr = b.ln.Addr().String()
	}
	return b.listens, addr
}

func (b *box) setFail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail = err
}

func gatewayCA(t *testing.T) CA {
	cert, key, _ := testenv.CA(t, "egress test CA")
	return CA{Chain: []*x509.Certificate{cert}, Key: key, Root: cert}
}

// clock is a settable Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The gateway listens where it is told, installs its root in the bundle commands use
// and in the image's own bundle, serves the policy of the latest configuration, and
// tells a job what it refused. When the listener ends it listens again.
func TestGatewayListensAndInstallsCA(t *testing.T) {
	b := newBox()
	system := []byte("-----BEGIN CERTIFICATE-----\nimage root\n-----END CERTIFICATE-----") // no final newline
	b.files["/etc/pki/tls/certs/ca-bundle.crt"] = system
	g := NewGateway(Options{Sandbox: b, Port: 3128, Bundle: "/var/lib/egress/bundle.pem", Container: "c1"})
	t.Cleanup(g.Close)
	ca := gatewayCA(t)
	pol, err := Compile(Rules{Allow: []string{"allowed.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Configure(Settings{Person: "alice", Policy: pol, CA: ca}); err != nil {
		t.Fatal(err)
	}
	if g.Allowed() != "allowed.example" || g.Offline() {
		t.Fatalf("allowed %q, offline %v", g.Allowed(), g.Offline())
	}
	g.Start()
	testenv.WaitFor(t, 5*time.Second, "the CA bundle written", func() bool { return b.file("/var/lib/egress/bundle.pem") != nil })
	ours := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Root.Raw})
	want := append(append(bytes.Clone(system), '\n'), ours...)
	if got := b.file("/var/lib/egress/bundle.pem"); !bytes.Equal(got, want) {
		t.Fatalf("bundle:\n%s\nwant:\n%s", got, want)
	}
	testenv.WaitFor(t, 5*time.Second, "the image's bundle", func() bool { return bytes.Equal(b.file("/etc/pki/tls/certs/ca-bundle.crt"), want) })
	if b.file("/etc/ssl/certs/ca-certificates.crt") != nil {
		t.Fatal("a bundle the image lacks was made")
	}
	listens, addr := b.state()
	if listens != 1 || b.port != 3128 {
		t.Fatalf("%d listens on port %d", listens, b.port)
	}

	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr, User: url.User("j0123456789ab")})}, Timeout: 10 * time.Second}
	resp, err := client.Get("http://refused.example/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a refused host: %d", resp.StatusCode)
	}
	if got := g.TakeBlocked("j0123456789ab"); len(got) != 1 || got[0] != "refused.example (not allowed by the operator)" {
		t.Fatalf("blocked %q", got)
	}

	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "a connection served", func() bool { return g.Conns() == 1 })
	raw.Close()
	testenv.WaitFor(t, 5*time.Second, "the connection's end", func() bool { return g.Conns() == 0 })

	b.end()
	b.start() // the next agent comes with the container's start
	testenv.WaitFor(t, 5*time.Second, "a second listener", func() bool { n, _ := b.state(); return n == 2 })
}

// A listener that cannot be made leaves the sandbox offline, logged once per reason;
// one that can brings it back. A sandbox that does not run is waited for, not retried
// and not offline.
func TestGatewayOfflineAndStopped(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	b := newBox()
	b.setFail(errors.New("the agent does not run"))
	g := NewGateway(Options{Sandbox: b, Port: 3128, Bundle: "/bundle.pem", Offline: "the agent is off", Logger: zap.New(core)})
	t.Cleanup(g.Close)
	if !g.Offline() {
		t.Fatal("not offline before listening")
	}
	g.Start()
	testenv.WaitFor(t, 5*time.Second, "a first try", func() bool { n, _ := b.state(); return n == 1 })
	b.start()
	testenv.WaitFor(t, 5*time.Second, "a second try", func() bool { n, _ := b.state(); return n == 2 })
	if !g.Offline() {
		t.Fatal("online without a listener")
	}
	if n := logs.FilterMessage("the egress proxy cannot listen in the sandbox, which stays offline").Len(); n != 1 {
		t.Fatalf("logged %d times, want once: %+v", n, logs.All())
	}

	b.setFail(fmt.Errorf("%w: container stopped", ErrNotRunning))
	b.start()
	testenv.WaitFor(t, 5*time.Second, "a third try", func() bool { n, _ := b.state(); return n == 3 })
	time.Sleep(3 * retryMin / 2) // beyond a retry after a failure: a stopped sandbox is waited for
	if n, _ := b.state(); n != 3 {
		t.Fatalf("a stopped sandbox was tried %d times, want 3", n)
	}
	if logs.Len() != 1 {
		t.Fatalf("a stopped sandbox was logged: %+v", logs.All())
	}

	b.setFail(nil)
	b.start()
	testenv.WaitFor(t, 5*time.Second, "listening once started", func() bool { return !g.Offline() })
	g.Close()
	b.mu.Lock()
	stopped := b.stopped
	b.mu.Unlock()
	if !stopped {
		t.Fatal("Close left the listener")
	}
	g.Start() // after Close: nothing
	if n, _ := b.state(); n != 4 {
		t.Fatalf("%d listens after Close, want 4", n)
	}
}

// A listener that ends because the sandbox is being stopped or restarted, which then
// cannot listen for a moment (ErrNotRunning while it still runs), is not offline and
// logs nothing; it listens again within retryMin of the sandbox's running again,
// without waiting for a start it might not see.
func TestGatewayStoppingNotOffline(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	b := newBox()
	g := NewGateway(Options{Sandbox: b, Port: 3128, Bundle: "/bundle.pem", Logger: zap.New(core)})
	t.Cleanup(g.Close)
	g.Start()
	testenv.WaitFor(t, 5*time.Second, "listening", func() bool { n, addr := b.state(); return n == 1 && addr != "" })
	time.Sleep(steady) // the listener lasted: it listens again at once when it ends
	b.mu.Lock()
	b.fail, b.running = fmt.Errorf("%w: being stopped", ErrNotRunning), true
	b.mu.Unlock()
	b.end()
	testenv.WaitFor(t, 5*time.Second, "a try while it stops", func() bool { n, _ := b.state(); return n >= 2 })
	if g.Offline() || logs.Len() != 0 {
		t.Fatalf("offline (%v) or logged while stopping: %+v", g.Offline(), logs.All())
	}
	b.mu.Lock()
	b.fail, b.running = nil, false
	old := b.ln
	b.mu.Unlock()
	testenv.WaitFor(t, 2*retryMin, "listening again", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.ln != old
	})
	if g.Offline() || logs.Len() != 0 {
		t.Fatalf("offline (%v) or logged: %+v", g.Offline(), logs.All())
	}
}

// The CA is provisioned again (with the latest configuration) when its signing
// certificate nears expiry, and not before; the new one is the one shown then.
func TestGatewayCARenewal(t *testing.T) {
	ca := gatewayCA(t) // valid for a day
	c := &clock{t: ca.Chain[0].NotAfter.Add(-CARenewBefore - time.Hour)}
	g := NewGateway(Options{Sandbox: newBox(), Now: c.now})
	renewed := 0
	next := gatewayCA(t)
	err := g.Configure(Settings{CA: ca, RenewCA: func() (CA, error) { renewed++; return next, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.renewIfDue(); err != nil || renewed != 0 {
		t.Fatalf("renewed early: %d, %v", renewed, err)
	}
	c.add(2 * time.Hour)
	if err := g.renewIfDue(); err != nil || renewed != 1 {
		t.Fatalf("not renewed within %v of expiry: %d, %v", CARenewBefore, renewed, err)
	}
	if got := *g.rootPEM.Load(); !bytes.Contains(got, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: next.Root.Raw})) {
		t.Fatal("the renewed CA's root is not the one installed")
	}
	if err := g.Configure(Settings{CA: ca, TrustCA: []string{"/nonexistent/ca.pem"}}); err == nil || !strings.Contains(err.Error(), "trust_ca") {
		t.Fatalf("a missing trust_ca file: %v", err)
	}
}

// A job's refusals are kept once each, bounded, and handed out once.
func TestGatewayRefusalsPerJob(t *testing.T) {
	g := NewGateway(Options{Sandbox: newBox()})
	for i := 0; i < 20; i++ {
		g.refused("j0123456789ab", &Refusal{Host: "a.example", Reason: ReasonNotAllowed})
		g.refused("j0123456789ab", &Refusal{Host: "h" + string(rune('a'+i)) + ".example", Reason: ReasonNotAllowed})
	}
	g.refused("not a job id", &Refusal{Host: "b.example", Reason: ReasonDenied})
	list := g.TakeBlocked("j0123456789ab")
	if len(list) != maxBlockedPerJob || list[0] != "a.example (not allowed by the operator)" {
		t.Fatalf("%q", list)
	}
	if again := g.TakeBlocked("j0123456789ab"); len(again) != 0 {
		t.Fatalf("handed out twice: %q", again)
	}
	if c := g.RefusedCounts(); c[0] != (HostCount{"a.example", 20}) || len(c) != 22 {
		t.Fatalf("%+v", c)
	}
}

// Refusals are counted for at most MaxRefusedHosts hosts, then under OtherHosts, in
// what the gateway keeps and in what it counts for the metric.
func TestGatewayRefusedHostsBounded(t *testing.T) {
	counted := map[string]int{}
	g := NewGateway(Options{Sandbox: newBox(), Refused: func(host, person string) { counted[host+"|"+person]++ }})
	for i := 0; i < MaxRefusedHosts+50; i++ {
		g.refused("", &Refusal{Host: fmt.Sprintf("h%d.example", i), Reason: ReasonNotAllowed})
	}
	g.refused("", &Refusal{Host: "h0.example", Reason: ReasonDenied})
	list := g.Refusals()
	if len(list) != MaxRefusedHosts+1 {
		t.Fatalf("%d hosts kept, want %d", len(list), MaxRefusedHosts+1)
	}
	if counted[OtherHosts+"|"] != 50 || counted["h0.example|"] != 2 || len(counted) != MaxRefusedHosts+1 {
		t.Fatalf("counted %d under %s, %d for h0, %d keys", counted[OtherHosts+"|"], OtherHosts, counted["h0.example|"], len(counted))
	}
	for _, r := range list {
		if r.Host == "h0.example" && (r.Count != 2 || r.Reason != ReasonDenied) {
			t.Fatalf("h0: %+v", r)
		}
	}
}

// A refusal in a person's sandbox names the person: in the log line (with the
// container), in what is counted for the metric and in what the console lists.
func TestGatewayRefusalNamesPerson(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	var counted []string
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	g := NewGateway(Options{Sandbox: newBox(), Container: "mcp-sandbox-alice", Logger: zap.New(core),
		Now: func() time.Time { return at }, Refused: func(host, person string) { counted = append(counted, host+"|"+person) }})
	if err := g.Configure(Settings{Person: "alice", CA: gatewayCA(t)}); err != nil {
		t.Fatal(err)
	}
	g.refused("j0123456789ab", &Refusal{Host: "x.example", Port: 443, Reason: ReasonNotAllowed})
	if len(counted) != 1 || counted[0] != "x.example|alice" {
		t.Fatalf("counted %q", counted)
	}
	entries := logs.FilterMessage("egress refused").All()
	if len(entries) != 1 {
		t.Fatalf("log %+v", logs.All())
	}
	if m := entries[0].ContextMap(); m["person"] != "alice" || m["host"] != "x.example" || m["container"] != "mcp-sandbox-alice" || m["job"] != "j0123456789ab" || m["port"] != int64(443) {
		t.Fatalf("log fields %+v", m)
	}
	list := g.Refusals()
	if len(list) != 1 || list[0] != (HostRefusals{Person: "alice", Host: "x.example", Reason: ReasonNotAllowed, Count: 1, LastAt: at}) {
		t.Fatalf("refusals %+v", list)
	}
}

// Reaching the connection cap is logged, with the person and container, at most once
// a minute.
func TestGatewayCapLogged(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	c := &clock{t: time.Now()}
	g := NewGateway(Options{Sandbox: newBox(), Container: "c-bob", Logger: zap.New(core), Now: c.now})
	if err := g.Configure(Settings{Person: "bob", CA: gatewayCA(t)}); err != nil {
		t.Fatal(err)
	}
	g.turnedAway()
	c.add(59 * time.Second)
	g.turnedAway()
	entries := logs.All()
	if len(entries) != 1 || entries[0].ContextMap()["person"] != "bob" || entries[0].ContextMap()["container"] != "c-bob" ||
		entries[0].ContextMap()["cap"] != int64(DefaultMaxConns) {
		t.Fatalf("log %+v", entries)
	}
	c.add(2 * time.Second)
	g.turnedAway()
	if logs.Len() != 2 {
		t.Fatalf("%d lines a minute on, want 2", logs.Len())
	}
}

// A sandbox's refusals live in a RefusalLog that outlives its gateway: a reload that
// makes a new gateway for the sandbox (or places it anew later) and configures it with
// the same log lists them still, and hands out a job's refusals once.
func TestRefusalsOutliveTheGateway(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	log := NewRefusalLog()
	g1 := NewGateway(Options{Sandbox: newBox(), Now: func() time.Time { return at }})
	if err := g1.Configure(Settings{Person: "alice", CA: gatewayCA(t), Refusals: log}); err != nil {
		t.Fatal(err)
	}
	g1.Start()
	g1.refused("j0123456789ab", &Refusal{Host: "x.example", Port: 443, Reason: ReasonNotAllowed})
	g1.Close()

	g2 := NewGateway(Options{Sandbox: newBox()})
	if err := g2.Configure(Settings{Person: "alice", CA: gatewayCA(t), Refusals: log}); err != nil {
		t.Fatal(err)
	}
	want := HostRefusals{Person: "alice", Host: "x.example", Reason: ReasonNotAllowed, Count: 1, LastAt: at}
	if list := g2.Refusals(); len(list) != 1 || list[0] != want {
		t.Fatalf("the new gateway lists %+v, want %+v", list, want)
	}
	if list := log.Refusals(); len(list) != 1 || list[0].Host != "x.example" || list[0].Count != 1 {
		t.Fatalf("the log lists %+v", list)
	}
	if b := g2.TakeBlocked("j0123456789ab"); len(b) != 1 || b[0] != "x.example (not allowed by the operator)" {
		t.Fatalf("the job's refusals through the new gateway: %q", b)
	}
	g2.refused("", &Refusal{Host: "x.example", Port: 443, Reason: ReasonDenied})
	if list := log.Refusals(); len(list) != 1 || list[0].Count != 2 || list[0].Reason != ReasonDenied {
		t.Fatalf("the log after one more: %+v", list)
	}
}
