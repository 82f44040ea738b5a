package egress

import (
	"bufio"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// recorder is an upstream that records the request line and credential it got.
type recorder struct {
	mu   sync.Mutex
	seen []string // "METHOD URI key=<X-Key>"
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	rec.seen = append(rec.seen, r.Method+" "+r.RequestURI+" key="+r.Header.Get("X-Key"))
	rec.mu.Unlock()
	fmt.Fprintf(w, "ok %s", r.RequestURI)
}

func (rec *recorder) take() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	s := rec.seen
	rec.seen = nil
	return s
}

// pathCases are request paths to a host whose credential is scoped to /org: what
// the upstream must get ("" = nothing, the proxy answers 4xx saying it refused; "400" =
// nothing, the HTTP server answers 400 before the proxy sees the request).
var pathCases = []struct{ method, path, upstream string }{
	{"GET", "/org/x", "GET /org/x key=s3cret"},
	{"GET", "/org", "GET /org key=s3cret"},
	{"GET", "/org/a%20b?q=%2e", "GET /org/a%20b?q=%2e key=s3cret"},
	{"GET", "/admin", "GET /admin key="},
	{"GET", "/organ", "GET /organ key="},
	{"GET", "/org/../admin", ""},
	{"GET", "/org/./x", ""},
	{"GET", "/org/%2e%2e/admin", ""},
	{"GET", "/org/%2E%2E/admin", ""},
	{"GET", "/org/.%2e/admin", ""},
	{"GET", "/org%2f..%2fadmin", ""},
	{"GET", "/org%2F%2E%2E%2Fadmin", ""},
	{"GET", "/org/..;/admin", ""},
	{"GET", "/org/%252e%252e/admin", ""},
	{"GET", "/org\\..\\admin", ""},
	{"GET", "/org/%5c..%5cadmin", ""},
	// Overlong UTF-8 of '.', '/' and '\', which lax decoders read as ASCII.
	{"GET", "/org/%c0%ae%c0%ae/admin", ""},
	{"GET", "/org/%C0%AE%C0%AE/admin", ""},
	{"GET", "/org/%e0%80%ae%e0%80%ae/admin", ""},
	{"GET", "/org/..%c0%afadmin", ""},
	{"GET", "/org/x%c0%af..%c0%af..%c0%afadmin", ""},
	{"GET", "/org/..%c1%9cadmin", ""},
	// Fullwidth and other compatibility forms of '.', '/' and '\' (NFKC or a
	// "best fit" code page turns them into ASCII).
	{"GET", "/org/%ef%bc%8e%ef%bc%8e/admin", ""},
	{"GET", "/org/\xef\xbc\x8e\xef\xbc\x8e/admin", ""},
	{"GET", "/org/x%ef%bc%8f..%ef%bc%8f..%ef%bc%8fadmin", ""},
	{"GET", "/org/x%ef%bc%bc..%ef%bc%bc..%ef%bc%bcadmin", ""},
	{"GET", "/org/%e2%80%a5/admin", ""},
	{"GET", "/org/x%e2%88%95..%e2%88%95..%e2%88%95admin", ""},
	{"GET", "/org/x%c2%a5..%c2%a5..%c2%a5admin", ""},
	{"GET", "/org/%ef%bc%852e%ef%bc%852e/admin", ""},
	// NUL and other control characters, which C servers cut the path at.
	{"GET", "/org/x%00/../../admin", ""},
	{"GET", "/org/x%00", ""},
	{"GET", "/org/..%09/admin", ""},
	// Dots with spaces, which Windows servers trim to dot segments.
	{"GET", "/org/%20../admin", ""},
	{"GET", "/org/..%20/admin", ""},
	{"GET", "/org/x/.../admin", ""},
	{"GET", "/org/.%20./admin", ""},
	{"GET", "/org/..%20;/admin", ""},
	// Double and triple encoding, and IIS's %u form.
	{"GET", "/org/%25%32%65%25%32%65/admin", ""},
	{"GET", "/org/%25252e%25252e/admin", ""},
	{"GET", "/org/%u002e%u002e/admin", "400"}, // not valid percent-encoding: Go's server answers 400 itself
	// Plain paths with letters of other scripts, dots inside names, and digits are sent.
	{"GET", "/org/caf%C3%A9", "GET /org/caf%C3%A9 key=s3cret"},
	{"GET", "/org/%E6%97%A5%E6%9C%AC/v1.2/.well-known/a..b", "GET /org/%E6%97%A5%E6%9C%AC/v1.2/.well-known/a..b key=s3cret"},
	{"GET", "/org/x;jsessionid=1", "GET /org/x;jsessionid=1 key=s3cret"},
	{"TRACE", "/org/x", ""},
	{"TRACK", "/admin", ""},
}

