package mcpsandbox

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddypki"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Egress: with an `egress` block the sandbox has no network of its own (network none)
// and reaches the outside only through the plugin's proxy (package egress). The agent
// listens on egressPort on the container's loopback and hands each connection to
// Caddy as a stream; commands find the proxy in their environment.

// egressPort is where the proxy listens inside the container.
const egressPort = 3128

// EgressConfig is the `egress` block: what the sandbox may reach, through Caddy.
type EgressConfig struct {
	// Allow lists the reachable hosts: example.com, *.example.com (subdomains),
	// example.com:8443 (that port; without one, 80 and 443), or * (every public host;
	// a name Hosts maps to a private or local address needs an entry of its own).
	Allow []string `json:"allow,omitempty"`
	// Deny lists hosts refused even when allowed, in the same forms.
	Deny []string `json:"deny,omitempty"`
	// Hosts maps names to addresses instead of DNS; the only way to reach a private or
	// loopback address.
	Hosts map[string]string `json:"hosts,omitempty"`
	// Credentials are added by Caddy to requests whose URL starts with their prefix;
	// the values never enter the sandbox. One applies per request: the longest prefix
	// that matches. A prefix with a path is matched on the decoded path, and requests
	// with dot segments or encoded slashes, backslashes, dots or % in their path are
	// refused there; TRACE and TRACK are refused to credential hosts. An upstream
	// that echoes request headers back shows the credential to the sandbox: give
	// credentials only for hosts that do not.
	Credentials []EgressCredential `json:"credentials,omitempty"`
	// TrustCA lists PEM files of extra roots that upstream TLS of intercepted hosts is
	// verified with, on top of the system's.
	TrustCA []string `json:"trust_ca,omitempty"`
}

// EgressCredential is one `credential` line: a header (Header and Value) or Basic
// credentials (User and Password) for a URL prefix. Values may hold placeholders such
// as {env.GITHUB_TOKEN}.
type EgressCredential struct {
	Prefix   string `json:"prefix"`
	Header   string `json:"header,omitempty"`
	Value    string `json:"value,omitempty"`
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
}

// rules are the block's rules with placeholders resolved.
func (c *EgressConfig) rules() egress.Rules {
	repl := caddy.NewReplacer()
	r := egress.Rules{Allow: c.Allow, Deny: c.Deny, Hosts: c.Hosts}
	for _, cr := range c.Credentials {
		ec := egress.Credential{Prefix: cr.Prefix, Header: cr.Header, Value: repl.ReplaceAll(cr.Value, "")}
		if cr.User != "" || cr.Password != "" {
			user, pass := repl.ReplaceAll(cr.User, ""), repl.ReplaceAll(cr.Password, "")
			ec.Header, ec.Value = "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
		}
		r.Credentials = append(r.Credentials, ec)
	}
	return r
}

// egressState is a pooled sandbox's proxy: it outlives config reloads with the
// sandbox, and each config that provisions sets the policy in force.
type egressState struct {
	sb      *sandbox.Sandbox
	logger  *zap.Logger
	policy  atomic.Pointer[egress.Policy]
	proxy   *egress.Proxy
	down    atomic.Pointer[string] // why the proxy cannot listen, nil while it can
	issuer  atomic.Pointer[egress.CAIssuer]
	roots   atomic.Pointer[x509.CertPool]
	rootPEM atomic.Pointer[[]byte]
	// renewCA provisions the CA again with the latest config (set by each config).
	renewCA atomic.Pointer[func() error]
	// person is whose sandbox this is ("" the operator's, or the one shared).
	person atomic.Pointer[string]
	// capLogged is when the connection cap was last logged, Unix nanoseconds.
	capLogged atomic.Int64

	mu      sync.Mutex
	blocked map[string][]string  // refusals by job id, until the job's result shows them
	jobs    []string             // ids in blocked, oldest first
	counts  map[string]*refusals // refusals by host
	once    sync.Once
	cancel  context.CancelFunc
	done    chan struct{}
}

