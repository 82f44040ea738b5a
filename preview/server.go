package preview

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"
)

// ErrNoListener is what a Dial function returns (wrapped) when nothing listens on the
// port yet; the person then sees a page that waits and retries instead of an error.
var ErrNoListener = errors.New("nothing listens on that port in the sandbox")

// maxRelays is the most pooled upstream connections (relays) one port gets at a time
// for requests without a body; maxOtherRelays more serve requests with a body and
// upgrades. An upgraded connection (WebSocket) leaves the pool and its count.
const (
	maxRelays      = 16
	maxOtherRelays = 4
	relayIdleTime  = 60 * time.Second
)

// portVar and labelVar are the request variables that carry the preview's port and
// label to the reverse proxy's upstream address, <label>:<port>: the dialer finds the
// preview's owner by its label, and each preview's relays are pooled apart.
const (
	portVar  = "mcp_sandbox_preview_port"
	labelVar = "mcp_sandbox_preview_label"
)

// Options configure a [Server].
type Options struct {
	// Domain is the previews domain (see [NormalizeDomain]).
	Domain string
	// Owner names the sandbox whose ports this server previews, and APIKey (with
	// Auth) is the key that opens them; Owners, when set, serves several instead.
	Owner string
	// Owners reports whether this server previews the ports of owner, and the key
	// that opens them with Auth: a key opens only its own owner's previews.
	Owners func(owner string) (key string, ok bool)
	// TTL is how long an exposed port stays reachable.
	TTL time.Duration
	// Dial opens a connection to port inside owner's sandbox. When nothing listens
	// it returns an error wrapping ErrNoListener.
	Dial func(ctx context.Context, owner string, port int) (net.Conn, error)
	// Auth, when set, makes the person sign in with APIKey once per browser and
	// preview host; wrong keys count in Guesses, which Auth requires.
	Auth    bool
	APIKey  string
	Guesses Guesses
	// ClientIP returns the address sign-in attempts are counted by.
	ClientIP func(*http.Request) string
	// Registry defaults to [Shared].
	Registry *Registry
	// Storage, when set, is Caddy's storage: the registry keeps previews there, so
	// that every Caddy instance sharing it serves them ([Registry.UseStorage]).
	Storage Storage
	// Observe, when set, is called once per proxied request with its result (ok,
	// not_found, no_listener, unauthorized, error) and the bytes sent to the person.
	Observe func(result string, bytes int64)
	Logger  *zap.Logger
}

// Server is the HTTP side of previews for one sandbox.
type Server struct {
	opts      Options
	reg       *Registry
	log       *zap.Logger
	proxy     *reverseproxy.Handler
	transport *http.Transport
	direct    *directTransport
}

