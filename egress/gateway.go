package egress

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Sandbox is what a [Gateway] needs from the sandbox it serves. Every call is upkeep:
// none creates or starts a sandbox that does not run; each fails then with an error
// that wraps [ErrNotRunning].
type Sandbox interface {
	// Listen listens on port on the sandbox's loopback and calls serve, in a goroutine
	// of its own, with each connection a program in the sandbox makes to it. The
	// listener lasts until stop is called or the channel under it ends (done is
	// closed then).
	Listen(ctx context.Context, port int, serve func(net.Conn)) (stop func(), done <-chan struct{}, err error)
	// Started returns a channel closed the next time the sandbox is made to run.
	Started() <-chan struct{}
	// Running reports whether the sandbox runs now.
	Running(ctx context.Context) (bool, error)
	// Open streams the regular file at the absolute path p in the sandbox.
	Open(ctx context.Context, p string) (io.ReadCloser, error)
	// WriteFile creates or replaces the file at the absolute path p in the sandbox.
	WriteFile(ctx context.Context, p string, data []byte) error
	// JobID reports whether name (a proxy user name, which the sandbox chooses) is
	// the form of the sandbox's job ids.
	JobID(name string) bool
}

// ErrNotRunning is wrapped by the errors of a [Sandbox] that does not run.
var ErrNotRunning = errors.New("the sandbox does not run")

// Options configure a [Gateway]; only Sandbox, Port and Bundle are required.
type Options struct {
	Sandbox Sandbox
	// Port is where the proxy listens on the sandbox's loopback.
	Port int
	// Bundle is the CA bundle file, in the sandbox, that commands are pointed at.
	Bundle string
	// Container names the sandbox in log lines.
	Container string
	// Offline, if set, is why the proxy cannot listen, known before it tries.
	Offline string
	// Logger logs refusals and the listener's trouble (nil: none).
	Logger *zap.Logger
	// Now is the clock of what is recorded and renewed by date (refusals, the cap's
	// log line, the CA); nil: time.Now. Retries wait in real time.
	Now func() time.Time
	// Refused, if set, counts each refusal by the host as kept (see [MaxRefusedHosts])
	// and the person whose sandbox asked.
	Refused func(host, person string)
}

// CA is the authority intercepted hosts are shown: the intermediate (first in Chain)
// and Key sign the certificates, Root is what the sandbox is made to trust.
type CA struct {
	Chain []*x509.Certificate
	Key   crypto.Signer
	Root  *x509.Certificate
}

// Settings are what one configuration says of a sandbox's proxy.
type Settings struct {
	// Person is whose sandbox this is: "" for the operator's, or the one shared.
	Person string
	// Policy is the policy in force (nil: nothing is allowed).
	Policy *Policy
	CA     CA
	// TrustCA lists PEM files of extra roots that upstreams of intercepted hosts are
	// verified with, on top of the system's.
	TrustCA []string
	// RenewCA, if set, provisions the CA again; it is called when the intermediate
	// has less than [CARenewBefore] left.
	RenewCA func() (CA, error)
	// Asker, if set, is asked about hosts the policy does not allow (and does not
	// deny): the connection waits for the person's answer. Nil: they are refused.
	Asker Asker
	// Approvals keeps what people allowed always (nil: allow always is allow once).
	Approvals Approvals
	// Refusals, if set, is where the sandbox's refusals are kept from now on: a log
	// that outlives this gateway (a reload may make a new one, or place the sandbox
	// anew later). Nil: the gateway's own.
	Refusals *RefusalLog
}

// Bounds of what a Gateway remembers of refusals (a hostile command can make many),
// and of its retries and reads.
const (
	// MaxRefusedHosts is how many hosts' refusals are counted per sandbox; beyond
	// them refusals are counted under [OtherHosts].
	MaxRefusedHosts = 200
	// OtherHosts is the host refusals beyond MaxRefusedHosts are counted under.
	OtherHosts = "(other)"
	// CARenewBefore: the CA's intermediate is made anew when less than this is left
	// of it.
	CARenewBefore = 2 * 24 * time.Hour

	maxBlockedJobs   = 1000
	maxBlockedPerJob = 8
	retryMin         = 2 * time.Second
	retryMax         = time.Minute
	steady           = 10 * time.Second // a listener that lasted this long was no failure
	maxSystemBundle  = 8 << 20          // the image's bundle read back from the sandbox
)

