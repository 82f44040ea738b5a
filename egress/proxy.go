package egress

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Proxy is an HTTP proxy served over connections handed to [Proxy.ServeConn]: CONNECT
// tunnels and absolute-URL requests, each to a host its policy allows, dialled by the
// proxy itself. A refused host gets 403 with a one-line reason.
type Proxy struct {
	// Policy returns the policy in force; it is asked per request, so a new one
	// applies to the next request. Required.
	Policy func() *Policy
	// Refused, if set, is told of each refusal, with the user name of the request's
	// Proxy-Authorization (letters, digits, '-' and '_', at most 64; "" when absent).
	Refused func(user string, r *Refusal)
	// Ask, if set, decides a refusal of the policy: nil allows the request after all
	// (the host is then reached without any credential), anything else is the
	// refusal to give. It may wait, holding the connection, until ctx ends.
	Ask func(ctx context.Context, user string, r *Refusal) *Refusal
	// Failed, if set, is told of each request that could not reach its host, with the
	// whole error (the page the sandbox gets says what failed, never an address of the
	// host's network: the resolver's, the dialer's).
	Failed func(user, host string, port int, err error)
	// Resolve looks names up (nil: the system resolver).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// DialTimeout bounds one dial (default 15s).
	DialTimeout time.Duration
	// Issuer, if set, signs the certificates shown for hosts an https:// credential
	// names, which are then intercepted; nil: every CONNECT is a plain tunnel.
	Issuer Issuer
	// UpstreamRoots returns the roots that verify intercepted hosts, asked per
	// connection (nil, or a nil pool: the system's roots).
	UpstreamRoots func() *x509.CertPool

	// MaxConns caps the connections from the sandbox served at once (default
	// DefaultMaxConns); beyond it a connection is answered 503.
	MaxConns int
	// TurnedAway, if set, is told of each connection beyond MaxConns.
	TurnedAway func()
	// WriteTimeout closes a connection, either side, when a write to it makes no
	// progress for this long: its peer does not read (default 1m).
	WriteTimeout time.Duration
	// IdleTimeout closes a connection from the sandbox that has no request under way
	// and moves no byte for this long (default 2m).
	IdleTimeout time.Duration
	// TunnelIdleTimeout closes a tunnel, or a connection with a request under way,
	// when no byte moves on it for this long (default 10m).
	TunnelIdleTimeout time.Duration

	once      sync.Once
	conns     atomic.Int32 // connections served now
	turning   atomic.Int32 // connections being answered 503 now
	limits    limits
	ln, tlsLn *connListener
	srv       *http.Server
	tlsSrv    *http.Server
	transport *http.Transport
	rp        *httputil.ReverseProxy
}

// Limits of the proxy's HTTP side, and the defaults of its settings.
const (
	maxHeaderBytes           = 64 << 10
	readHeaderTimeout        = 30 * time.Second
	DefaultMaxConns          = 64
	defaultWriteTimeout      = time.Minute
	defaultIdleTimeout       = 2 * time.Minute
	defaultTunnelIdleTimeout = 10 * time.Minute
	// copyBufferSize is the buffer of each copy: one per direction of a connection
	// that moves bytes, so it bounds what a stalled connection holds.
	copyBufferSize = 32 << 10
)

// limits are the settings in force, defaults applied.
type limits struct {
	maxConns                        int
	write, idle, tunnel, readHeader time.Duration
}