// New checks opts and returns a Server; call Provision before serving.
func New(opts Options) (*Server, error) {
	d, err := NormalizeDomain(opts.Domain)
	if err != nil {
		return nil, err
	}
	opts.Domain = d
	if opts.Dial == nil {
		return nil, errors.New("preview server needs a Dial function")
	}
	if opts.TTL <= 0 {
		return nil, errors.New("preview lifetime must be positive")
	}
	if opts.Owners == nil {
		owner, key := opts.Owner, opts.APIKey
		opts.Owners = func(o string) (string, bool) { return key, o == owner }
	}
	if opts.Auth && ((opts.APIKey == "" && opts.Owner != "") || opts.Guesses == nil) {
		return nil, errors.New("preview_auth needs the API key and a counter of wrong keys")
	}
	if opts.Registry == nil {
		opts.Registry = Shared()
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.ClientIP == nil {
		opts.ClientIP = func(r *http.Request) string {
			h, _, _ := net.SplitHostPort(r.RemoteAddr)
			return h
		}
	}
	return &Server{opts: opts, reg: opts.Registry, log: opts.Logger}, nil
}

// Domain is the previews domain.
func (s *Server) Domain() string { return s.opts.Domain }

// Provision sets up Caddy's reverse proxy with a transport whose connections come
// from Dial. The transport keeps idle connections (one relay each) pooled per port,
// so a page with many assets does not pay for a new relay per request. With
// Options.Storage, the registry keeps its previews there from now on.
func (s *Server) Provision(ctx caddy.Context) error {
	if s.opts.Storage != nil {
		s.reg.UseStorage(s.opts.Storage, s.log)
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		label, p, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("bad upstream port %q", p)
		}
		pv, ok := s.reg.Lookup(ctx, label)
		if !ok || pv.Port != port {
			return nil, errors.New("the preview was closed")
		}
		return s.opts.Dial(ctx, pv.Owner, port)
	}
	s.direct = newDirectTransport(dial, maxRelays, relayIdleTime)
	s.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return dial(ctx, addr)
		},
		// Each relay is an exec with a few processes in the sandbox, and starting one
		// takes tens of milliseconds: at most maxRelays per port, kept alive. Without
		// the cap, concurrent requests that miss the idle pool for a moment each start
		// a dial, and a burst becomes a storm of execs; with it they wait for a
		// connection to come free. It also bounds what a flood of requests through a
		// preview URL can start inside the sandbox.
		MaxConnsPerHost:     maxOtherRelays,
		MaxIdleConnsPerHost: maxOtherRelays,
		MaxIdleConns:        256,
		IdleConnTimeout:     relayIdleTime,
		DisableCompression:  true, // pass the app's bytes through as they are
		ReadBufferSize:      64 << 10,
		WriteBufferSize:     64 << 10,
	}
	s.proxy = &reverseproxy.Handler{
		Upstreams: reverseproxy.UpstreamPool{{Dial: "{http.vars." + labelVar + "}:{http.vars." + portVar + "}"}},
		Transport: relayTransport{s.direct, s.transport},
	}
	if err := s.proxy.Provision(ctx); err != nil {
		return fmt.Errorf("setting up the preview proxy: %w", err)
	}
	return nil
}

// relayTransport is the reverse proxy's transport: plain HTTP/1.1 over relays, through
// the direct transport when it can take the request, else through http.Transport.
type relayTransport struct {
	direct *directTransport
	t      *http.Transport
}

// RoundTrip sends r over a pooled relay. The reverse proxy leaves the scheme to its
// transport (Caddy's own HTTP transport sets it), so it is set here.
func (rt relayTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r.URL.Scheme = "http"
	// Dev servers (Vite, webpack, Django, ...) refuse Host names they do not know;
	// localhost is the one they all accept. The original host goes along in
	// X-Forwarded-Host, which the reverse proxy has set by now.
	if _, port, err := net.SplitHostPort(r.URL.Host); err == nil {
		r.Host = "localhost:" + port
	}
	if rt.direct.eligible(r) {
		resp, err := rt.direct.RoundTrip(r)
		if !errors.Is(err, errDirectFull) {
			return resp, err
		}
	}
	return rt.t.RoundTrip(r)
}

// closeIdle closes the pooled relays that are not in use.
func (s *Server) closeIdle() {
	if s.transport != nil {
		s.transport.CloseIdleConnections()
		s.direct.CloseIdleConnections()
	}
}

// Cleanup closes the pooled relays and releases the proxy.
func (s *Server) Cleanup() error {
	s.closeIdle()
	if s.proxy != nil {
		return s.proxy.Cleanup()
	}
	return nil
}

// Expose makes port of owner's sandbox live (or renews it) and returns the preview.
func (s *Server) Expose(owner string, port int) Preview {
	p := s.reg.Expose(owner, s.opts.Domain, port, s.opts.TTL)
	s.log.Info("port exposed", zap.Int("port", port), zap.String("host", p.Host()), zap.Time("expires", p.Expires))
	return p
}

