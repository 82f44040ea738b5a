package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// testCA is a CA for the tests, as an Issuer and as the roots that trust it.
func testCA(t testing.TB, name string) (*CAIssuer, *x509.CertPool) {
	cert, key, _ := testenv.CA(t, name)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return NewCAIssuer([]*x509.Certificate{cert}, key), pool
}

// tlsUpstream is an HTTPS server for names, with a certificate from its own CA.
func tlsUpstream(t testing.TB, h http.Handler, names ...string) (*httptest.Server, *x509.CertPool) {
	ca, pool := testCA(t, "upstream CA")
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return ca.Certificate(hello.ServerName)
	}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, pool
}

func TestInterceptAddsCredential(t *testing.T) {
	got := make(chan http.Header, 4)
	up, upRoots := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
	}))
	port := portOf(t, up.URL)
	ours, ourRoots := testCA(t, "sandbox CA")
	f := newProxyFixtureWith(t, Rules{
		Allow:       []string{"cred.test:" + port, "plain.test:" + port},
		Hosts:       map[string]string{"cred.test": "127.0.0.1", "plain.test": "127.0.0.1"},
		Credentials: []Credential{{Prefix: "https://cred.test:" + port + "/api", Header: "Authorization", Value: "Bearer s3cret"}},
	}, func(p *Proxy) { p.Issuer, p.UpstreamRoots = ours, func() *x509.CertPool { return upRoots } })

	// The program trusts only our CA: the credential host is intercepted and works.
	c := f.client("j0123456789ab")
	c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: ourRoots}
	res, err := c.Get("https://cred.test:" + port + "/api/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(body) != "hello cred.test:"+port+" /api/x" {
		t.Fatalf("%q", body)
	}
	if h := <-got; h.Get("Authorization") != "Bearer s3cret" {
		t.Fatalf("upstream got %v", h)
	}
	if res.TLS.PeerCertificates[0].Issuer.CommonName != "sandbox CA" {
		t.Fatal("not intercepted")
	}

	// A host without a credential passes through: the program sees the upstream's own
	// certificate, and nothing is added.
	c2 := f.client("")
	c2.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: upRoots}
	res, err = c2.Get("https://plain.test:" + port + "/api/x")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if h := <-got; h.Get("Authorization") != "" {
		t.Fatalf("pass-through got %v", h)
	}
}

// connectTLS opens a CONNECT tunnel to target and starts TLS in it with sni.
func connectTLS(t *testing.T, f *proxyFixture, target, sni string, roots *x509.CertPool) (*tls.Conn, error) {
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", res, err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: roots})
	return tc, tc.Handshake()
}

func TestInterceptRefusesMismatches(t *testing.T) {
	up, upRoots := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the upstream got %s %s", r.Host, r.URL)
	}))
	port := portOf(t, up.URL)
	ours, ourRoots := testCA(t, "sandbox CA")
	_, otherRoots := testCA(t, "someone else")
	f := newProxyFixtureWith(t, Rules{
		Allow:       []string{"cred.test:" + port, "other.test:" + port},
		Hosts:       map[string]string{"cred.test": "127.0.0.1", "other.test": "127.0.0.1"},
		Credentials: []Credential{{Prefix: "https://cred.test:" + port, Header: "Authorization", Value: "Bearer s3cret"}},
	}, func(p *Proxy) { p.Issuer, p.UpstreamRoots = ours, func() *x509.CertPool { return otherRoots } })

	// SNI that is not the CONNECT target: no handshake.
	if _, err := connectTLS(t, f, "cred.test:"+port, "other.test", ourRoots); err == nil {
		t.Fatal("a handshake with another SNI succeeded")
	}
	// A Host header that is not the CONNECT target: 400.
	tc, err := connectTLS(t, f, "cred.test:"+port, "cred.test", ourRoots)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: other.test:%s\r\n\r\n", port)
	res, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || res.StatusCode != 400 {
		t.Fatalf("mismatched Host: %v %v", res, err)
	}
	// An upstream whose certificate the proxy does not trust: 502, nothing sent.
	tc, err = connectTLS(t, f, "cred.test:"+port, "cred.test", ourRoots)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: cred.test:%s\r\n\r\n", port)
	res, err = http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || res.StatusCode != 502 {
		t.Fatalf("untrusted upstream: %v %v", res, err)
	}
	body, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(body), "certificate") || strings.Contains(string(body), "s3cret") {
		t.Fatalf("%q", body)
	}
	_ = upRoots
}

// A WebSocket (any HTTP upgrade) works through an intercepted host, with the
// credential on its handshake.
func TestInterceptWebSocket(t *testing.T) {
	auth := make(chan string, 1)
	up, upRoots := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want an upgrade", 400)
			return
		}
		auth <- r.Header.Get("Authorization")
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		buf := make([]byte, 4)
		if _, err := io.ReadFull(brw, buf); err == nil {
			c.Write(buf)
		}
	}))
	port := portOf(t, up.URL)
	ours, ourRoots := testCA(t, "sandbox CA")
	f := newProxyFixtureWith(t, Rules{
		Allow:       []string{"ws.test:" + port},
		Hosts:       map[string]string{"ws.test": "127.0.0.1"},
		Credentials: []Credential{{Prefix: "https://ws.test:" + port, Header: "Authorization", Value: "Bearer s3cret"}},
	}, func(p *Proxy) { p.Issuer, p.UpstreamRoots = ours, func() *x509.CertPool { return upRoots } })
	tc, err := connectTLS(t, f, "ws.test:"+port, "ws.test", ourRoots)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(tc, "GET /ws HTTP/1.1\r\nHost: ws.test:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", port)
	br := bufio.NewReader(tc)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	if got := <-auth; got != "Bearer s3cret" {
		t.Fatalf("the upstream got %q", got)
	}
	tc.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo %q %v", buf, err)
	}
}
