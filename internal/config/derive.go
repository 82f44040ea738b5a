package config

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// SandboxConfig applies the defaults of the sandbox package to the settings left
// empty: the operator's sandbox, or the one shared without people.
func (s *Settings) SandboxConfig() (sandbox.Config, error) {
	cfg := sandbox.DefaultConfig()
	setIf(&cfg.Image, s.Image)
	setIf(&cfg.Container, s.Container)
	setIf(&cfg.Volume, s.Volume)
	setIf(&cfg.NetworkMode, s.Network)
	cfg.Runtime = s.Runtime
	cfg.KeepProcesses = s.KeepProcesses
	cfg.NoAgent = s.Agent != nil && !*s.Agent
	// A local engine's containers reach the agent's direct channel here (sandbox's
	// agent_direct.go); remote engines ignore it, and a Kubernetes engine's pods
	// share no directory with Caddy.
	if _, kube := fleet.Kubernetes(s.Engines); !kube {
		cfg.AgentSocketDir = filepath.Join(caddy.AppDataDir(), "mcp-sandbox", "agent")
	}
	if s.Egress != nil {
		cfg.NetworkMode, cfg.ProxyPort, cfg.CABundle = "none", EgressPort, EgressBundle
	}
	if s.Memory != "" {
		m, err := sandbox.ParseMemory(s.Memory)
		if err != nil {
			return cfg, fmt.Errorf("memory: %w", err)
		}
		cfg.Memory = m
	}
	if s.CPUs != 0 {
		cfg.CPUs = s.CPUs
	}
	if s.PidsLimit != 0 {
		cfg.PidsLimit = s.PidsLimit
	}
	if s.ExecTimeout != 0 {
		cfg.ExecTimeout = time.Duration(s.ExecTimeout)
	}
	if s.MaxOutput != 0 {
		cfg.MaxOutput = s.MaxOutput
	}
	if s.FileTTL != nil {
		cfg.FileTTL = time.Duration(*s.FileTTL)
	}
	if s.CleanupInterval != 0 {
		cfg.CleanupInterval = time.Duration(s.CleanupInterval)
	}
	cfg.CheckpointVolumeOptions = strings.Join(s.CheckpointVolumeOptions, "\n")
	if s.MaxCheckpointBytes != 0 {
		cfg.MaxCheckpointBytes = s.MaxCheckpointBytes
	}
	return cfg, cfg.Validate()
}

func setIf(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// SandboxConfigFor is the configuration of person's sandbox: "" is the operator's (the
// site's settings as they are); a person's is named after them and has their limits.
func (s *Settings) SandboxConfigFor(person string) (sandbox.Config, error) {
	cfg, err := s.SandboxConfig()
	if person == "" || err != nil {
		return cfg, err
	}
	p := s.Person(person)
	if p == nil {
		return cfg, fmt.Errorf("no person %q is configured", person)
	}
	return fleet.PersonConfig(cfg, p.Limits())
}

// Person returns the person called name, or nil.
func (s *Settings) Person(name string) *Person {
	for i := range s.People {
		if s.People[i].Name == name {
			return &s.People[i]
		}
	}
	return nil
}

// PeopleKeys maps each person's name to their key, for the OAuth server; nil without
// people.
func (s *Settings) PeopleKeys() map[string]string {
	if len(s.People) == 0 {
		return nil
	}
	m := make(map[string]string, len(s.People))
	for _, p := range s.People {
		m[p.Name] = p.Key
	}
	return m
}

// EgressRules are the rules of person's sandbox ("" the operator's): the site's, with
// the person's own layered on. It needs the site's egress block.
func (s *Settings) EgressRules(person string) egress.Rules {
	r := s.Egress.Rules()
	own := s.Egress.Hosts
	if p := s.Person(person); p != nil {
		own = nil
		if p.Egress != nil {
			r = r.Merge(p.Egress.Rules())
			own = p.Egress.Hosts
		}
	}
	// Only the sandbox's own block's mappings to inside addresses may be put to the
	// person: a site-wide one that some people's blocks allow stays closed to the rest.
	r.AskMapped = slices.Sorted(maps.Keys(own))
	return r
}

// EgressAsk says whether person's sandbox ("" the operator's) puts hosts outside its
// rules to the person: the person's `ask` if they say, else the site's.
func (s *Settings) EgressAsk(person string) bool {
	if s.Egress == nil {
		return false
	}
	if p := s.Person(person); p != nil && p.Egress != nil && p.Egress.Ask != nil {
		return *p.Egress.Ask
	}
	return s.Egress.Ask != nil && *s.Egress.Ask
}

// EgressTrust is the trust_ca files of person's sandbox: the site's and the person's.
func (s *Settings) EgressTrust(person string) []string {
	trust := s.Egress.TrustCA
	if p := s.Person(person); p != nil && p.Egress != nil {
		trust = append(slices.Clone(trust), p.Egress.TrustCA...)
	}
	return trust
}
