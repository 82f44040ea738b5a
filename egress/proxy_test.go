package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxyFixture serves a Proxy on a loopback listener (standing in for the sandbox's
// listener) and records refusals.
type proxyFixture struct {
	addr    string
	mu      sync.Mutex
	refused []string
	policy  atomic.Pointer[Policy]
}

func newProxyFixture(t testing.TB, r Rules) *proxyFixture {
	return newProxyFixtureWith(t, r, nil)
}

func newProxyFixtureWith(t testing.TB, r Rules, tune func(*Proxy)) *proxyFixture {
	t.Helper()
	f := &proxyFixture{}
	f.policy.Store(mustCompile(t, r))
	px := &Proxy{
		Policy: f.policy.Load,
		Refused: func(user string, r *Refusal) {
			f.mu.Lock()
			f.refused = append(f.refused, user+" "+r.Error())
			f.mu.Unlock()
		},
		Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return nil, errors.New("tests resolve no names")
		},
	}
	if tune != nil {
		tune(px)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); px.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			px.ServeConn(c)
		}
	}()
	f.addr = ln.Addr().String()
	return f
}

func (f *proxyFixture) client(user string) *http.Client {
	u := &url.URL{Scheme: "http", Host: f.addr}
	if user != "" {
		u.User = url.User(user)
	}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{}}, Timeout: 10 * time.Second}
}

func (f *proxyFixture) refusals() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.refused...)
}

// upstream is a loopback server that records what it received.
func upstream(t testing.TB) (*httptest.Server, *atomic.Int32, chan http.Header) {
	var hits atomic.Int32
	headers := make(chan http.Header, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case headers <- r.Header.Clone():
		default:
		}
		fmt.Fprintf(w, "hello from %s %s", r.Host, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits, headers
}

func portOf(t testing.TB, u string) string {
	pu, _ := url.Parse(u)
	return pu.Port()
}

func TestProxyForwardsAllowedAndRefusesOthers(t *testing.T) {
	up, hits, headers := upstream(t)
	port := portOf(t, up.URL)
	f := newProxyFixture(t, Rules{
		Allow:       []string{"allowed.test:" + port, "other.test:" + port},
		Hosts:       map[string]string{"allowed.test": "127.0.0.1", "other.test": "127.0.0.1", "refused.test": "127.0.0.1"},
		Credentials: []Credential{{Prefix: "http://allowed.test:" + port + "/api", Header: "Authorization", Value: "Bearer s3cret"}},
	})
	c := f.client("j0123456789ab")

	res, err := c.Get("http://allowed.test:" + port + "/api/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != "hello from allowed.test:"+port+" /api/x" {
		t.Fatalf("%d %q", res.StatusCode, body)
	}
	h := <-headers
	if h.Get("Authorization") != "Bearer s3cret" || h.Get("Proxy-Authorization") != "" {
		t.Fatalf("upstream got %v", h)
	}
	// No credential outside the prefix, and none on another host.
	for _, u := range []string{"http://allowed.test:" + port + "/apix", "http://other.test:" + port + "/api"} {
		res, err = c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if h := <-headers; h.Get("Authorization") != "" {
			t.Fatalf("%s got the credential", u)
		}
	}

	before := hits.Load()
	res, err = c.Get("http://refused.test:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 403 || string(body) != "blocked: refused.test (not allowed by the operator)\n" {
		t.Fatalf("%d %q", res.StatusCode, body)
	}
	if hits.Load() != before {
		t.Fatal("the upstream saw a refused request")
	}
	if r := f.refusals(); len(r) != 1 || r[0] != "j0123456789ab blocked: refused.test (not allowed by the operator)" {
		t.Fatalf("refusals %q", r)
	}

	// A new policy applies to the next request.
	f.policy.Store(mustCompile(t, Rules{Allow: []string{"other.test:" + port}, Hosts: map[string]string{"other.test": "127.0.0.1"}}))
	res, err = c.Get("http://allowed.test:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 403 {
		t.Fatalf("after the policy changed: %d", res.StatusCode)
	}
}

func TestProxyConnectTunnel(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls ok, auth=%q", r.Header.Get("Authorization"))
	}))
	defer up.Close()
	port := portOf(t, up.URL)
	f := newProxyFixture(t, Rules{Allow: []string{"tls.test:" + port}, Hosts: map[string]string{"tls.test": "127.0.0.1"}})
	c := f.client("")
	tr := c.Transport.(*http.Transport)
	tr.TLSClientConfig = up.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tr.TLSClientConfig.ServerName = "example.com" // httptest's certificate names example.com
	res, err := c.Get("https://tls.test:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(body) != `tls ok, auth=""` {
		t.Fatalf("%q", body)
	}
}