// Bounds on what refusals the plugin remembers: a hostile command can make many.
const (
	maxBlockedJobs    = 1000
	maxBlockedPerJob  = 8
	maxRefusedHosts   = 200
	egressRetryMin    = 2 * time.Second
	egressRetryMax    = time.Minute
	egressSteady      = 10 * time.Second // a listener that lasted this long was no failure
	otherRefusedHosts = "(other)"
)

// refusals are one host's refusals in one sandbox.
type refusals struct {
	count  int64
	last   time.Time
	reason string // the latest one's
}

func newEgressState(sb *sandbox.Sandbox, logger *zap.Logger) *egressState {
	e := &egressState{sb: sb, logger: logger.Named("egress"), blocked: map[string][]string{}, counts: map[string]*refusals{}}
	e.policy.Store(&egress.Policy{}) // nothing allowed until a config sets its rules
	e.proxy = &egress.Proxy{Policy: e.policy.Load, Refused: e.refused, TurnedAway: e.turnedAway, Issuer: issuerOf{e}, UpstreamRoots: e.roots.Load}
	if sb.Config().NoAgent {
		why := "the agent is off (agent off), and the egress proxy needs it"
		e.down.Store(&why)
	}
	return e
}

// refused records a refusal for the job that asked (the proxy user name), the
// console and the metrics, and logs it.
func (e *egressState) refused(user string, r *egress.Refusal) {
	if !boxapi.ValidJobID(user) {
		user = ""
	}
	person := e.personName()
	e.mu.Lock()
	host := r.Host
	if _, ok := e.counts[host]; !ok && len(e.counts) >= maxRefusedHosts {
		host = otherRefusedHosts
	}
	rec := e.counts[host]
	if rec == nil {
		rec = &refusals{}
		e.counts[host] = rec
	}
	rec.count++
	rec.last, rec.reason = time.Now(), r.Reason
	if user != "" {
		list, ok := e.blocked[user]
		if !ok {
			if len(e.jobs) >= maxBlockedJobs {
				delete(e.blocked, e.jobs[0])
				e.jobs = e.jobs[1:]
			}
			e.jobs = append(e.jobs, user)
		}
		line := fmt.Sprintf("%s (%s)", r.Host, r.Reason)
		if len(list) < maxBlockedPerJob && !slices.Contains(list, line) {
			e.blocked[user] = append(list, line)
		} else if !ok {
			e.blocked[user] = list
		}
	}
	e.mu.Unlock()
	metricEgressRefused.WithLabelValues(host, person).Inc()
	e.logger.Info("egress refused", zap.String("host", r.Host), zap.Int("port", r.Port), zap.String("reason", r.Reason),
		zap.String("person", person), zap.String("container", e.container()), zap.String("job", user))
}

// consoleEgress shows the console the refusals of every sandbox of this site that is
// pooled (the operator's and each person's, used by this config yet or not), each
// with its person.
type consoleEgress struct{ h *Handler }

func (c consoleEgress) Refusals(context.Context) ([]console.EgressRefusal, error) {
	h := c.h
	owner := map[string]string{} // container -> person
	for _, p := range append([]string{""}, h.peopleNames()...) {
		if cfg, err := h.sandboxConfigFor(p); err == nil {
			owner[cfg.Container] = p
		}
	}
	// A reload with new settings briefly holds two entries of one container: their
	// counts are added.
	type key struct{ person, host string }
	merged := map[key]*console.EgressRefusal{}
	sandboxes.Range(func(_, v any) bool {
		e, ok := v.(*sandboxEntry)
		if !ok || e.egress == nil {
			return true
		}
		person, ok := owner[e.sb.Config().Container]
		if !ok {
			return true
		}
		for _, r := range e.egress.refusals() {
			r.Person = person
			k := key{person, r.Host}
			if m := merged[k]; m != nil {
				m.Count += r.Count
				if r.LastAt.After(m.LastAt) {
					m.LastAt, m.Reason = r.LastAt, r.Reason
				}
				continue
			}
			merged[k] = &r
		}
		return true
	})
	out := make([]console.EgressRefusal, 0, len(merged))
	for _, r := range merged {
		out = append(out, *r)
	}
	return out, nil
}

