package fleet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
)

// testCA is a certificate authority for TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a certificate for a server on 127.0.0.1 (server) or a client, and returns
// it and its key in PEM.
func (ca *testCA) issue(t *testing.T, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.Subject.CommonName = "127.0.0.1"
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEngineTLS: an engine with tls_ca, tls_cert and tls_key is reached over TLS that
// checks both sides, as Docker's --tlsverify does: a stand-in for the engine's API on
// loopback answers the client with the right files, and refuses one without a client
// certificate; a client with another CA refuses the engine.
func TestEngineTLS(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	dir := t.TempDir()
	srvCert, srvKey := ca.issue(t, true)
	cliCert, cliKey := ca.issue(t, false)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_ping") {
			w.Header().Set("Api-Version", "1.41")
			_, _ = w.Write([]byte("OK"))
			return
		}
		http.NotFound(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()
	host := "tcp://" + srv.Listener.Addr().String()

	ping := func(e Engine) error {
		if err := ValidateEngines([]Engine{e}); err != nil {
			t.Fatalf("engine %+v: %v", e, err)
		}
		cli, err := e.NewClient(zap.NewNop())
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return cli.Reachable(ctx)
	}
	e := Engine{Name: "big", Host: host,
		TLSCA: writeFile(t, dir, "ca.pem", ca.pem), TLSCert: writeFile(t, dir, "cert.pem", cliCert), TLSKey: writeFile(t, dir, "key.pem", cliKey)}
	if err := ping(e); err != nil {
		t.Fatalf("with the engine's CA and a client certificate: %v", err)
	}
	noCert := Engine{Name: "big", Host: host, TLSCA: e.TLSCA}
	if err := ping(noCert); err == nil {
		t.Error("without a client certificate the engine answered")
	}
	wrongCA := e
	wrongCA.TLSCA = writeFile(t, dir, "other.pem", other.pem)
	if err := ping(wrongCA); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("with another CA: %v, want a certificate error", err)
	}
}

// TestPlaceWithoutEngines: placing a sandbox when no engine answers, or when storage
// names an engine the configuration dropped, fails with an error that says so; a
// recorded placement is used without asking any engine.
func TestPlaceWithoutEngines(t *testing.T) {
	st := &certmagic.FileStorage{Path: t.TempDir()}
	f := &Fleet{o: Options{
		Engines: []Engine{{Name: "a", Host: "unix:///nonexistent/a.sock"}, {Name: "b", Host: "unix:///nonexistent/b.sock"}},
		Storage: st,
	}, logger: zap.NewNop()}
	ctx := context.Background()
	if _, err := f.place(ctx, "box-p1"); err == nil || !strings.Contains(err.Error(), "none of the configured Docker engines answers") {
		t.Errorf("no engine answers: %v", err)
	}
	if _, err := st.Load(ctx, PlacementPrefix+"box-p1"); err == nil {
		t.Error("a failed placement was recorded")
	}
	if err := st.Store(ctx, PlacementPrefix+"box-p2", []byte(`{"engine":"b"}`)); err != nil {
		t.Fatal(err)
	}
	if e, err := f.place(ctx, "box-p2"); err != nil || e.Name != "b" {
		t.Errorf("recorded on b: %+v %v", e, err)
	}
	if err := st.Store(ctx, PlacementPrefix+"box-p3", []byte(`{"engine":"gone"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.place(ctx, "box-p3"); err == nil || !strings.Contains(err.Error(), `on the Docker engine "gone", which the configuration no longer names`) {
		t.Errorf("recorded on a removed engine: %v", err)
	}
}
