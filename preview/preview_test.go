package preview

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddytls"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func testRegistry() (*Registry, *clock) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := NewRegistry()
	r.now = c.now
	return r, c
}

func TestLabels(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		l := newLabel()
		if !validLabel(l) || len(l) != 26 || seen[l] {
			t.Fatalf("bad or repeated label %q", l)
		}
		seen[l] = true
	}
	// 26 base32 characters carry 130 bits; the encoder gets 128 random bits.
	if labelEncoding.DecodedLen(labelLen) != 16 {
		t.Fatalf("label holds %d bytes", labelEncoding.DecodedLen(labelLen))
	}
}

func TestPermission(t *testing.T) {
	reg, clk := testRegistry()
	perm := &Permission{reg: reg}
	ctx := context.Background()
	p := reg.Expose("box", "preview.example.com", 8000, time.Hour)
	other := reg.Expose("box", "preview.example.com", 9000, time.Hour)

	allowed := []string{p.Host(), strings.ToUpper(p.Host()), p.Host() + "."}
	for _, name := range allowed {
		if err := perm.CertificateAllowed(ctx, name); err != nil {
			t.Errorf("live preview %s refused: %v", name, err)
		}
	}
	refused := []string{
		newLabel() + ".preview.example.com", // unknown
		p.Label + ".example.com",            // live label, wrong domain
		p.Label + ".evil.preview.example.com",
		"preview.example.com",
		"x." + p.Host(),
		strings.Repeat("a", 300) + ".preview.example.com",
		"",
	}
	for _, name := range refused {
		err := perm.CertificateAllowed(ctx, name)
		if err == nil || !errors.Is(err, caddytls.ErrPermissionDenied) {
			t.Errorf("%q: got %v, want permission denied", name, err)
		}
	}
	// Unexposed.
	reg.Unexpose("box", 9000)
	if err := perm.CertificateAllowed(ctx, other.Host()); err == nil {
		t.Error("unexposed preview approved")
	}
	// Expired.
	clk.t = clk.t.Add(time.Hour)
	if err := perm.CertificateAllowed(ctx, p.Host()); err == nil {
		t.Error("expired preview approved")
	}
	if reg.Live() != 0 {
		t.Errorf("%d previews live after expiry", reg.Live())
	}
}

func TestExposeAgainKeepsLabel(t *testing.T) {
	reg, clk := testRegistry()
	a := reg.Expose("box", "localhost", 8000, time.Hour)
	clk.t = clk.t.Add(30 * time.Minute)
	b := reg.Expose("box", "localhost", 8000, time.Hour)
	if a.Label != b.Label || !b.Expires.After(a.Expires) {
		t.Fatalf("expose again: %+v then %+v", a, b)
	}
	if c := reg.Expose("other-box", "localhost", 8000, time.Hour); c.Label == a.Label {
		t.Fatal("another sandbox got the same label")
	}
	if !reg.Unexpose("box", 8000) || reg.Unexpose("box", 8000) {
		t.Fatal("unexpose should report once")
	}
	if d := reg.Expose("box", "localhost", 8000, time.Hour); d.Label == a.Label {
		t.Fatal("a closed preview's label came back")
	}
}

func TestSplitHost(t *testing.T) {
	l := newLabel()
	for _, tc := range []struct {
		host, label string
		under       bool
	}{
		{l + ".localhost:8080", l, true},
		{strings.ToUpper(l) + ".LocalHost:8080", l, true},
		{l + ".localhost.", l, true},
		{l + ".localhost.:443", l, true},
		{l + ".localhost", l, true},
		{"localhost:8080", "", false},
		{"localhost", "", false},
		{"example.com", "", false},
		{l + ".notlocalhost", "", false},
		{"x." + l + ".localhost", "", true},
		{strings.Repeat("a", 64) + ".localhost", "", true},
		{strings.Repeat("a", 5000) + ".localhost", "", true},
		{l[:25] + "1.localhost", "", true}, // 1 is not in the alphabet
		{".localhost", "", false},
		{"", "", false},
		{":8080", "", false},
		{"[::1]:8080", "", false},
	} {
		label, under := splitHost(tc.host, "localhost")
		if label != tc.label || under != tc.under {
			t.Errorf("splitHost(%.60q) = %q, %v; want %q, %v", tc.host, label, under, tc.label, tc.under)
		}
	}
}

func TestDomainChecks(t *testing.T) {
	for _, bad := range []string{"", "https://p.example.com", "p.example.com:8443", "*.p.example.com", "10.0.0.1", "p..example.com", "-p.example.com", "p.example.com/x"} {
		if _, err := NormalizeDomain(bad); err == nil {
			t.Errorf("NormalizeDomain(%q) accepted", bad)
		}
	}
	if d, err := NormalizeDomain("Preview.Example.COM."); err != nil || d != "preview.example.com" {
		t.Errorf("NormalizeDomain: %q, %v", d, err)
	}
	for _, tc := range []struct {
		domain, site string
		ok           bool
	}{
		{"preview.example.com", "sandbox.example.com", true},
		{"sandbox-previews.net", "sandbox.example.com", true},
		{"p.sandbox.example.com", "sandbox.example.com", true},
		{"sandbox.example.com", "sandbox.example.com", false},
		{"sandbox.example.com", "SANDBOX.example.com.", false},
		{"example.com", "sandbox.example.com", false},
		{"localhost", "localhost:8080", true},
		{"localhost", "sandbox.localhost", false},
	} {
		err := CheckSiteHost(tc.domain, tc.site)
		if (err == nil) != tc.ok {
			t.Errorf("CheckSiteHost(%q, %q) = %v", tc.domain, tc.site, err)
		}
	}
}

// TestNotFoundWithoutDocker: unknown, expired, unexposed, foreign and malformed
// labels get 404 and never reach Dial.
func TestNotFoundWithoutDocker(t *testing.T) {
	reg, clk := testRegistry()
	srv, err := New(Options{
		Domain: "localhost", Owner: "box", TTL: time.Minute, Registry: reg,
		Dial: func(context.Context, string, int) (net.Conn, error) {
			t.Error("Dial called for a request that must be refused")
			return nil, errors.New("no")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	live := srv.Expose("box", 8000)
	unexposed := srv.Expose("box", 8001)
	srv.Unexpose("box", 8001)
	foreign := reg.Expose("another-box", "localhost", 8000, time.Hour)
	other := reg.Expose("box", "preview.example.com", 8000, time.Hour)
	expired := srv.Expose("box", 8002)
	clk.t = clk.t.Add(2 * time.Minute)
	srv.Expose("box", 8000) // renewed; 8002 is not
	_ = live

	for _, host := range []string{
		newLabel() + ".localhost:8080",
		unexposed.Label + ".localhost:8080",
		expired.Label + ".localhost:8080",
		foreign.Label + ".localhost:8080",
		other.Label + ".localhost:8080",
		strings.Repeat("b", 4000) + ".localhost",
		"a.b.localhost",
		"%00.localhost",
	} {
		if !srv.Match(host) {
			t.Errorf("Match(%.50q) = false", host)
			continue
		}
		r := httptest.NewRequest("GET", "http://x/", nil)
		r.Host = host
		w := httptest.NewRecorder()
		if err := srv.ServeHTTP(w, r); err != nil || w.Code != http.StatusNotFound {
			t.Errorf("%.50q: %d %v, want 404", host, w.Code, err)
		}
	}
}