// peopleNames are the configured people's names, in config order.
func (h *Handler) peopleNames() []string {
	out := make([]string, 0, len(h.People))
	for _, p := range h.People {
		out = append(out, p.Name)
	}
	return out
}

// turnedAway logs, at most once a minute, that the sandbox has as many connections
// through the proxy as it may have and more are turned away.
func (e *egressState) turnedAway() {
	now := time.Now().UnixNano()
	last := e.capLogged.Load()
	if now-last < int64(time.Minute) || !e.capLogged.CompareAndSwap(last, now) {
		return
	}
	e.logger.Warn("egress connections at their cap: more are answered 503", zap.Int("cap", egress.DefaultMaxConns),
		zap.String("person", e.personName()), zap.String("container", e.container()))
}

// personName is whose sandbox this is: "" for the operator's, or the one shared.
func (e *egressState) personName() string {
	if p := e.person.Load(); p != nil {
		return *p
	}
	return ""
}

func (e *egressState) container() string {
	if e.sb == nil {
		return ""
	}
	return e.sb.Config().Container
}

// takeBlocked returns, once, the refusals of a job's commands.
func (e *egressState) takeBlocked(job string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	list := e.blocked[job]
	if len(list) > 0 {
		e.blocked[job] = nil
	}
	return list
}

// refusedCounts is the refusals by host, most first.
func (e *egressState) refusedCounts() []hostCount {
	list := e.refusals()
	out := make([]hostCount, 0, len(list))
	for _, r := range list {
		out = append(out, hostCount{Host: r.Host, Count: r.Count})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Host < out[j].Host
	})
	return out
}

type hostCount struct {
	Host  string `json:"host"`
	Count int64  `json:"count"`
}

// refusals is this sandbox's refusals by host, each with its person.
func (e *egressState) refusals() []console.EgressRefusal {
	person := e.personName()
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]console.EgressRefusal, 0, len(e.counts))
	for h, r := range e.counts {
		out = append(out, console.EgressRefusal{Person: person, Host: h, Reason: r.reason, Count: r.count, LastAt: r.last})
	}
	return out
}

// start keeps the proxy listening in the container: the listener ends with the agent,
// and the next agent gets a new one. Where the agent cannot run, the sandbox stays
// offline, and the loop tries again now and then.
func (e *egressState) start() {
	e.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		e.cancel, e.done = cancel, make(chan struct{})
		maintained := make(chan struct{})
		go e.maintainCA(ctx, maintained)
		go func() {
			defer close(e.done)
			e.listen(ctx)
			<-maintained
		}()
	})
}