func (p *Proxy) init() {
	p.once.Do(func() {
		p.limits = limits{
			maxConns: cmp.Or(p.MaxConns, DefaultMaxConns),
			write:    cmp.Or(p.WriteTimeout, defaultWriteTimeout),
			idle:     cmp.Or(p.IdleTimeout, defaultIdleTimeout),
			tunnel:   cmp.Or(p.TunnelIdleTimeout, defaultTunnelIdleTimeout),
		}
		p.limits.readHeader = min(readHeaderTimeout, p.limits.idle)
		p.ln, p.tlsLn = newConnListener(), newConnListener()
		p.transport = &http.Transport{
			DialTLSContext:         p.dialTLS,
			Proxy:                  nil,
			DialContext:            p.dialContext,
			ForceAttemptHTTP2:      false,
			DisableCompression:     true,
			MaxIdleConns:           64,
			MaxIdleConnsPerHost:    8,
			IdleConnTimeout:        90 * time.Second,
			TLSHandshakeTimeout:    15 * time.Second,
			ResponseHeaderTimeout:  0,
			MaxResponseHeaderBytes: 1 << 20,
		}
		p.rp = &httputil.ReverseProxy{
			Rewrite:       p.rewrite,
			Transport:     p.transport,
			FlushInterval: 0,
			BufferPool:    copyBuffers{},
			ErrorLog:      log.New(io.Discard, "", 0),
			ErrorHandler:  p.forwardError,
		}
		p.srv = &http.Server{
			Handler:           p,
			MaxHeaderBytes:    maxHeaderBytes,
			ReadHeaderTimeout: p.limits.readHeader,
			IdleTimeout:       p.limits.idle,
			ErrorLog:          log.New(io.Discard, "", 0),
			ConnState:         p.connState,
		}
		p.tlsSrv = &http.Server{
			Handler:           http.HandlerFunc(p.serveIntercepted),
			MaxHeaderBytes:    maxHeaderBytes,
			ReadHeaderTimeout: p.limits.readHeader,
			IdleTimeout:       p.limits.idle,
			ErrorLog:          log.New(io.Discard, "", 0),
			ConnState:         p.connState,
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				return context.WithValue(ctx, interceptKey{}, c.(*interceptConn))
			},
		}
		go p.srv.Serve(p.ln)       //nolint:errcheck // ends with Close
		go p.tlsSrv.Serve(p.tlsLn) //nolint:errcheck // ends with Close
	})
}

// ServeConn serves c, a connection a program opened to the proxy, until either side
// closes it or a timeout does. It returns at once; c is closed when done. Beyond
// MaxConns connections at once, c is answered 503.
func (p *Proxy) ServeConn(c net.Conn) {
	p.init()
	if int(p.conns.Add(1)) > p.limits.maxConns {
		p.conns.Add(-1)
		p.turnAway(c)
		return
	}
	w := watch(c, p.limits.write, p.limits.idle, func() { p.conns.Add(-1) })
	if !p.ln.put(w) {
		w.Close()
	}
}

// Conns is how many connections from the sandbox the proxy serves now.
func (p *Proxy) Conns() int { return int(p.conns.Load()) }

// turnAway answers a connection beyond the cap with 503, once its request head is
// read (a client that has not sent it yet may take an early answer for a reset);
// four times as many as the cap are answered at once, any more are closed at once.
func (p *Proxy) turnAway(c net.Conn) {
	if p.TurnedAway != nil {
		p.TurnedAway()
	}
	if int(p.turning.Add(1)) > 4*p.limits.maxConns {
		p.turning.Add(-1)
		c.Close()
		return
	}
	w := watch(c, p.limits.write, min(5*time.Second, p.limits.readHeader), func() { p.turning.Add(-1) })
	go func() {
		defer w.Close()
		_, _ = http.ReadRequest(bufio.NewReader(io.LimitReader(w, maxHeaderBytes)))
		msg := fmt.Sprintf("the sandbox has %d connections open through the egress proxy, the most it may have at once: close connections it no longer needs (or let them finish), then try again", p.limits.maxConns)
		fmt.Fprintf(w, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nX-Proxy-Error: too-many-connections\r\nRetry-After: 5\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n", len(msg)+1, msg)
		_ = w.CloseWrite()
	}()
}

// connState keeps a connection's idle limit to what it is doing: waiting for a
// request (IdleTimeout), or serving one (TunnelIdleTimeout).
func (p *Proxy) connState(c net.Conn, st http.ConnState) {
	var w *watchedConn
	switch c := c.(type) {
	case *watchedConn:
		w = c
	case *interceptConn:
		w = c.watched
	}
	if w == nil {
		return
	}
	switch st {
	case http.StateActive:
		w.setIdle(p.limits.tunnel)
	case http.StateIdle:
		w.setIdle(p.limits.idle)
	}
}

// Close stops serving: idle connections close, tunnels already open run to their end.
func (p *Proxy) Close() error {
	p.init()
	p.ln.Close()
	p.tlsLn.Close()
	p.transport.CloseIdleConnections()
	return errors.Join(p.srv.Close(), p.tlsSrv.Close())
}

// ServeHTTP answers one proxy request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pol := p.Policy()
	user := proxyUser(r.Header.Get("Proxy-Authorization"))
	switch {
	case r.Method == http.MethodConnect:
		p.connect(w, r, pol, user)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		host, port, err := targetOf(r.URL.Host, 80)
		if err != nil {
			p.refuse(w, user, badHost(r.URL.Host, 0))
			return
		}
		ctx, ref := p.check(r.Context(), pol, user, host, port)
		if ref != nil {
			p.refuse(w, user, ref)
			return
		}
		p.forward(w, r.WithContext(ctx), &reqInfo{pol: pol, user: user, host: host, port: port, scheme: "http", asked: asked(ctx, host, port)})
	case r.URL.IsAbs():
		plain(w, http.StatusBadRequest, "this proxy forwards http:// URLs; use CONNECT for https")
	default:
		plain(w, http.StatusBadRequest, "this is the sandbox's HTTP proxy: send it absolute URLs or CONNECT")
	}
}