// rawProxy sends raw bytes to the proxy and returns its answer's status line and body.
func rawProxy(t *testing.T, f *proxyFixture, req string) (string, string) {
	t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go io.WriteString(c, req)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	return res.Status, string(body)
}

func TestProxyRefusesBadRequests(t *testing.T) {
	up, hits, _ := upstream(t)
	port := portOf(t, up.URL)
	f := newProxyFixture(t, Rules{
		Allow: []string{"allowed.test:" + port, "*"},
		Hosts: map[string]string{"allowed.test": "127.0.0.1"},
	})
	cases := []struct{ req, status, body string }{
		{"CONNECT allowed.test:22 HTTP/1.1\r\nHost: allowed.test:22\r\n\r\n", "403 Forbidden", "blocked: allowed.test (port not allowed by the operator)\n"},
		{"CONNECT allowed.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "403 Forbidden", "blocked: \"allowed.test\" (not a valid host name)\n"},
		{"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n", "403 Forbidden", "blocked: 127.0.0.1 (resolves to a private or local address)\n"},
		{"CONNECT [::ffff:10.0.0.1]:443 HTTP/1.1\r\nHost: x\r\n\r\n", "403 Forbidden", "blocked: 10.0.0.1 (resolves to a private or local address)\n"},
		{"CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: x\r\n\r\n", "403 Forbidden", "blocked: 169.254.169.254 (resolves to a private or local address)\n"},
		{"GET http://127.0.0.1:" + port + "/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "403 Forbidden", ""},
		{"GET http://b%C3%BCcher.de/ HTTP/1.1\r\nHost: x\r\n\r\n", "403 Forbidden", "blocked: \"b\\u00fccher.de\" (not a valid host name)\n"},
		{"CONNECT xn--bcher-kva.de.:443 HTTP/1.1\r\nHost: x\r\n\r\n", "502 Bad Gateway", "cannot reach xn--bcher-kva.de:443: the name could not be resolved\n"},
		{"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "400 Bad Request", "this is the sandbox's HTTP proxy: send it absolute URLs or CONNECT\n"},
		{"GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "400 Bad Request", "this proxy forwards http:// URLs; use CONNECT for https\n"},
		{"GET http://allowed.test:" + port + "/ HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n", "431 Request Header Fields Too Large", ""},
	}
	for _, c := range cases {
		status, body := rawProxy(t, f, c.req)
		if status != c.status || (c.body != "" && body != c.body) {
			t.Errorf("%.80q: %s %q, want %s %q", c.req, status, body, c.status, c.body)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the upstream saw %d requests", hits.Load())
	}
}

// Whatever bytes a program sends, the proxy answers with HTTP or closes, and dials
// nothing but what the policy allows.
func FuzzProxyRequest(f *testing.F) {
	for _, s := range []string{
		"CONNECT allowed.test:9 HTTP/1.1\r\nHost: allowed.test:9\r\n\r\n",
		"GET http://allowed.test:9/x HTTP/1.1\r\nHost: allowed.test\r\nProxy-Authorization: Basic ajE=\r\n\r\n",
		"GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST http://allowed.test:9/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	var resolved atomic.Int32
	pol := mustCompile(f, Rules{Allow: []string{"allowed.test:9"}, Hosts: map[string]string{"allowed.test": "127.0.0.1"}})
	px := &Proxy{
		Policy:      func() *Policy { return pol },
		Resolve:     func(context.Context, string) ([]netip.Addr, error) { resolved.Add(1); return nil, errors.New("no") },
		DialTimeout: time.Second,
	}
	defer px.Close()
	f.Fuzz(func(t *testing.T, req []byte) {
		a, b := net.Pipe()
		px.ServeConn(a)
		b.SetDeadline(time.Now().Add(2 * time.Second))
		go func() { b.Write(req); b.Write([]byte("\r\n\r\n")) }()
		head := make([]byte, 9)
		n, _ := io.ReadFull(b, head)
		b.Close()
		if n > 0 && string(head[:n]) != "HTTP/1.1 "[:n] && string(head[:n]) != "HTTP/1.0 "[:n] {
			t.Fatalf("answer %q", head[:n])
		}
		if resolved.Load() != 0 {
			t.Fatal("a name outside the policy was resolved")
		}
	})
}