func checkPathCases(t *testing.T, rec *recorder, send func(method, path string) (int, string)) {
	t.Helper()
	for _, c := range pathCases {
		code, body := send(c.method, c.path)
		got := rec.take()
		switch {
		case c.upstream == "400" && (code != 400 || len(got) != 0):
			t.Errorf("%s %s: %d %q, the upstream got %q; want 400 and nothing sent", c.method, c.path, code, body, got)
		case c.upstream == "400":
		case c.upstream == "" && (code < 400 || code >= 500 || len(got) != 0):
			t.Errorf("%s %s: %d %q, the upstream got %q; want a 4xx and nothing sent", c.method, c.path, code, body, got)
		case c.upstream == "" && !strings.Contains(body, "refused"):
			t.Errorf("%s %s: %d %q does not say it was refused", c.method, c.path, code, body)
		case c.upstream != "" && (code != 200 || len(got) != 1 || got[0] != c.upstream):
			t.Errorf("%s %s: %d %q, the upstream got %q; want %q", c.method, c.path, code, body, got, c.upstream)
		}
	}
}

// A credential scoped to a path goes only with requests whose path is plainly under
// it: dot segments, encoded slashes, dots and backslashes, and TRACE are refused
// (plain HTTP), and what the upstream gets is the path matched.
func TestCredentialPathPlain(t *testing.T) {
	rec := &recorder{}
	up := httptest.NewServer(rec)
	defer up.Close()
	port := portOf(t, up.URL)
	f := newProxyFixture(t, Rules{
		Allow:       []string{"cred.test:" + port},
		Hosts:       map[string]string{"cred.test": "127.0.0.1"},
		Credentials: []Credential{{Prefix: "http://cred.test:" + port + "/org", Header: "X-Key", Value: "s3cret"}},
	})
	checkPathCases(t, rec, func(method, path string) (int, string) {
		status, body := rawProxy(t, f, fmt.Sprintf("%s http://cred.test:%s%s HTTP/1.1\r\nHost: cred.test:%s\r\n\r\n", method, port, path, port))
		var code int
		fmt.Sscanf(status, "%d", &code)
		return code, body
	})
}

// The same through an intercepted HTTPS host.
func TestCredentialPathIntercepted(t *testing.T) {
	rec := &recorder{}
	up, upRoots := tlsUpstream(t, rec)
	port := portOf(t, up.URL)
	ours, ourRoots := testCA(t, "sandbox CA")
	f := newProxyFixtureWith(t, Rules{
		Allow:       []string{"cred.test:" + port},
		Hosts:       map[string]string{"cred.test": "127.0.0.1"},
		Credentials: []Credential{{Prefix: "https://cred.test:" + port + "/org", Header: "X-Key", Value: "s3cret"}},
	}, func(p *Proxy) { p.Issuer, p.UpstreamRoots = ours, func() *x509.CertPool { return upRoots } })
	checkPathCases(t, rec, func(method, path string) (int, string) {
		tc, err := connectTLS(t, f, "cred.test:"+port, "cred.test", ourRoots)
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		fmt.Fprintf(tc, "%s %s HTTP/1.1\r\nHost: cred.test:%s\r\n\r\n", method, path, port)
		res, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return res.StatusCode, string(b)
	})
}

// Where every credential of a host covers the whole host, paths are passed on as
// they are: there is no narrower scope to leave.
func TestCredentialWholeHostKeepsPaths(t *testing.T) {
	rec := &recorder{}
	up := httptest.NewServer(rec)
	defer up.Close()
	port := portOf(t, up.URL)
	f := newProxyFixture(t, Rules{
		Allow:       []string{"cred.test:" + port},
		Hosts:       map[string]string{"cred.test": "127.0.0.1"},
		Credentials: []Credential{{Prefix: "http://cred.test:" + port, Header: "X-Key", Value: "s3cret"}},
	})
	status, body := rawProxy(t, f, "GET http://cred.test:"+port+"/api/v4/projects/group%2Fproject HTTP/1.1\r\nHost: x\r\n\r\n")
	if got := rec.take(); status != "200 OK" || len(got) != 1 || got[0] != "GET /api/v4/projects/group%2Fproject key=s3cret" {
		t.Fatalf("%s %q, upstream %q", status, body, got)
	}
	if status, _ := rawProxy(t, f, "TRACE http://cred.test:"+port+"/ HTTP/1.1\r\nHost: x\r\n\r\n"); status != "405 Method Not Allowed" || len(rec.take()) != 0 {
		t.Fatalf("TRACE to a credential host: %s", status)
	}
	if status, _ := rawProxy(t, f, "trace http://cred.test:"+port+"/ HTTP/1.1\r\nHost: x\r\n\r\n"); status != "405 Method Not Allowed" || len(rec.take()) != 0 {
		t.Fatalf("trace in lower case to a credential host: %s", status)
	}
}

