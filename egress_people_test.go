package mcpsandbox

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/config"
)

// TestPersonEgressCaddyfile: a person's block holds an egress block of its own, read
// like the site's.
func TestPersonEgressCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`mcp_sandbox {
		egress {
			allow a.example
		}
		person alice 0123456789abcdef-alice {
			memory 1g
			egress {
				allow b.example
				deny c.example
				credential https://b.example header Authorization "Bearer {env.ALICE_TOKEN}"
				host b.example 10.0.0.5
				trust_ca /etc/alice-ca.pem
			}
		}
		person bob 0123456789abcdef-bob
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	a, b := h.Person("alice"), h.Person("bob")
	if a == nil || a.Egress == nil || b == nil || b.Egress != nil {
		t.Fatalf("people: %+v", h.People)
	}
	e := a.Egress
	if strings.Join(e.Allow, " ") != "b.example" || strings.Join(e.Deny, " ") != "c.example" || e.Hosts["b.example"] != "10.0.0.5" ||
		len(e.Credentials) != 1 || e.Credentials[0].Value != "Bearer {env.ALICE_TOKEN}" || len(e.TrustCA) != 1 {
		t.Fatalf("alice's egress: %+v", e)
	}
	if strings.Join(h.Egress.Allow, " ") != "a.example" {
		t.Fatalf("the site's egress: %+v", h.Egress)
	}
	bad := caddyfile.NewTestDispenser("mcp_sandbox {\n person alice 0123456789abcdef-alice {\n egress {\n allowed x.example\n }\n }\n}")
	if err := new(Handler).UnmarshalCaddyfile(bad); err == nil || !strings.Contains(err.Error(), "unrecognized egress subdirective allowed") {
		t.Fatalf("a bad person egress: %v", err)
	}
}

// TestPersonEgressCredentials: a person's credential is added to the requests of that
// person's proxy only; another person's proxy, with the site's rules alone, adds none,
// and a host only the person allows is refused to the other.
func TestPersonEgressCredentials(t *testing.T) {
	t.Setenv("MCP_SANDBOX_TEST_ALICE_TOKEN", "alice-secret-token")
	seen := make(chan http.Header, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Write([]byte("ok"))
	}))
	t.Cleanup(up.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
	h := &Handler{Settings: config.Settings{
		APIKey: "0123456789abcdef-operator",
		Egress: &config.EgressConfig{Allow: []string{"up.example:" + port}, Hosts: map[string]string{"up.example": "127.0.0.1", "extra.example": "127.0.0.1"}},
		People: []config.Person{
			{Name: "alice", Key: "0123456789abcdef-alice", Egress: &config.EgressConfig{
				Allow:       []string{"extra.example:" + port},
				Credentials: []config.EgressCredential{{Prefix: "http://up.example:" + port + "/", Header: "X-Token", Value: "{env.MCP_SANDBOX_TEST_ALICE_TOKEN}"}},
			}},
			{Name: "bob", Key: "0123456789abcdef-bob"},
		},
	}}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	get := func(person, host string) (int, http.Header) {
		t.Helper()
		pol, err := egress.Compile(h.EgressRules(person))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := proxyClient(t, pol).Get("http://" + host + ":" + port + "/simple/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, nil
		}
		return resp.StatusCode, <-seen
	}
	if code, hdr := get("alice", "up.example"); code != 200 || hdr.Get("X-Token") != "alice-secret-token" {
		t.Fatalf("alice: %d, header %q", code, hdr.Get("X-Token"))
	}
	if code, hdr := get("bob", "up.example"); code != 200 || hdr.Get("X-Token") != "" {
		t.Fatalf("bob: %d, header %q", code, hdr.Get("X-Token"))
	}
	if code, _ := get("", "up.example"); code != 200 {
		t.Fatalf("operator: %d", code)
	}
	if code, _ := get("alice", "extra.example"); code != 200 {
		t.Fatalf("alice to her own host: %d", code)
	}
	if code, _ := get("bob", "extra.example"); code != http.StatusForbidden {
		t.Fatalf("bob to alice's host: %d, want 403", code)
	}
	if len(seen) != 0 {
		t.Fatal("the upstream saw a refused request")
	}
}

// proxyClient is an HTTP client whose every connection is served by an egress proxy
// with pol, as a program in a sandbox reaches its proxy.
func proxyClient(t *testing.T, pol *egress.Policy) *http.Client {
	px := &egress.Proxy{
		Policy: func() *egress.Policy { return pol },
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return nil, errors.New("tests resolve no names")
		},
	}
	t.Cleanup(func() { px.Close() })
	dial := func(context.Context, string, string) (net.Conn, error) {
		a, b := net.Pipe()
		px.ServeConn(a)
		return b, nil
	}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "127.0.0.1:3128"}), DialContext: dial}, Timeout: 10 * time.Second}
}