// Unexpose ends the preview of port of owner's sandbox; it reports whether one was
// live. Pooled connections to the port are closed.
func (s *Server) Unexpose(owner string, port int) bool {
	ok := s.reg.Unexpose(owner, port)
	if ok {
		s.log.Info("port unexposed", zap.Int("port", port))
		s.closeIdle()
	}
	return ok
}

// URL is the address of p for a person who reaches the site at origin (scheme, host
// and port of the MCP endpoint): same scheme and port, the preview's host.
func (s *Server) URL(p Preview, origin string) string {
	return atOrigin(p.Host(), origin) + "/"
}

// FrameDomain is the origin of every preview for a person who reaches the site at
// origin, as a CSP source with a wildcard label: https://*.<domain>[:port].
func (s *Server) FrameDomain(origin string) string {
	return atOrigin("*."+s.opts.Domain, origin)
}

// atOrigin is host with the scheme and port of origin.
func atOrigin(host, origin string) string {
	scheme, hostport, ok := strings.Cut(origin, "://")
	if !ok {
		scheme, hostport = "https", origin
	}
	port := ""
	if _, pt, err := net.SplitHostPort(hostport); err == nil {
		if !(scheme == "http" && pt == "80") && !(scheme == "https" && pt == "443") {
			port = ":" + pt
		}
	}
	return scheme + "://" + host + port
}

// Match reports whether a request for host belongs to previews: any host under the
// previews domain does, live or not, so that unknown labels get a 404 here instead of
// reaching the rest of the site.
func (s *Server) Match(host string) bool {
	_, under := splitHost(host, s.opts.Domain)
	return under
}

// ServeHTTP answers a request for a preview host. Unknown, expired and unexposed
// labels get 404 without any Docker call.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	label, _ := splitHost(r.Host, s.opts.Domain)
	p, ok := Preview{}, false
	if label != "" {
		p, ok = s.reg.Lookup(r.Context(), label)
	}
	if ok {
		_, ok = s.opts.Owners(p.Owner)
	}
	if !ok || p.Domain != s.opts.Domain {
		s.observe("not_found", 0)
		notFound(w)
		return nil
	}
	if s.opts.Auth && !s.authorized(w, r, p) {
		s.observe("unauthorized", 0)
		return nil
	}
	stripAuthCookie(r)

	// Streams opened through the preview (WebSockets, SSE, slow downloads) end when
	// the preview does: the reverse proxy closes the upstream when the request's
	// context is done.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	r = r.WithContext(ctx)

	cw := &countingWriter{ResponseWriter: w}
	caddyhttp.SetVar(r.Context(), portVar, strconv.Itoa(p.Port))
	caddyhttp.SetVar(r.Context(), labelVar, p.Label)
	err := s.proxy.ServeHTTP(cw, r, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil }))
	if ferr := cw.finish(); err == nil {
		err = ferr
	}
	switch {
	case err == nil:
		s.observe("ok", cw.n.Load())
		return nil
	case cw.wrote.Load():
		s.observe("error", cw.n.Load())
		return err
	case errors.Is(err, ErrNoListener):
		s.observe("no_listener", 0)
		waiting(w, r, p.Port, "")
		return nil
	case r.Context().Err() != nil:
		s.observe("error", 0)
		return nil // the person went away
	}
	s.observe("error", 0)
	s.log.Warn("preview upstream failed", zap.Int("port", p.Port), zap.Error(err))
	waiting(w, r, p.Port, "The sandbox could not be reached; trying again.")
	return nil
}

func (s *Server) observe(result string, n int64) {
	if s.opts.Observe != nil {
		s.opts.Observe(result, n)
	}
}

