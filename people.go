package mcpsandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/links"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
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
	// Egress holds the person's own egress rules and credentials, layered on the
	// site's for this person's sandbox only. It needs the site's egress block.
	Egress *EgressConfig `json:"egress,omitempty"`
}

// person returns the person called name, or nil.
func (h *Handler) person(name string) *Person {
	for i := range h.People {
		if h.People[i].Name == name {
			return &h.People[i]
		}
	}
	return nil
}

// peopleKeys maps each person's name to their key, for the OAuth server.
func (h *Handler) peopleKeys() map[string]string {
	if len(h.People) == 0 {
		return nil
	}
	m := make(map[string]string, len(h.People))
	for _, p := range h.People {
		m[p.Name] = p.Key
	}
	return m
}

// limits is what the fleet knows of the person: the name and the limits.
func (p Person) limits() fleet.Person {
	return fleet.Person{Name: p.Name, Memory: p.Memory, CPUs: p.CPUs, PidsLimit: p.PidsLimit}
}

// sandboxConfigFor is the configuration of person's sandbox: "" is the operator's (the
// site's settings as they are); a person's is named after them and has their limits.
func (h *Handler) sandboxConfigFor(person string) (sandbox.Config, error) {
	cfg, err := h.sandboxConfig()
	if person == "" || err != nil {
		return cfg, err
	}
	p := h.person(person)
	if p == nil {
		return cfg, fmt.Errorf("no person %q is configured", person)
	}
	return fleet.PersonConfig(cfg, p.limits())
}

// validatePeople reports what is wrong with the `person` lines and max_sandboxes.
func (h *Handler) validatePeople() []error {
	var errs []error
	_, baseErr := h.sandboxConfig() // reported by Validate itself
	names, keys := map[string]bool{}, map[string]string{h.APIKey: "api_key"}
	for _, p := range h.People {
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
		if _, err := h.sandboxConfigFor(p.Name); err != nil && baseErr == nil {
			errs = append(errs, err)
		}
		switch {
		case p.Egress == nil:
		case h.Egress == nil:
			errs = append(errs, fmt.Errorf("person %s: egress needs the site's egress block, which takes the sandboxes off the network: add `egress { ... }` to mcp_sandbox", p.Name))
		default:
			if _, err := egress.Compile(h.egressRules(p.Name)); err != nil {
				errs = append(errs, fmt.Errorf("person %s: egress: %w", p.Name, err))
			}
			if _, err := egress.TrustRoots(p.Egress.TrustCA); err != nil {
				errs = append(errs, fmt.Errorf("person %s: egress: %w", p.Name, err))
			}
		}
	}
	if h.MaxSandboxes < 0 {
		errs = append(errs, errors.New("max_sandboxes must be positive"))
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

// parsePerson reads `person <name> <key> [{ memory <size> cpus <n> pids <n> egress {...} }]`.
func parsePerson(d *caddyfile.Dispenser) (Person, error) {
	args := d.RemainingArgs()
	if len(args) != 2 {
		return Person{}, d.Errf("person takes a name and a key, e.g. person alice {env.ALICE_KEY}")
	}
	p := Person{Name: args[0], Key: args[1]}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch sub := d.Val(); sub {
		case "memory":
			err = oneString(d, &p.Memory)
		case "cpus":
			err = positiveFloat(d, &p.CPUs)
		case "pids":
			var n int
			if err = oneInt(d, &n); err == nil {
				p.PidsLimit = int64(n)
			}
		case "egress":
			p.Egress, err = parseEgress(d)
		default:
			return p, d.Errf("person %s: unrecognized subdirective %s (memory, cpus, pids, egress)", p.Name, sub)
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

// previewOwner names person's sandbox in the preview registry: the Docker host and the
// container, as the operator's always was.
func (h *Handler) previewOwner(person string) string {
	cfg, _ := h.sandboxConfigFor(person)
	return h.fleet.Operator().Engine().Host + "\x00" + cfg.Container
}

// previewOwners tells the preview server whose previews it serves, and the key that
// opens each (the operator's API key, or the person's own).
func (h *Handler) previewOwners(owner string) (key string, ok bool) {
	person, ok := h.personOfOwner(owner)
	switch {
	case !ok:
		return "", false
	case person == "":
		return h.APIKey, true
	}
	return h.person(person).Key, true
}

// personOfOwner is the person whose preview owner is owner. Every preview request
// asks, so the owners are listed once.
func (h *Handler) personOfOwner(owner string) (string, bool) {
	h.ownersOnce.Do(func() {
		h.owners = map[string]string{h.previewOwner(""): ""}
		for _, p := range h.People {
			h.owners[h.previewOwner(p.Name)] = p.Name
		}
	})
	person, ok := h.owners[owner]
	return person, ok
}

// linkFiles is the sandbox a link of owner reaches: the person's, who must still be
// configured, or the operator's.
func (h *Handler) linkFiles(ctx context.Context, owner string) (links.Files, error) {
	if owner != "" && h.person(owner) == nil {
		return nil, links.ErrNoOwner
	}
	e, err := h.fleet.For(ctx, owner)
	if err != nil {
		return nil, err
	}
	return e.Sandbox(), nil
}

// personLabel is how metrics name a person: "-" for the operator.
func personLabel(person string) string {
	if person == "" {
		return "-"
	}
	return person
}