// systemBundles are where images keep their CA bundle (Debian and Ubuntu, RHEL and
// Fedora, Alpine).
var systemBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// Gateway is one sandbox's way out: its [Proxy], kept listening in the sandbox, the
// policy and CA the latest configuration set, and the refusals it made (in a
// [RefusalLog] that a configuration may give, to outlive the gateway). It outlives
// configuration reloads that keep the sandbox's settings.
type Gateway struct {
	sb     Sandbox
	opts   Options
	logger *zap.Logger
	proxy  *Proxy

	policy  atomic.Pointer[Policy]
	down    atomic.Pointer[string] // why the proxy cannot listen, nil while it can
	issuer  atomic.Pointer[CAIssuer]
	roots   atomic.Pointer[x509.CertPool]
	rootPEM atomic.Pointer[[]byte]
	renewCA atomic.Pointer[func() error]
	person  atomic.Pointer[string]
	asker   atomic.Pointer[askSettings]
	asking  asking
	// capLogged is when the connection cap was last logged, Unix nanoseconds.
	capLogged atomic.Int64

	log    atomic.Pointer[RefusalLog]
	once   sync.Once
	cancel context.CancelFunc
	done   chan struct{}
}

// RefusalLog is what one sandbox's proxy refused: counts by host for the console, and
// each job's refusals until its result shows them. It is bounded ([MaxRefusedHosts]
// hosts, 1000 jobs of 8 refusals each) and safe for concurrent use. A sandbox's log
// may outlive its [Gateway] (see [Settings.Refusals]).
type RefusalLog struct {
	mu      sync.Mutex
	blocked map[string][]string  // refusals by job id, until the job's result shows them
	jobs    []string             // ids in blocked, oldest first
	counts  map[string]*refusals // refusals by host
}

// NewRefusalLog makes an empty log.
func NewRefusalLog() *RefusalLog {
	return &RefusalLog{blocked: map[string][]string{}, counts: map[string]*refusals{}}
}

// refusals are one host's refusals in one sandbox.
type refusals struct {
	count  int64
	last   time.Time
	reason string // the latest one's
}

// record keeps a refusal of job ("" when none) at now and returns the host it is
// counted under (OtherHosts beyond MaxRefusedHosts).
func (l *RefusalLog) record(job string, r *Refusal, now time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	host := r.Host
	if _, ok := l.counts[host]; !ok && len(l.counts) >= MaxRefusedHosts {
		host = OtherHosts
	}
	rec := l.counts[host]
	if rec == nil {
		rec = &refusals{}
		l.counts[host] = rec
	}
	rec.count++
	rec.last, rec.reason = now, r.Reason
	if job != "" {
		list, ok := l.blocked[job]
		if !ok {
			if len(l.jobs) >= maxBlockedJobs {
				delete(l.blocked, l.jobs[0])
				l.jobs = l.jobs[1:]
			}
			l.jobs = append(l.jobs, job)
		}
		line := fmt.Sprintf("%s (%s)", r.Host, r.Reason)
		if len(list) < maxBlockedPerJob && !slices.Contains(list, line) {
			l.blocked[job] = append(list, line)
		} else if !ok {
			l.blocked[job] = list
		}
	}
	return host
}

// takeBlocked returns, once, the refusals of job.
func (l *RefusalLog) takeBlocked(job string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	list := l.blocked[job]
	if len(list) > 0 {
		l.blocked[job] = nil
	}
	return list
}

