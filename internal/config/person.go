package config

import (
	"errors"
	"fmt"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
)

// People: each `person` line gives one person a key of their own and a sandbox of
// their own, container <container>-<name> on volume <volume>-<name>. The operator (the
// api_key) keeps the sandbox named exactly as without people.

// Person is one `person` line: a name, the key the person signs in with, and limits
// that differ from the site's.
type Person struct {
	// Name is short and safe in Docker names: [a-z0-9][a-z0-9_.-]{0,31}.
	Name string `json:"name"`
	// Key is the person's sign-in key, at least 16 characters, e.g. {env.ALICE_KEY}.
	Key string `json:"key"`
	// Memory, CPUs and PidsLimit are the person's container limits. Default: the
	// site's memory, cpus and pids_limit.
	Memory    string  `json:"memory,omitempty"`
	CPUs      float64 `json:"cpus,omitempty"`
	PidsLimit int64   `json:"pids_limit,omitempty"`
	// Runtime is the Docker runtime the person's container is made with, e.g. runsc
	// (gVisor). Default: the site's runtime.
	Runtime string `json:"runtime,omitempty"`
	// KeepProcesses is keep_processes for the person's sandbox. Default: the site's.
	KeepProcesses *bool `json:"keep_processes,omitempty"`
	// Egress holds the person's own egress rules and credentials, layered on the
	// site's for this person's sandbox only. It needs the site's egress block.
	Egress *EgressConfig `json:"egress,omitempty"`
}

// Limits is what the fleet knows of the person: the name and the limits.
func (p Person) Limits() fleet.Person {
	return fleet.Person{Name: p.Name, Memory: p.Memory, CPUs: p.CPUs, PidsLimit: p.PidsLimit, Runtime: p.Runtime, KeepProcesses: p.KeepProcesses}
}

// validatePeople reports what is wrong with the `person` lines and max_sandboxes.
func (s *Settings) validatePeople() []error {
	var errs []error
	_, baseErr := s.SandboxConfig() // reported by Validate itself
	names, keys := map[string]bool{}, map[string]string{s.APIKey: "api_key"}
	for _, p := range s.People {
		switch {
		case !fleet.ValidName(p.Name):
			errs = append(errs, fmt.Errorf("person %q: a name is 1 to 32 lower-case letters, digits, '_', '.' or '-', starting with a letter or digit", p.Name))
			continue
		case names[p.Name]:
			errs = append(errs, fmt.Errorf("person %s is configured twice", p.Name))
		}
		names[p.Name] = true
		switch other, dup := keys[p.Key]; {
		case p.Key == "":
			errs = append(errs, fmt.Errorf("person %s: the key is empty: set it, e.g. `person %s {env.%s_KEY}` with that variable exported", p.Name, p.Name, envName(p.Name)))
		case len(p.Key) < 16:
			errs = append(errs, fmt.Errorf("person %s: the key is shorter than 16 characters: use a long random key, e.g. `openssl rand -hex 32`", p.Name))
		case dup && other == "api_key":
			errs = append(errs, fmt.Errorf("person %s: the key is the api_key; each person needs a key of their own", p.Name))
		case dup:
			errs = append(errs, fmt.Errorf("person %s: the key is also person %s's; each person needs a key of their own", p.Name, other))
		default:
			keys[p.Key] = p.Name
		}
		if _, err := s.SandboxConfigFor(p.Name); err != nil && baseErr == nil {
			errs = append(errs, err)
		}
		switch {
		case p.Egress == nil:
		case s.Egress == nil:
			errs = append(errs, fmt.Errorf("person %s: egress needs the site's egress block, which takes the sandboxes off the network: add `egress { ... }` to mcp_sandbox", p.Name))
		default:
			if _, err := egress.Compile(s.EgressRules(p.Name)); err != nil {
				errs = append(errs, fmt.Errorf("person %s: egress: %w", p.Name, err))
			}
			if _, err := egress.TrustRoots(p.Egress.TrustCA); err != nil {
				errs = append(errs, fmt.Errorf("person %s: egress: %w", p.Name, err))
			}
		}
	}
	if s.MaxSandboxes < 0 {
		errs = append(errs, errors.New("max_sandboxes must be positive"))
	}
	switch {
	case s.WarmSandboxes < 0:
		errs = append(errs, errors.New("warm_sandboxes must be 0 or more"))
	case s.WarmSandboxes > 0 && len(s.People) == 0:
		errs = append(errs, errors.New("warm_sandboxes: warm sandboxes are for people's first calls; add person lines, or remove warm_sandboxes"))
	case s.MaxSandboxes > 0 && s.WarmSandboxes > s.MaxSandboxes:
		errs = append(errs, fmt.Errorf("warm_sandboxes %d is more than max_sandboxes %d, which counts them; lower warm_sandboxes or raise max_sandboxes", s.WarmSandboxes, s.MaxSandboxes))
	}
	return errs
}

// envName is a person's name as an environment variable's, for messages.
func envName(name string) string {
	b := []byte(name)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c == '.' || c == '-':
			b[i] = '_'
		}
	}
	return string(b)
}