type reqKey struct{}

type reqInfo struct {
	pol                *Policy
	user, host, scheme string
	port               int
	path               string // the decoded path, which a credential is matched on
	asked              bool   // allowed by the person, not the policy: no credential
}

// forward sends r on to its host. On a host that gets a credential, TRACE and TRACK
// are refused (the answer would echo the credential), and where a credential is
// scoped to a path, a path an upstream could resolve elsewhere is refused.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, info *reqInfo) {
	has, scoped := info.pol.credentialHost(info.scheme, info.host, info.port)
	if info.asked {
		has, scoped = false, false
	}
	if has && (strings.EqualFold(r.Method, http.MethodTrace) || strings.EqualFold(r.Method, "TRACK")) {
		plain(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s is refused to %s, which the proxy adds a credential to: the answer would show it", clip(r.Method), info.host))
		return
	}
	escaped := r.URL.EscapedPath()
	info.path = r.URL.Path
	if scoped {
		path, err := resolvedPath(escaped)
		if err != nil {
			plain(w, http.StatusBadRequest, fmt.Sprintf("refused %s: %v; %s gets a credential for some paths only, so send the path plainly: no dot segments, no backslashes, no encoded slashes, backslashes, dots or %%, no control characters, and no non-ASCII punctuation or overlong UTF-8", clip(escaped), err, info.host))
			return
		}
		info.path = path
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), reqKey{}, info)))
}

// check is the policy's decision on host:port, put to Ask when the policy refuses; a
// host the person allowed is marked in the returned context, which the dial sees.
func (p *Proxy) check(ctx context.Context, pol *Policy, user, host string, port int) (context.Context, *Refusal) {
	err := pol.Check(host, port)
	if err == nil {
		return ctx, nil
	}
	ref := err.(*Refusal)
	if p.Ask == nil {
		return ctx, ref
	}
	if ref = p.Ask(ctx, user, ref); ref != nil {
		return ctx, ref
	}
	return context.WithValue(ctx, askedKey{}, net.JoinHostPort(host, strconv.Itoa(port))), nil
}

type askedKey struct{}

// asked reports whether the person allowed host:port for the request of ctx.
func asked(ctx context.Context, host string, port int) bool {
	k, _ := ctx.Value(askedKey{}).(string)
	return k != "" && k == net.JoinHostPort(host, strconv.Itoa(port))
}

// targetOf parses a request's host[:port] strictly, with def as the port when absent.
func targetOf(hostport string, def int) (string, int, error) {
	host, port, err := splitHostPort(hostport)
	if err != nil {
		return "", 0, err
	}
	if port == 0 {
		if def == 0 {
			return "", 0, errors.New("CONNECT needs host:port")
		}
		port = def
	}
	h, err := NormalizeHost(host)
	if err != nil {
		return "", 0, err
	}
	return h, port, nil
}

func (p *Proxy) refuse(w http.ResponseWriter, user string, r *Refusal) {
	if p.Refused != nil {
		p.Refused(user, r)
	}
	w.Header().Set("X-Proxy-Error", "blocked-by-policy")
	plain(w, http.StatusForbidden, r.Error())
}

func plain(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Connection", "close")
	w.WriteHeader(code)
	io.WriteString(w, msg+"\n")
}