// Refusals is the log's refusals by host, in no order, Person left empty.
func (l *RefusalLog) Refusals() []HostRefusals {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]HostRefusals, 0, len(l.counts))
	for h, r := range l.counts {
		out = append(out, HostRefusals{Host: h, Reason: r.reason, Count: r.count, LastAt: r.last})
	}
	return out
}

// NewGateway makes the gateway of one sandbox. It allows nothing until [Gateway.Configure]
// and listens from [Gateway.Start] on.
func NewGateway(o Options) *Gateway {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	g := &Gateway{sb: o.Sandbox, opts: o, logger: o.Logger}
	g.log.Store(NewRefusalLog())
	g.policy.Store(&Policy{})
	g.proxy = &Proxy{Policy: g.policy.Load, Refused: g.refused, Failed: g.unreachable, Ask: g.ask, TurnedAway: g.turnedAway, Issuer: issuerOf{g}, UpstreamRoots: g.roots.Load}
	if o.Offline != "" {
		why := o.Offline
		g.down.Store(&why)
	}
	return g
}

// Configure sets what a configuration says: whose sandbox it is, the policy in force,
// the CA, the extra upstream roots and how to renew the CA. It fails, changing
// nothing, when a TrustCA file holds no certificate.
func (g *Gateway) Configure(s Settings) error {
	if err := g.setCA(s.CA, s.TrustCA); err != nil {
		return err
	}
	g.person.Store(&s.Person)
	if s.Refusals != nil {
		g.log.Store(s.Refusals)
	}
	if s.RenewCA == nil {
		g.renewCA.Store(nil)
	} else {
		renew := func() error {
			ca, err := s.RenewCA()
			if err != nil {
				return err
			}
			return g.setCA(ca, s.TrustCA)
		}
		g.renewCA.Store(&renew)
	}
	if s.Asker == nil {
		g.asker.Store(nil)
	} else {
		g.asker.Store(&askSettings{asker: s.Asker, approvals: s.Approvals})
	}
	pol := s.Policy
	if pol == nil {
		pol = &Policy{}
	}
	g.policy.Store(pol)
	return nil
}

// setCA makes ca the one intercepted hosts are shown, and trustCA (PEM files) the extra
// roots upstreams are verified with, on top of the system's.
func (g *Gateway) setCA(ca CA, trustCA []string) error {
	roots, err := TrustRoots(trustCA)
	if err != nil {
		return err
	}
	g.roots.Store(roots)
	g.issuer.Store(NewCAIssuer(ca.Chain, ca.Key))
	var rootPEM []byte
	if ca.Root != nil {
		rootPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Root.Raw})
	}
	g.rootPEM.Store(&rootPEM)
	return nil
}

// TrustRoots is the system's roots plus those in the trustCA PEM files.
func TrustRoots(trustCA []string) (*x509.CertPool, error) {
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	for _, f := range trustCA {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("trust_ca: %w", err)
		}
		if !roots.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("trust_ca %s: no PEM certificate in it", f)
		}
	}
	return roots, nil
}

// issuerOf is the proxy's Issuer: the CA of the latest configuration.
type issuerOf struct{ g *Gateway }

func (i issuerOf) Certificate(host string) (*tls.Certificate, error) {
	is := i.g.issuer.Load()
	if is == nil {
		return nil, errors.New("no egress CA")
	}
	return is.Certificate(host)
}

// refused records a refusal for the job that asked (the proxy user name), for the
// console and the metrics, and logs it.
func (g *Gateway) refused(user string, r *Refusal) {
	if !g.sb.JobID(user) {
		user = ""
	}
	person := g.personName()
	host := g.log.Load().record(user, r, g.opts.Now())
	if g.opts.Refused != nil {
		g.opts.Refused(host, person)
	}
	g.logger.Info("egress refused", zap.String("host", r.Host), zap.Int("port", r.Port), zap.String("reason", r.Reason),
		zap.String("person", person), zap.String("container", g.opts.Container), zap.String("job", user))
}

