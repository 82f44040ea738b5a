package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestPreviewOnDemandTLS runs the production shape over loopback: an HTTPS site with
// `tls internal { on_demand }` and `on_demand_tls { permission mcp_sandbox }`. A live
// preview host gets a certificate (issued during the handshake) and serves the app; an
// unknown label and an unexposed one get no certificate.
func TestPreviewOnDemandTLS(t *testing.T) {
	s := testsite.New(t)
	httpsPort := testsite.FreePort(t)
	t.Cleanup(func() {
		_ = caddy.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Docker.ContainerRemove(ctx, s.Container, container.RemoveOptions{Force: true})
		_ = s.Docker.VolumeRemove(ctx, s.Volume, true)
	})
	block := fmt.Sprintf(`mcp_sandbox {
		api_key %s
		image %s
		container %s
		volume %s
		network none
		memory 1g
		cpus 1
		previews localhost
	}`, s.Key, testengine.Image(), s.Container, s.Volume)
	cf := fmt.Sprintf(`{
	admin off
	persist_config off
	storage file_system %[1]s
	skip_install_trust
	http_port %[2]d
	https_port %[3]d
	auto_https disable_redirects
	on_demand_tls {
		permission mcp_sandbox
	}
	log {
		output file %[1]s/caddy.log
	}
}

http://127.0.0.1:%[2]d {
	bind 127.0.0.1
	%[4]s
}

https://:%[3]d {
	bind 127.0.0.1
	tls internal {
		on_demand
	}
	%[4]s
}
`, s.Storage, s.Port, httpsPort, block)
	cfg, warn, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
	if err != nil {
		t.Fatalf("adapting: %v %v", err, warn)
	}
	if !strings.Contains(string(cfg), `"permission":{"module":"mcp_sandbox"}`) {
		t.Fatalf("the permission module is not in the adapted config: %s", cfg)
	}
	testsite.LoadConfig(t, cfg, s.Port)

	ctx := context.Background()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"})
	p := &previewSite{Site: s, c: c}
	p.copyIn(t)
	p.startServer(t, 8000)
	live := p.expose(t, 8000)["url"].(string)
	host := strings.Split(strings.TrimPrefix(live, "http://"), ":")[0]
	closed := p.expose(t, 8001)["url"].(string)
	closedHost := strings.Split(strings.TrimPrefix(closed, "http://"), ":")[0]
	testsite.Call(ctx, t, c, "unexpose_port", map[string]any{"port": 8001})

	// Caddy's internal CA, written to storage when the tls app starts.
	var roots *x509.CertPool
	deadline := time.Now().Add(10 * time.Second)
	for roots == nil {
		pem, err := os.ReadFile(filepath.Join(s.Storage, "pki", "authorities", "local", "root.crt"))
		if err == nil {
			roots = x509.NewCertPool()
			roots.AppendCertsFromPEM(pem)
		} else if time.Now().After(deadline) {
			t.Fatalf("internal CA root: %v", err)
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", httpsPort)
	handshake := func(name string) (*tls.Conn, error) {
		d := &net.Dialer{Timeout: 10 * time.Second}
		return tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: name, RootCAs: roots})
	}

	conn, err := handshake(host)
	if err != nil {
		t.Fatalf("TLS handshake for the live preview %s: %v", host, err)
	}
	if got := conn.ConnectionState().PeerCertificates[0].DNSNames; len(got) != 1 || got[0] != host {
		t.Fatalf("certificate names %v, want [%s]", got, host)
	}
	conn.Close()

	for _, name := range []string{newLabelForTest() + ".localhost", closedHost, "localhost", "example.com"} {
		conn, err := handshake(name)
		if err == nil {
			conn.Close()
			t.Errorf("got a certificate for %s, which is not a live preview", name)
			continue
		}
		// Caddy answers a refused name with an alert during the handshake.
		if !strings.Contains(err.Error(), "tls: internal error") {
			t.Errorf("handshake for %s: %v, want Caddy's refusal (internal error alert)", name, err)
		}
	}

	// The app answers over HTTPS at its own origin.
	hc := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}, Timeout: 30 * time.Second}
	u := fmt.Sprintf("https://%s:%d/hello", host, httpsPort)
	deadline = time.Now().Add(20 * time.Second)
	for {
		resp, err := hc.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && strings.Contains(string(body), "hello from the sandbox") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q", u, resp.StatusCode, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newLabelForTest makes a label of the right shape that was never exposed.
func newLabelForTest() string {
	return strings.Repeat("q", 26)
}