// connect opens a tunnel to the CONNECT target.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request, pol *Policy, user string) {
	host, port, err := targetOf(r.RequestURI, 0)
	if err != nil {
		p.refuse(w, user, badHost(r.RequestURI, 0))
		return
	}
	ctx, ref := p.check(r.Context(), pol, user, host, port)
	if ref != nil {
		p.refuse(w, user, ref)
		return
	}
	if p.Issuer != nil && pol.Intercepts(host, port) && !asked(ctx, host, port) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			c.Close()
			return
		}
		wc, _ := c.(*watchedConn)
		p.intercept(bufferedConn{c, brw.Reader}, wc, host, port, user)
		return
	}
	up, err := p.dial(ctx, pol, host, port)
	if err != nil {
		p.dialFailed(w, user, host, port, err)
		return
	}
	rc := http.NewResponseController(w)
	c, brw, err := rc.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		c.Close()
		up.Close()
		return
	}
	var client io.Reader = c
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Peek(n)
		client = io.MultiReader(strings.NewReader(string(b)), c)
	}
	if wc, ok := c.(*watchedConn); ok {
		wc.tie(up)
		wc.setIdle(p.limits.tunnel)
	}
	relay(c, client, up)
}

func (p *Proxy) dialFailed(w http.ResponseWriter, user, host string, port int, err error) {
	var ref *Refusal
	if errors.As(err, &ref) {
		p.refuse(w, user, ref)
		return
	}
	// A request cancelled (the program went, or the proxy closes) is no failure of
	// the host's.
	if p.Failed != nil && !errors.Is(err, context.Canceled) {
		p.Failed(user, host, port, err)
	}
	plain(w, http.StatusBadGateway, fmt.Sprintf("cannot reach %s:%d: %s", host, port, whatFailed(err)))
}

// relay copies both ways until both directions end, passing half-closes on; a
// failure either way (a timeout closing one side among them) ends both.
func relay(c net.Conn, fromClient io.Reader, up net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if copyBuffered(up, fromClient) != nil {
			c.Close()
			up.Close()
			return
		}
		closeWrite(up)
	}()
	if copyBuffered(c, up) != nil {
		c.Close()
		up.Close()
	} else {
		closeWrite(c)
	}
	<-done
	c.Close()
	up.Close()
}

// copyBuffered copies with a pooled buffer of copyBufferSize.
func copyBuffered(dst io.Writer, src io.Reader) error {
	b := copyBufferPool.Get().(*[]byte)
	defer copyBufferPool.Put(b)
	// Hide ReaderFrom and WriterTo, which would copy with buffers of their own.
	_, err := io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *b)
	return err
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}

// rewrite prepares a forwarded request: the URL as asked, credentials when a rule
// matches. ReverseProxy has already dropped hop-by-hop headers (Proxy-Authorization
// among them).
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	info := pr.In.Context().Value(reqKey{}).(*reqInfo)
	pr.Out.URL.Scheme = info.scheme
	pr.Out.URL.Host = net.JoinHostPort(info.host, strconv.Itoa(info.port))
	pr.Out.Host = pr.In.Host
	// What goes upstream is the path matched: the escaped form as sent when it
	// decodes to it (forward refused any that could resolve elsewhere), else
	// the matched path escaped anew.
	escaped := pr.In.URL.EscapedPath()
	pr.Out.URL.Path, pr.Out.URL.RawPath = info.path, ""
	if dec, err := url.PathUnescape(escaped); err == nil && dec == info.path {
		pr.Out.URL.RawPath = escaped
	}
	if c := info.pol.credentialFor(info.scheme, info.host, info.port, info.path); c != nil && !info.asked {
		pr.Out.Header.Set(c.header, c.value)
	}
}

func (p *Proxy) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	info := r.Context().Value(reqKey{}).(*reqInfo)
	p.dialFailed(w, info.user, info.host, info.port, err)
}

// dialContext is the transport's dialer: the policy of the request, checked again.
func (p *Proxy) dialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	host, port, err := targetOf(addr, 0)
	if err != nil {
		return nil, err
	}
	return p.dial(ctx, p.Policy(), host, port)
}

