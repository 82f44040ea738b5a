package egress

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"sync"
	"time"
)

// Interception: a CONNECT to a host that an https:// credential names is answered by
// the proxy itself. It shows the program a certificate for that host from the
// plugin's CA (which the sandbox trusts), refuses a TLS handshake whose SNI is not the
// CONNECT target, and forwards each request over a new TLS connection to the real host,
// verified against the upstream roots, with the credential added. Every other CONNECT
// is a plain tunnel: its TLS is end to end.

// Issuer makes the certificates shown for intercepted hosts.
type Issuer interface {
	Certificate(host string) (*tls.Certificate, error)
}

// CAIssuer signs leaf certificates for hosts with a CA's signing certificate and key
// (an intermediate and its chain up to, not including, the root). Leaves are cached.
type CAIssuer struct {
	chain []*x509.Certificate // signing certificate first
	key   crypto.Signer

	once    sync.Once
	leafKey *ecdsa.PrivateKey
	err     error

	mu    sync.Mutex
	cache map[string]*tls.Certificate
}

// leafLifetime is how long an issued leaf is valid; it is issued anew when less than
// half is left.
const (
	leafLifetime = 24 * time.Hour
	maxLeaves    = 1024
)

// NewCAIssuer returns an Issuer that signs with key as chain[0].
func NewCAIssuer(chain []*x509.Certificate, key crypto.Signer) *CAIssuer {
	return &CAIssuer{chain: chain, key: key, cache: map[string]*tls.Certificate{}}
}

// NotAfter is when the signing certificate expires.
func (c *CAIssuer) NotAfter() time.Time {
	if len(c.chain) == 0 {
		return time.Time{}
	}
	return c.chain[0].NotAfter
}

// Certificate returns a leaf for host (a normalized name or IP literal).
func (c *CAIssuer) Certificate(host string) (*tls.Certificate, error) {
	c.once.Do(func() { c.leafKey, c.err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader) })
	if c.err != nil {
		return nil, c.err
	}
	if len(c.chain) == 0 || c.key == nil {
		return nil, errors.New("the CA has no signing certificate")
	}
	now := time.Now()
	c.mu.Lock()
	if cert, ok := c.cache[host]; ok && cert.Leaf.NotAfter.Sub(now) > leafLifetime/2 && !cert.Leaf.NotAfter.After(c.chain[0].NotAfter) {
		c.mu.Unlock()
		return cert, nil
	}
	c.mu.Unlock()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(leafLifetime)
	if signer := c.chain[0]; notAfter.After(signer.NotAfter) {
		notAfter = signer.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.chain[0], c.leafKey.Public(), c.key)
	if err != nil {
		return nil, fmt.Errorf("issuing a certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	cert := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: c.leafKey, Leaf: leaf}
	for _, ca := range c.chain {
		cert.Certificate = append(cert.Certificate, ca.Raw)
	}
	c.mu.Lock()
	if len(c.cache) >= maxLeaves {
		clear(c.cache)
	}
	c.cache[host] = cert
	c.mu.Unlock()
	return cert, nil
}

// interceptConn is a program's TLS connection to an intercepted host, with what the
// CONNECT asked for.
type interceptConn struct {
	net.Conn
	watched *watchedConn // the connection from the sandbox under it; nil in tests
	host    string
	port    int
	user    string
}

type interceptKey struct{}

// intercept answers CONNECT to host:port itself: TLS with a certificate of ours, then
// HTTP/1.1 requests forwarded with credentials.
func (p *Proxy) intercept(c net.Conn, watched *watchedConn, host string, port int, user string) {
	tc := tls.Server(c, &tls.Config{
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			sni := hello.ServerName
			if sni == "" {
				sni = host // IP literals carry no SNI
				if net.ParseIP(host) == nil {
					return nil, errors.New("no SNI")
				}
			}
			if h, err := NormalizeHost(sni); err != nil || h != host {
				return nil, fmt.Errorf("SNI %q is not the CONNECT target %s", clip(sni), host)
			}
			return p.Issuer.Certificate(host)
		},
	})
	tc.SetDeadline(time.Now().Add(p.limits.readHeader))
	if err := tc.Handshake(); err != nil {
		tc.Close()
		return
	}
	tc.SetDeadline(time.Time{})
	if watched != nil {
		watched.setIdle(p.limits.idle) // until the first request
	}
	if !p.tlsLn.put(&interceptConn{Conn: tc, watched: watched, host: host, port: port, user: user}) {
		tc.Close()
	}
}

// serveIntercepted forwards one request from an intercepted connection to its host.
func (p *Proxy) serveIntercepted(w http.ResponseWriter, r *http.Request) {
	ic := r.Context().Value(interceptKey{}).(*interceptConn)
	pol := p.Policy()
	if err := pol.Check(ic.host, ic.port); err != nil {
		p.refuse(w, ic.user, err.(*Refusal))
		return
	}
	if h, port, err := targetOf(r.Host, 443); err != nil || h != ic.host || port != ic.port {
		plain(w, http.StatusBadRequest, fmt.Sprintf("the Host header %q is not the CONNECT target %s", clip(r.Host), ic.host))
		return
	}
	if r.URL.IsAbs() || r.Method == http.MethodConnect {
		plain(w, http.StatusBadRequest, "inside the tunnel, send requests in origin form (GET /path)")
		return
	}
	p.forward(w, r, &reqInfo{pol: pol, user: ic.user, host: ic.host, port: ic.port, scheme: "https"})
}