// maintainCA makes the CA's intermediate anew, with the latest config, when it nears
// expiry: Caddy renews only the CAs of its own pki app.
func (e *egressState) maintainCA(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	defer func() {
		if v := recover(); v != nil {
			e.logger.Error("panic while renewing the egress CA", zap.Any("panic", v))
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
		if err := e.renewIfDue(time.Now()); err != nil {
			e.logger.Error("renewing the egress CA", zap.Error(err))
		}
	}
}

// renewIfDue provisions the CA again when its intermediate has less than
// egressCARenew left at now.
func (e *egressState) renewIfDue(now time.Time) error {
	is, renew := e.issuer.Load(), e.renewCA.Load()
	if is == nil || renew == nil || is.NotAfter().Sub(now) > egressCARenew {
		return nil
	}
	return (*renew)()
}

// listen keeps the proxy listening while the container runs. It is upkeep: it never
// starts a stopped container (idle stop and the operator's Stop must hold); it waits
// for a call or an operator Start to start it, and listens then.
func (e *egressState) listen(ctx context.Context) {
	defer func() {
		if v := recover(); v != nil {
			e.logger.Error("panic in the egress listener", zap.Any("panic", v))
		}
	}()
	uctx := sandbox.Upkeep(ctx)
	wait := egressRetryMin
	for ctx.Err() == nil {
		began := time.Now()
		started := e.sb.Ready() // taken first: a start while trying is not missed
		stop, done, err := e.sb.ListenPort(uctx, egressPort, func(c net.Conn) { e.proxy.ServeConn(c) })
		switch {
		case err == nil:
			e.down.Store(nil)
			if err := e.installCA(uctx); err != nil && ctx.Err() == nil && !sandbox.NotRunning(err) {
				e.logger.Warn("installing the egress CA in the sandbox", zap.Error(err))
			}
			select {
			case <-done:
			case <-ctx.Done():
				stop()
				return
			}
			// The agent went (killed, the container stopped or restarted): listen again
			// at once through the next one, unless agents keep going quickly.
			if time.Since(began) > egressSteady {
				wait = egressRetryMin
				continue
			}
		case sandbox.NotRunning(err) || e.stoppedNow(uctx):
			// Stopped or not made yet. A container started behind this Sandbox's back
			// (docker start) is found within egressRetryMax.
			wait = egressRetryMin
			select {
			case <-ctx.Done():
				return
			case <-started:
			case <-time.After(egressRetryMax):
			}
			continue
		case ctx.Err() == nil:
			why := err.Error()
			if prev := e.down.Swap(&why); prev == nil || *prev != why {
				e.logger.Warn("the egress proxy cannot listen in the sandbox, which stays offline", zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-started:
		case <-time.After(wait):
		}
		wait = min(2*wait, egressRetryMax)
	}
}

// stoppedNow reports whether the container is known not to run (it stopped while a
// listener was being set up).
func (e *egressState) stoppedNow(ctx context.Context) bool {
	running, err := e.sb.Running(ctx)
	return err == nil && !running
}

// Destruct stops listening; tunnels already open run to their end.
func (e *egressState) Destruct() {
	e.once.Do(func() {})
	if e.cancel != nil {
		e.cancel()
		<-e.done
	}
	e.proxy.Close()
}

// info is the egress as the tools describe it.
func (e *egressState) info() *mcptools.Egress {
	return &mcptools.Egress{Hosts: e.policy.Load().Summary(), Offline: e.down.Load() != nil}
}

var metricEgressRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "egress_refused_total",
	Help: "Connections the egress proxy refused, by host (at most 200 per sandbox, then (other)) and by the person whose sandbox asked (\"\" for the operator's, or the one shared).",
}, []string{"host", "person"})

// The plugin's own CA for intercepted hosts, in Caddy's storage under
// pki/authorities/<egressCAID>: never Caddy's `local` CA, which `tls internal` shares,
// and never installed in the host's trust store.
const (
	egressCAID = "mcp_sandbox_egress"
	// egressBundle is the CA bundle commands are pointed at: the image's roots plus ours.
	egressBundle = "/var/lib/mcp-sandbox/egress/ca-bundle.pem"
	// maxSystemBundle bounds the image's bundle read back from the container.
	maxSystemBundle = 8 << 20
	// egressCARenew: the intermediate is made anew when less than this is left of it.
	egressCARenew = 2 * 24 * time.Hour
)

// systemBundles are where images keep their CA bundle (Debian and Ubuntu, RHEL and
// Fedora, Alpine).
var systemBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// provisionEgressCA loads or creates the CA, making its intermediate anew when it is
// about to expire (Caddy renews only the CAs of its pki app).
// egressRules are the rules of person's sandbox ("" the operator's): the site's, with
// the person's own layered on.
func (h *Handler) egressRules(person string) egress.Rules {
	r := h.Egress.rules()
	if p := h.person(person); p != nil && p.Egress != nil {
		r = r.Merge(p.Egress.rules())
	}
	return r
}

// egressTrust is the trust_ca files of person's sandbox: the site's and the person's.
func (h *Handler) egressTrust(person string) []string {
	trust := h.Egress.TrustCA
	if p := h.person(person); p != nil && p.Egress != nil {
		trust = append(slices.Clone(trust), p.Egress.TrustCA...)
	}
	return trust
}

// setupEgress gives person's sandbox proxy ("" the operator's) this config's CA and
// rules: the operator's when the config is provisioned, a person's when their sandbox
// is first placed.
func (h *Handler) setupEgress(e *sandboxEntry, person string) error {
	if e.egress == nil {
		return nil
	}
	e.egress.person.Store(&person)
	trust := h.egressTrust(person)
	if err := e.egress.setCA(h.egressCA, trust); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	ctx, logger, state := h.egressCtx, h.logger.Named("egress"), e.egress
	renew := func() error {
		ca, err := provisionEgressCA(ctx, logger)
		if err != nil {
			return err
		}
		return state.setCA(ca, trust)
	}
	e.egress.renewCA.Store(&renew)
	pol, _ := egress.Compile(h.egressRules(person)) // Validate compiled it
	e.egress.policy.Store(pol)
	return nil
}

func provisionEgressCA(ctx caddy.Context, logger *zap.Logger) (*caddypki.CA, error) {
	for attempt := 0; ; attempt++ {
		off := false
		ca := &caddypki.CA{
			Name: "MCP sandbox egress", RootCommonName: "MCP sandbox egress root",
			IntermediateCommonName: "MCP sandbox egress intermediate", InstallTrust: &off,
		}
		if err := ca.Provision(ctx, egressCAID, logger); err != nil {
			return nil, fmt.Errorf("setting up the egress CA: %w", err)
		}
		chain := ca.IntermediateCertificateChain()
		if attempt > 0 || len(chain) == 0 || time.Until(chain[0].NotAfter) > egressCARenew {
			return ca, nil
		}
		prefix := path.Join("pki", "authorities", egressCAID)
		for _, k := range []string{"intermediate.crt", "intermediate.key"} {
			if err := ctx.Storage().Delete(ctx, path.Join(prefix, k)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("renewing the egress CA's intermediate: %w", err)
			}
		}
	}
}

// setCA makes ca the one intercepted hosts are shown, and trustCA (PEM files) the extra
// roots upstreams are verified with, on top of the system's.
func (e *egressState) setCA(ca *caddypki.CA, trustCA []string) error {
	roots, err := trustRoots(trustCA)
	if err != nil {
		return err
	}
	e.roots.Store(roots)
	e.issuer.Store(egress.NewCAIssuer(ca.IntermediateCertificateChain(), ca.IntermediateKey()))
	rootPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.RootCertificate().Raw})
	e.rootPEM.Store(&rootPEM)
	return nil
}