// unreachable logs, for the operator, the whole error of a request that could not
// reach its host: the sandbox's page says only what failed.
func (g *Gateway) unreachable(user, host string, port int, err error) {
	if !g.sb.JobID(user) {
		user = ""
	}
	g.logger.Info("egress could not reach a host", zap.String("host", host), zap.Int("port", port), zap.Error(err),
		zap.String("person", g.personName()), zap.String("container", g.opts.Container), zap.String("job", user))
}

// turnedAway logs, at most once a minute, that the sandbox has as many connections
// through the proxy as it may have and more are turned away.
func (g *Gateway) turnedAway() {
	now := g.opts.Now().UnixNano()
	last := g.capLogged.Load()
	if now-last < int64(time.Minute) || !g.capLogged.CompareAndSwap(last, now) {
		return
	}
	g.logger.Warn("egress connections at their cap: more are answered 503", zap.Int("cap", DefaultMaxConns),
		zap.String("person", g.personName()), zap.String("container", g.opts.Container))
}

// personName is whose sandbox this is: "" for the operator's, or the one shared.
func (g *Gateway) personName() string {
	if p := g.person.Load(); p != nil {
		return *p
	}
	return ""
}

// TakeBlocked returns, once, the refusals of a job's commands, each "host (reason)".
func (g *Gateway) TakeBlocked(job string) []string { return g.log.Load().takeBlocked(job) }

// HostRefusals are the refusals of one host in one sandbox.
type HostRefusals struct {
	Person string // whose sandbox asked
	Host   string
	Reason string // the latest one's
	Count  int64
	LastAt time.Time
}

// Refusals is the sandbox's refusals by host, in no order.
func (g *Gateway) Refusals() []HostRefusals {
	person := g.personName()
	list := g.log.Load().Refusals()
	for i := range list {
		list[i].Person = person
	}
	return list
}

// HostCount is one host's number of refusals.
type HostCount struct {
	Host  string
	Count int64
}

// RefusedCounts is the refusals by host, most first.
func (g *Gateway) RefusedCounts() []HostCount {
	list := g.Refusals()
	out := make([]HostCount, 0, len(list))
	for _, r := range list {
		out = append(out, HostCount{Host: r.Host, Count: r.Count})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Host < out[j].Host
	})
	return out
}

// Allowed is the allow list in force as people read it ([Policy.Summary]).
func (g *Gateway) Allowed() string { return g.policy.Load().Summary() }

// Offline reports whether the proxy cannot listen in the sandbox, which then reaches
// nothing.
func (g *Gateway) Offline() bool { return g.down.Load() != nil }

// Conns is how many connections from the sandbox the proxy serves now.
func (g *Gateway) Conns() int { return g.proxy.Conns() }

// Start keeps the proxy listening in the sandbox: the listener ends with the channel
// under it, and the next channel gets a new one. Where it cannot listen, the sandbox
// stays offline, and the loop tries again now and then. Calls after the first do
// nothing.
func (g *Gateway) Start() {
	g.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		g.cancel, g.done = cancel, make(chan struct{})
		maintained := make(chan struct{})
		go g.maintainCA(ctx, maintained)
		go func() {
			defer close(g.done)
			g.listen(ctx)
			<-maintained
		}()
	})
}

// maintainCA makes the CA's intermediate anew, with the latest configuration, when it
// nears expiry: Caddy renews only the CAs of its own pki app.
func (g *Gateway) maintainCA(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	defer func() {
		if v := recover(); v != nil {
			g.logger.Error("panic while renewing the egress CA", zap.Any("panic", v))
		}
	}()
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := g.renewIfDue(); err != nil {
			g.logger.Error("renewing the egress CA", zap.Error(err))
		}
	}
}

// renewIfDue provisions the CA again when its intermediate has less than
// CARenewBefore left.
func (g *Gateway) renewIfDue() error {
	is, renew := g.issuer.Load(), g.renewCA.Load()
	if is == nil || renew == nil || is.NotAfter().Sub(g.opts.Now()) > CARenewBefore {
		return nil
	}
	return (*renew)()
}

