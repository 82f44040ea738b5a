package config

import (
	"strings"
	"testing"
)

// A person's `ask` wins over the site's; without an egress block nothing is asked.
func TestEgressAsk(t *testing.T) {
	on, off := true, false
	s := &Settings{Egress: &EgressConfig{Ask: &on}, People: []Person{
		{Name: "alice", Egress: &EgressConfig{Ask: &off}},
		{Name: "bob", Egress: &EgressConfig{Allow: []string{"b.example"}}},
		{Name: "carol"},
	}}
	for person, want := range map[string]bool{"": true, "alice": false, "bob": true, "carol": true} {
		if got := s.EgressAsk(person); got != want {
			t.Errorf("EgressAsk(%q) = %v, want %v", person, got, want)
		}
	}
	s.Egress.Ask = nil
	s.People[0].Egress.Ask = &on
	if s.EgressAsk("") || !s.EgressAsk("alice") || s.EgressAsk("bob") {
		t.Error("ask is off unless a block says so")
	}
	if (&Settings{}).EgressAsk("") {
		t.Error("asked without an egress block")
	}
}

// Only the sandbox's own block's host mappings may be asked about: the site's for the
// operator's sandbox, the person's for a person's, never the site's for a person.
func TestEgressAskMapped(t *testing.T) {
	s := &Settings{Egress: &EgressConfig{Hosts: map[string]string{"internal.test": "10.0.0.5"}}, People: []Person{
		{Name: "alice", Egress: &EgressConfig{Hosts: map[string]string{"alice.test": "10.0.0.6"}}},
		{Name: "bob"},
	}}
	for person, want := range map[string]string{"": "internal.test", "alice": "alice.test", "bob": ""} {
		got := strings.Join(s.EgressRules(person).AskMapped, ",")
		if got != want {
			t.Errorf("EgressRules(%q).AskMapped = %q, want %q", person, got, want)
		}
	}
}