// trustRoots is the system's roots plus those in the trustCA PEM files.
func trustRoots(trustCA []string) (*x509.CertPool, error) {
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

// issuerOf is the proxy's Issuer: the CA of the latest config.
type issuerOf struct{ e *egressState }

func (i issuerOf) Certificate(host string) (*tls.Certificate, error) {
	is := i.e.issuer.Load()
	if is == nil {
		return nil, errors.New("no egress CA")
	}
	return is.Certificate(host)
}

// installCA writes the bundle commands are pointed at (the image's roots plus ours)
// and adds our root to the image's own bundle, for programs that read only that.
// What it reads from the container is bounded and only written back into it.
func (e *egressState) installCA(ctx context.Context) error {
	rp := e.rootPEM.Load()
	if rp == nil {
		return nil
	}
	ours := *rp
	var system []byte
	sysPath := ""
	for _, p := range systemBundles {
		f, err := e.sb.Open(ctx, p, 0)
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
	if _, _, err := e.sb.WriteFile(ctx, egressBundle, withOurs(system)); err != nil {
		return fmt.Errorf("writing the CA bundle: %w", err)
	}
	if sysPath != "" && !bytes.Contains(system, ours) {
		if _, _, err := e.sb.WriteFile(ctx, sysPath, withOurs(system)); err != nil {
			return fmt.Errorf("adding the egress CA to %s: %w", sysPath, err)
		}
	}
	return nil
}
