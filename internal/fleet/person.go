package fleet

import (
	"fmt"
	"strings"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Person is what the fleet knows of a `person` line: the name and the limits that
// differ from the site's (zero: the site's).
type Person struct {
	Name      string
	Memory    string // e.g. 2g
	CPUs      float64
	PidsLimit int64
	Runtime   string // the engine's container runtime, e.g. runsc
	// KeepProcesses is keep_processes for this person; nil: the site's.
	KeepProcesses *bool
}

// PersonConfig is the configuration of p's sandbox, from base, the operator's: named
// <container>-<name> on volume <volume>-<name>, with p's limits where p gives them.
func PersonConfig(base sandbox.Config, p Person) (sandbox.Config, error) {
	cfg := base
	cfg.Container += "-" + p.Name
	cfg.Volume += "-" + p.Name
	cfg.Person = p.Name
	if p.Memory != "" {
		m, err := sandbox.ParseMemory(p.Memory)
		if err != nil {
			return cfg, fmt.Errorf("person %s: memory: %w", p.Name, err)
		}
		cfg.Memory = m
	}
	if p.CPUs != 0 {
		cfg.CPUs = p.CPUs
	}
	if p.PidsLimit != 0 {
		cfg.PidsLimit = p.PidsLimit
	}
	if p.Runtime != "" {
		cfg.Runtime = p.Runtime
	}
	if p.KeepProcesses != nil {
		cfg.KeepProcesses = *p.KeepProcesses
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("person %s: %w", p.Name, err)
	}
	return cfg, nil
}

// personOfContainer tells whether c is a person's sandbox of the site whose operator
// sandbox is base, and whose: named <container>-<person> and labelled with that
// person. A container made before the label is taken for the person's only while that
// person is configured (configured says so) and it is on the volume <volume>-<person>:
// unlabelled, it could as well be another server's sandbox named that way, which is
// never stopped or listed as removed. A warm sandbox a person took keeps its mark and
// its volume and has no person label: its name says whose it is.
func personOfContainer(base sandbox.Config, c sandbox.Container, configured func(string) bool) (string, bool) {
	name, ok := strings.CutPrefix(c.Name, base.Container+"-")
	if !ok || !ValidName(name) {
		return "", false
	}
	if c.Person != "" {
		return name, c.Person == name
	}
	if c.Warm { // a warm sandbox taken by the person its name names, on its own volume
		return name, isWarmName(base.Volume, c.Volume)
	}
	return name, configured(name) && c.Volume == base.Volume+"-"+name
}