// dialTLS is the transport's dialer for intercepted hosts: the policy checked again,
// then TLS verified against the upstream roots.
func (p *Proxy) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := p.dialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(addr)
	cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	if p.UpstreamRoots != nil {
		cfg.RootCAs = p.UpstreamRoots()
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// dial connects to host:port after checking the policy and the address: a name mapped
// by a host rule goes to its address whatever it is; any other name or literal must
// come to a public address that is not one of this machine's.
func (p *Proxy) dial(ctx context.Context, pol *Policy, host string, port int) (net.Conn, error) {
	if err := pol.Check(host, port); err != nil && !asked(ctx, host, port) {
		return nil, err
	}
	var addrs []netip.Addr
	if a, ok := pol.Mapped(host); ok {
		addrs = []netip.Addr{a}
	} else {
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{a}
		} else {
			found, err := p.resolve(ctx, host)
			if err != nil {
				return nil, &resolveError{host: host, err: err}
			}
			addrs = found
		}
		var ok []netip.Addr
		for _, a := range addrs {
			if Public(a) && !ownAddr(a) {
				ok = append(ok, a.Unmap())
			}
		}
		if len(ok) == 0 {
			return nil, &Refusal{Host: host, Port: port, Reason: ReasonPrivate}
		}
		addrs = ok
	}
	timeout := p.DialTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	d := net.Dialer{Timeout: timeout}
	var firstErr error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return watch(c, p.limits.write, p.limits.tunnel, nil), nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

func (p *Proxy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if p.Resolve != nil {
		return p.Resolve(ctx, host)
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// ownAddr says whether a is one of this machine's addresses (cached for a minute).
func ownAddr(a netip.Addr) bool {
	own.Lock()
	defer own.Unlock()
	if time.Since(own.at) > time.Minute {
		own.addrs = map[netip.Addr]bool{}
		if list, err := net.InterfaceAddrs(); err == nil {
			for _, x := range list {
				if n, ok := x.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok {
						own.addrs[ip.Unmap()] = true
					}
				}
			}
		}
		own.at = time.Now()
	}
	a = a.Unmap()
	if own.addrs[a] {
		return true
	}
	// A NAT64 or 6to4 gateway on the way turns these into the IPv4 address they carry.
	v4, ok := embeddedIPv4(a)
	return ok && own.addrs[v4]
}

// embeddedIPv4 returns the IPv4 address a NAT64 (64:ff9b::/96) or 6to4 (2002::/16)
// address carries.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case !a.Is6():
		return netip.Addr{}, false
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

var own struct {
	sync.Mutex
	at    time.Time
	addrs map[netip.Addr]bool
}

// proxyUser is the user name of a Basic Proxy-Authorization value, when it is a plain
// token; anything else is "".
func proxyUser(h string) string {
	b64, ok := strings.CutPrefix(h, "Basic ")
	if !ok || len(b64) > 256 {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return ""
	}
	user, _, _ := strings.Cut(string(raw), ":")
	if len(user) == 0 || len(user) > 64 {
		return ""
	}
	for i := 0; i < len(user); i++ {
		c := user[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return ""
		}
	}
	return user
}

func clip(s string) string {
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// whatFailed says what kept a request from its host, for the sandbox: in words of
// its own, never the error's text, which names addresses of the host's network (the
// resolver's "lookup x on 10.0.0.2:53", the dialer's "dial tcp 10.1.2.3:443").
func whatFailed(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		switch {
		case dns.IsTimeout:
			return "the name could not be resolved: the lookup timed out"
		case dns.IsNotFound:
			return "the name could not be resolved: no such host"
		}
		return "the name could not be resolved: the lookup failed"
	}
	var unresolved *resolveError
	var alert tls.AlertError
	var record tls.RecordHeaderError
	var verify *tls.CertificateVerificationError
	var ne net.Error
	switch {
	case errors.As(err, &unresolved):
		return "the name could not be resolved"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "the connection was reset"
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return "no route to the host"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "the connection timed out"
	case errors.As(err, &verify):
		return "its TLS certificate could not be verified"
	case errors.As(err, &alert):
		return "it refused the TLS handshake (" + alert.Error() + ")"
	case errors.As(err, &record):
		return "it does not speak TLS"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "it closed the connection"
	}
	return "the connection failed (Caddy's log has the details)"
}

// resolveError is a name that could not be resolved.
type resolveError struct {
	host string
	err  error
}

func (e *resolveError) Error() string { return "resolving " + e.host + ": " + e.err.Error() }
func (e *resolveError) Unwrap() error { return e.err }

// copyBuffers are ReverseProxy's copy buffers, pooled. They are small: each one a
// stalled connection holds is Caddy's memory.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }

// bufferedConn reads what the HTTP server buffered first.
type bufferedConn struct {
	net.Conn
	r io.Reader
}

func (c bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connListener is a net.Listener fed connections by ServeConn.
type connListener struct {
	ch     chan net.Conn
	done   chan struct{}
	closer sync.Once
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) put(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.closer.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return proxyAddr{} }

type proxyAddr struct{}

func (proxyAddr) Network() string { return "sandbox" }
func (proxyAddr) String() string  { return "egress-proxy" }