// listen keeps the proxy listening while the sandbox runs. It is upkeep: it never
// starts a stopped sandbox (idle stop and the operator's Stop must hold); it waits
// for a call or an operator Start to start it, and listens then.
func (g *Gateway) listen(ctx context.Context) {
	defer func() {
		if v := recover(); v != nil {
			g.logger.Error("panic in the egress listener", zap.Any("panic", v))
		}
	}()
	wait := retryMin
	for ctx.Err() == nil {
		began := time.Now()
		started := g.sb.Started() // taken first: a start while trying is not missed
		stop, done, err := g.sb.Listen(ctx, g.opts.Port, func(c net.Conn) { g.proxy.ServeConn(c) })
		switch {
		case err == nil:
			g.down.Store(nil)
			if err := g.installCA(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, ErrNotRunning) {
				g.logger.Warn("installing the egress CA in the sandbox", zap.Error(err))
			}
			select {
			case <-done:
			case <-ctx.Done():
				stop()
				return
			}
			// The channel went (the agent killed, the sandbox stopped or restarted):
			// listen again at once through the next one, unless they keep going quickly.
			if time.Since(began) > steady {
				wait = retryMin
				continue
			}
		case errors.Is(err, ErrNotRunning) || g.stoppedNow(ctx):
			// Stopped, being stopped or restarted, or not made yet: no reason to be
			// offline. Its start is waited for; one behind its owner's back (docker
			// start) is found within retryMax, and one that runs again already (Docker
			// restarted it) within retryMin.
			wait = retryMin
			pause := retryMax
			if running, rerr := g.sb.Running(ctx); rerr == nil && running {
				pause = retryMin
			}
			select {
			case <-ctx.Done():
				return
			case <-started:
			case <-time.After(pause):
			}
			continue
		case ctx.Err() == nil:
			why := err.Error()
			if prev := g.down.Swap(&why); prev == nil || *prev != why {
				g.logger.Warn("the egress proxy cannot listen in the sandbox, which stays offline", zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-started:
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMax)
	}
}

// stoppedNow reports whether the sandbox is known not to run (it stopped while a
// listener was being set up).
func (g *Gateway) stoppedNow(ctx context.Context) bool {
	running, err := g.sb.Running(ctx)
	return err == nil && !running
}

// Close stops listening; tunnels already open run to their end. Start does nothing
// after it.
func (g *Gateway) Close() {
	g.once.Do(func() {})
	if g.cancel != nil {
		g.cancel()
		<-g.done
	}
	g.proxy.Close()
}

// installCA writes the bundle commands are pointed at (the image's roots plus ours)
// and adds our root to the image's own bundle, for programs that read only that.
// What it reads from the sandbox is bounded and only written back into it.
func (g *Gateway) installCA(ctx context.Context) error {
	rp := g.rootPEM.Load()
	if rp == nil || len(*rp) == 0 {
		return nil
	}
	ours := *rp
	var system []byte
	sysPath := ""
	for _, p := range systemBundles {
		f, err := g.sb.Open(ctx, p)
		if err != nil {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(f, maxSystemBundle+1))
		f.Close()
		if err == nil && len(b) <= maxSystemBundle {
			system, sysPath = b, p
			break
		}
	}
	withOurs := func(b []byte) []byte {
		if bytes.Contains(b, ours) {
			return b
		}
		out := append([]byte(nil), b...)
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		return append(out, ours...)
	}
	if err := g.sb.WriteFile(ctx, g.opts.Bundle, withOurs(system)); err != nil {
		return fmt.Errorf("writing the CA bundle: %w", err)
	}
	if sysPath != "" && !bytes.Contains(system, ours) {
		if err := g.sb.WriteFile(ctx, sysPath, withOurs(system)); err != nil {
			return fmt.Errorf("adding the egress CA to %s: %w", sysPath, err)
		}
	}
	return nil
}

// Asks reports whether hosts the policy does not allow are put to the person.
func (g *Gateway) Asks() bool { return g.asker.Load() != nil }
