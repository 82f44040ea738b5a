package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func mustCompile(t testing.TB, r Rules) *Policy {
	t.Helper()
	p, err := Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyCheck(t *testing.T) {
	p := mustCompile(t, Rules{
		Allow: []string{"pypi.org", "*.github.com", "github.com", "api.example.com:8443", "Registry.NPMJS.org.", "2606:4700::1111", "[2606:4700::1001]:8080"},
		Deny:  []string{"gist.github.com", "*.evil.github.com", "github.com:80"},
	})
	cases := []struct {
		host   string
		port   int
		reason string // "" = allowed
	}{
		{"pypi.org", 443, ""},
		{"pypi.org", 80, ""},
		{"PyPI.org.", 443, ""},
		{"pypi.org", 22, ReasonPort},
		{"files.pypi.org", 443, ReasonNotAllowed},
		{"api.github.com", 443, ""},
		{"a.b.github.com", 443, ""},
		{"github.com", 443, ""},
		{"github.com", 80, ReasonDenied},
		{"gist.github.com", 443, ReasonDenied},
		{"x.evil.github.com", 443, ReasonDenied},
		{"notgithub.com", 443, ReasonNotAllowed},
		{"github.com.evil.org", 443, ReasonNotAllowed},
		{"api.example.com", 8443, ""},
		{"api.example.com", 443, ReasonPort},
		{"registry.npmjs.org", 443, ""},
		{"2606:4700::1111", 443, ""},
		{"2606:4700:0::1111", 443, ""},
		{"2606:4700::1001", 8080, ""},
		{"2606:4700::1001", 443, ReasonPort},
		{"xn--bcher-kva.example", 443, ReasonNotAllowed},
		{"bücher.example", 443, ReasonBadHost},
		{"*.github.com", 443, ReasonBadHost},
		{"pypi..org", 443, ReasonBadHost},
		{"pypi.org..", 443, ReasonBadHost},
		{"", 443, ReasonBadHost},
		{"127.1", 80, ReasonBadHost},
		{"0x7f.0.0.1", 80, ReasonBadHost},
		{"pypi.org%00", 443, ReasonBadHost},
		{"fe80::1%eth0", 443, ReasonBadHost},
	}
	for _, c := range cases {
		err := p.Check(c.host, c.port)
		var ref *Refusal
		switch {
		case c.reason == "" && err != nil:
			t.Errorf("%s:%d refused: %v", c.host, c.port, err)
		case c.reason != "" && !errors.As(err, &ref):
			t.Errorf("%s:%d allowed, want %q", c.host, c.port, c.reason)
		case c.reason != "" && ref.Reason != c.reason:
			t.Errorf("%s:%d: %q, want %q", c.host, c.port, ref.Reason, c.reason)
		}
	}
	if got := p.Summary(); !strings.Contains(got, "pypi.org, *.github.com") || !strings.Contains(got, "except gist.github.com") {
		t.Errorf("summary %q", got)
	}
}

func TestAllowEverything(t *testing.T) {
	p := mustCompile(t, Rules{Allow: []string{"*"}, Deny: []string{"*.internal.example"}})
	if err := p.Check("anything.example", 443); err != nil {
		t.Fatal(err)
	}
	if err := p.Check("anything.example", 25); err == nil {
		t.Fatal("allow * opened port 25")
	}
	if err := p.Check("a.internal.example", 443); err == nil {
		t.Fatal("deny lost to allow *")
	}
}

// Rules that are not what they look like are configuration errors, each naming its entry.
func TestCompileRefuses(t *testing.T) {
	bad := []struct {
		rules Rules
		want  string
	}{
		{Rules{Allow: []string{"foo.*.com"}}, "allow foo.*.com: a wildcard is allowed only"},
		{Rules{Allow: []string{"*foo.com"}}, "allow *foo.com: a wildcard"},
		{Rules{Allow: []string{"**.foo.com"}}, "allow **.foo.com"},
		{Rules{Allow: []string{"*.com"}}, "whole top-level domain"},
		{Rules{Allow: []string{"*.10.0.0.1"}}, "allow *.10.0.0.1"},
		{Rules{Allow: []string{"bücher.de"}}, "punycode"},
		{Rules{Allow: []string{"example.com:0"}}, "not a number from 1 to 65535"},
		{Rules{Allow: []string{"example.com:65536"}}, "not a number"},
		{Rules{Allow: []string{"example.com:08"}}, "not a number"},
		{Rules{Allow: []string{"example.com:"}}, "empty port"},
		{Rules{Allow: []string{"a.com:1:2"}}, "must be in brackets"},
		{Rules{Allow: []string{"2001:db8::1:443"}}, "not a public address"},
		{Rules{Allow: []string{"[example.com]:443"}}, "brackets hold only an IPv6"},
		{Rules{Allow: []string{"10.0.0.5"}}, "host NAME 10.0.0.5"},
		{Rules{Allow: []string{"127.0.0.1"}}, "not a public address"},
		{Rules{Allow: []string{"[::1]:8080"}}, "not a public address"},
		{Rules{Allow: []string{"169.254.169.254"}}, "not a public address"},
		{Rules{Allow: []string{"-bad.com"}}, "hyphen"},
		{Rules{Allow: []string{"under_score.com"}}, "not allowed in a host name"},
		{Rules{Allow: []string{"a.com"}, Hosts: map[string]string{"a.com": "not-an-ip"}}, "host a.com not-an-ip"},
		{Rules{Allow: []string{"a.com"}, Hosts: map[string]string{"1.2.3.4": "10.0.0.1"}}, "is an IP address"},
		{Rules{Allow: []string{"a.com"}, Credentials: []Credential{{Prefix: "https://b.com", Header: "Authorization", Value: "x"}}}, "b.com:443 is not allowed"},
		{Rules{Allow: []string{"a.com"}, Deny: []string{"a.com"}, Credentials: []Credential{{Prefix: "https://a.com", Header: "Authorization", Value: "x"}}}, "a.com:443 is not allowed"},
		{Rules{Allow: []string{"a.com"}, Credentials: []Credential{{Prefix: "ftp://a.com", Header: "X", Value: "x"}}}, "http:// or https://"},
		{Rules{Allow: []string{"a.com"}, Credentials: []Credential{{Prefix: "https://a.com", Header: "Bad Header", Value: "x"}}}, "not a valid HTTP header name"},
		{Rules{Allow: []string{"a.com"}, Credentials: []Credential{{Prefix: "https://a.com", Header: "X", Value: "a\r\nInjected: 1"}}}, "line break"},
		{Rules{Allow: []string{"a.com"}, Credentials: []Credential{{Prefix: "https://u@a.com", Header: "X", Value: "x"}}}, "user name"},
		{Rules{Allow: []string{"a.com"}, Credentials: []Credential{{Prefix: "https://a.com/x?y", Header: "X", Value: "x"}}}, "query"},
	}
	for _, c := range bad {
		_, err := Compile(c.rules)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.rules, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "Injected") {
			t.Errorf("the error repeats the secret: %v", err)
		}
	}
}

