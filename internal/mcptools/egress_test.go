package mcptools

import (
	"strings"
	"testing"
)

// With an egress policy the description names the reachable hosts, or says there is
// no network; a proxy that cannot run makes the sandbox offline.
func TestDescriptionFollowsEgress(t *testing.T) {
	for _, c := range []struct {
		egress *Egress
		want   string
		not    string
	}{
		{&Egress{Hosts: "pypi.org, *.github.com"}, "It reaches only these hosts, through the proxy its environment names (HTTP_PROXY): pypi.org, *.github.com. Others get 403", "offline"},
		{&Egress{}, "It has no network", "Others get 403"},
		{&Egress{Hosts: "pypi.org", Offline: true}, "It is offline", "pypi.org"},
		{nil, "It is offline", "reaches only"},
	} {
		h := newToolsHarness(t)
		h.box.egress = c.egress
		desc := h.description("execute")
		if !strings.Contains(desc, c.want) || strings.Contains(desc, c.not) {
			t.Errorf("%+v: %q", c.egress, desc)
		}
	}
}

// A result whose command was refused a host says so in its note, once.
func TestResultNamesBlockedHosts(t *testing.T) {
	h := newToolsHarness(t)
	h.box.egress = &Egress{Hosts: "pypi.org"}
	h.box.blocked = map[string][]string{"j000000000002": {"gist.github.com (not allowed by the operator)"}}
	_, text, structured := h.call("execute", map[string]any{"command": "curl https://gist.github.com"})
	want := "[blocked: gist.github.com (not allowed by the operator); only the hosts in execute's description are reachable]"
	if !strings.Contains(text, want) || !strings.Contains(structured.(map[string]any)["note"].(string), want) {
		t.Fatalf("text %q, structured %v", text, structured)
	}
	if _, text, _ = h.call("execute", map[string]any{"command": "true"}); strings.Contains(text, "blocked") {
		t.Fatalf("the refusal was reported twice: %q", text)
	}
}

// TestOfflineWithAsk: a sandbox whose operator allows no host outright but lets the
// person be asked is not offline, and a failed download there gets no offline note.
func TestOfflineWithAsk(t *testing.T) {
	for _, c := range []struct {
		mode string
		e    *Egress
		want bool
	}{
		{"none", nil, true},
		{"bridge", nil, false},
		{"none", &Egress{}, true},
		{"none", &Egress{Ask: true}, false},
		{"none", &Egress{Hosts: "pypi.org"}, false},
		{"none", &Egress{Offline: true, Ask: true}, true},
	} {
		if got := offline(c.mode, c.e); got != c.want {
			t.Errorf("offline(%q, %+v) = %v, want %v", c.mode, c.e, got, c.want)
		}
	}
}