// Every IPv6 form that carries an IPv4 address is judged by it, or refused.
func TestPublicEmbeddedIPv4(t *testing.T) {
	for s, want := range map[string]bool{
		"::127.0.0.1":          false, // IPv4-compatible
		"::8.8.8.8":            false,
		"::ffff:0:127.0.0.1":   false, // IPv4-translated
		"64:ff9b::127.0.0.1":   false, // NAT64
		"64:ff9b::10.0.0.1":    false,
		"64:ff9b::a9fe:a9fe":   false, // 169.254.169.254
		"64:ff9b::8.8.8.8":     true,
		"64:ff9b:1::8.8.8.8":   false, // local-use NAT64
		"2002:7f00:1::":        false, // 6to4 of 127.0.0.1
		"2002:c0a8:101::1":     false, // 6to4 of 192.168.1.1
		"2002:808:808::1":      true,  // 6to4 of 8.8.8.8
		"2001:0:4136:e378::1":  false, // Teredo
		"2001:0:7f00:1::1":     false,
		"::ffff:169.254.1.1":   false,
		"2606:4700:4700::1111": true,
	} {
		if got := Public(netip.MustParseAddr(s)); got != want {
			t.Errorf("Public(%s) = %v, want %v", s, got, want)
		}
	}
}

// allow * opens the public internet only: a name that a host line maps to loopback
// or a private address is refused unless an allow entry names it, through the policy
// and the proxy.
func TestAllowAnyNotMappedInside(t *testing.T) {
	rec := &recorder{}
	up := httptest.NewServer(rec)
	defer up.Close()
	port := portOf(t, up.URL)
	rules := Rules{
		Allow: []string{"*", "*:" + port, "named.test:" + port},
		Hosts: map[string]string{"admin.test": "127.0.0.1", "lan.test": "10.0.0.5", "v6.test": "::1", "named.test": "127.0.0.1", "pub.test": "8.8.8.8"},
	}
	p := mustCompile(t, rules)
	for host, want := range map[string]string{"admin.test": ReasonMappedInside, "lan.test": ReasonMappedInside, "v6.test": ReasonMappedInside, "named.test": "", "pub.test": ""} {
		err := p.Check(host, 443)
		if host == "named.test" {
			err = p.Check(host, mustAtoi(t, port))
		}
		ref, _ := err.(*Refusal)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s refused: %v", host, err)
		case want != "" && (ref == nil || ref.Reason != want):
			t.Errorf("%s: %v, want %q", host, err, want)
		}
	}
	f := newProxyFixture(t, rules)
	status, body := rawProxy(t, f, "GET http://admin.test:"+port+"/config/ HTTP/1.1\r\nHost: admin.test\r\n\r\n")
	if status != "403 Forbidden" || !strings.Contains(body, "allow entry naming it") || len(rec.take()) != 0 {
		t.Fatalf("allow * to a host mapped to loopback: %s %q", status, body)
	}
	status, _ = rawProxy(t, f, "CONNECT admin.test:"+port+" HTTP/1.1\r\nHost: admin.test\r\n\r\n")
	if status != "403 Forbidden" {
		t.Fatalf("CONNECT with allow * to a host mapped to loopback: %s", status)
	}
	if status, _ := rawProxy(t, f, "GET http://named.test:"+port+"/ HTTP/1.1\r\nHost: named.test\r\n\r\n"); status != "200 OK" || len(rec.take()) != 1 {
		t.Fatalf("a mapped host allowed by name: %s", status)
	}
}

func mustAtoi(t *testing.T, s string) int {
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil {
		t.Fatal(err)
	}
	return n
}