// countingWriter counts the bytes sent to the person. Large bodies are gathered into
// big writes: the reverse proxy copies in 32 KiB pieces, and a write to the client's
// socket per piece costs more than the relay itself. Flushes (SSE, streaming) pass the
// gathered bytes on at once, and Unwrap keeps hijacking (WebSockets) working through
// http.ResponseController.
type countingWriter struct {
	http.ResponseWriter
	n     atomic.Int64
	wrote atomic.Bool
	bw    *bufio.Writer // from the first large write on
}

// gatherSize is the write size for large bodies.
const gatherSize = 256 << 10

var gatherPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, gatherSize) }}

func (c *countingWriter) WriteHeader(code int) {
	c.wrote.Store(true)
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.wrote.Store(true)
	if c.bw == nil && len(p) >= 32<<10 {
		c.bw = gatherPool.Get().(*bufio.Writer)
		c.bw.Reset(c.ResponseWriter)
	}
	var n int
	var err error
	if c.bw != nil {
		n, err = c.bw.Write(p)
	} else {
		n, err = c.ResponseWriter.Write(p)
	}
	c.n.Add(int64(n))
	return n, err
}

// FlushError sends what was gathered and flushes the response.
func (c *countingWriter) FlushError() error {
	if c.bw != nil {
		if err := c.bw.Flush(); err != nil {
			return err
		}
	}
	return http.NewResponseController(c.ResponseWriter).Flush()
}

// finish sends what is left of a gathered body.
func (c *countingWriter) finish() error {
	if c.bw == nil {
		return nil
	}
	err := c.bw.Flush()
	c.bw.Reset(nil)
	gatherPool.Put(c.bw)
	c.bw = nil
	return err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Hijack hands the connection over to an upgraded protocol (WebSockets) and goes on
// counting what is sent on it.
func (c *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(c.ResponseWriter).Hijack()
	if err != nil {
		return conn, brw, err
	}
	c.wrote.Store(true)
	return &countingConn{Conn: conn, n: &c.n}, brw, nil
}

// countingConn counts the bytes written to a hijacked connection.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	k, err := c.Conn.Write(p)
	c.n.Add(int64(k))
	return k, err
}

// CloseWrite half-closes the connection, as the reverse proxy does when one side of a
// tunnel ends.
func (c *countingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func noStore(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}

func notFound(w http.ResponseWriter) {
	noStore(w)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprintln(w, "404: this preview does not exist, has expired, or was closed. Ask for a new link.")
}

// waitingRetry is how often the waiting page reloads itself.
const waitingRetry = 2

var waitingPage = template.Must(template.New("waiting").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="{{.Retry}}">
<title>Waiting for port {{.Port}}…</title>
<style>
body{font-family:system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;color:#222;line-height:1.5}
.dot{display:inline-block;width:.6em;height:.6em;border-radius:50%;background:#e0a100;margin-right:.5em;animation:p 1s infinite alternate}
@keyframes p{from{opacity:.3}to{opacity:1}}
code{background:#f2f2f2;padding:.1em .3em;border-radius:3px}
</style></head>
<body>
<h1><span class="dot"></span>Waiting for the app on port {{.Port}}</h1>
<p>{{if .Note}}{{.Note}}{{else}}Nothing is listening on port <code>{{.Port}}</code> inside the sandbox yet. The app may still be starting.{{end}}</p>
<p>This page tries again every {{.Retry}} seconds and shows the app as soon as it answers.</p>
</body></html>
`))

// waiting answers while nothing listens on the port: for a page load, an HTML page
// that reloads itself; for anything else (assets, fetch, WebSockets), a short 503.
func waiting(w http.ResponseWriter, r *http.Request, port int, note string) {
	noStore(w)
	w.Header().Set("Retry-After", strconv.Itoa(waitingRetry))
	if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = waitingPage.Execute(w, map[string]any{"Port": port, "Retry": waitingRetry, "Note": note})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	if note != "" {
		fmt.Fprintf(w, "503: %s\n", note)
		return
	}
	fmt.Fprintf(w, "503: nothing listens on port %d inside the sandbox yet; retry shortly\n", port)
}