func TestPublic(t *testing.T) {
	for s, want := range map[string]bool{
		"8.8.8.8": true, "2606:4700::1111": true, "127.0.0.1": false, "10.1.2.3": false,
		"172.16.0.1": false, "192.168.1.1": false, "100.64.0.1": false, "169.254.169.254": false,
		"::1": false, "fe80::1": false, "fc00::1": false, "fd12::1": false, "0.0.0.0": false,
		"::ffff:127.0.0.1": false, "::ffff:8.8.8.8": true, "224.0.0.1": false, "255.255.255.255": false,
	} {
		if got := Public(netip.MustParseAddr(s)); got != want {
			t.Errorf("Public(%s) = %v", s, got)
		}
	}
}

func TestCredentialMatch(t *testing.T) {
	p := mustCompile(t, Rules{
		Allow: []string{"a.com", "a.com:8080"},
		Credentials: []Credential{
			{Prefix: "https://a.com", Header: "Authorization", Value: "root"},
			{Prefix: "https://a.com/org", Header: "Authorization", Value: "org"},
			{Prefix: "http://a.com:8080/x/", Header: "X-Key", Value: "plain"},
		},
	})
	for _, c := range []struct {
		scheme string
		port   int
		path   string
		want   string
	}{
		{"https", 443, "/", "root"},
		{"https", 443, "/org", "org"},
		{"https", 443, "/org/repo", "org"},
		{"https", 443, "/organ", "root"},
		{"http", 80, "/", ""},
		{"http", 8080, "/x/y", "plain"},
		{"http", 8080, "/x", ""},
	} {
		got := ""
		if cr := p.credentialFor(c.scheme, "a.com", c.port, c.path); cr != nil {
			got = cr.value
		}
		if got != c.want {
			t.Errorf("%s :%d %s: %q, want %q", c.scheme, c.port, c.path, got, c.want)
		}
	}
	if !p.Intercepts("a.com", 443) || p.Intercepts("a.com", 8080) {
		t.Error("Intercepts")
	}
}

func TestMerge(t *testing.T) {
	site := Rules{Allow: []string{"a.com"}, Hosts: map[string]string{"a.com": "10.0.0.1"}}
	person := Rules{Allow: []string{"b.com"}, Deny: []string{"a.com"}}
	p := mustCompile(t, site.Merge(person))
	if p.Check("b.com", 443) != nil || p.Check("a.com", 443) == nil {
		t.Fatal("merged rules")
	}
	if len(site.Allow) != 1 {
		t.Fatal("Merge changed its receiver")
	}
}

// A normalized host is stable and never holds what the checks refuse.
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{"a.com", "A.COM.", "*.a.com", "1.2.3.4", "::ffff:1.2.3.4", "xn--x.y", "a..b", "bücher.de", "0x7f.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := NormalizeHost(s)
		if err != nil {
			return
		}
		if h2, err := NormalizeHost(h); err != nil || h2 != h {
			t.Fatalf("%q -> %q -> %q, %v", s, h, h2, err)
		}
		if strings.ContainsAny(h, "*/@ \t\r\n%[]") || strings.HasSuffix(h, ".") || h != strings.ToLower(h) {
			t.Fatalf("%q normalized to %q", s, h)
		}
	})
}

// An IPv6 address that carries one of this machine's IPv4 addresses (NAT64, 6to4) is
// this machine's too: a gateway on the way would deliver it here.
func TestOwnAddrEmbeddedIPv4(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "64:ff9b::127.0.0.1", "2002:7f00:1::1"} {
		if !ownAddr(netip.MustParseAddr(s)) {
			t.Errorf("%s is not taken for an own address", s)
		}
	}
	for _, s := range []string{"64:ff9b::8.8.8.8", "2002:808:808::1"} {
		if ownAddr(netip.MustParseAddr(s)) {
			t.Errorf("%s is taken for an own address", s)
		}
	}
}
