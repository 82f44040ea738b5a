package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/origin"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// keepsAnyProcesses reports whether keep_processes is on for the site or a person.
func (s *Settings) keepsAnyProcesses() bool {
	if s.KeepProcesses {
		return true
	}
	for _, p := range s.People {
		if p.KeepProcesses != nil && *p.KeepProcesses {
			return true
		}
	}
	return false
}

// Validate reports every setting that cannot work, by its Caddyfile name. It changes
// nothing and does no I/O.
func (s *Settings) Validate() error {
	var errs []error
	switch {
	case s.APIKey == "":
		errs = append(errs, errors.New("api_key is empty: set it, e.g. `api_key {env.SANDBOX_API_KEY}` with that variable exported; an empty key would leave the sandbox open"))
	case len(s.APIKey) < 16:
		errs = append(errs, errors.New("api_key is shorter than 16 characters: use a long random key, e.g. `openssl rand -hex 32`"))
	}
	if s.PublicURL != "" {
		if _, err := origin.Parse(s.PublicURL); err != nil {
			errs = append(errs, fmt.Errorf("public_url: %w", err))
		}
	}
	if s.LinkTTL < 0 {
		errs = append(errs, errors.New("link_ttl must be positive"))
	}
	if s.MaxLinkTTL != 0 && s.MaxLinkTTL < s.LinkTTL {
		errs = append(errs, fmt.Errorf("max_link_ttl (%s) must be at least link_ttl (%s)", time.Duration(s.MaxLinkTTL), time.Duration(s.LinkTTL)))
	}
	if s.Keepalive != 0 && s.Keepalive < caddy.Duration(time.Second) {
		errs = append(errs, errors.New("keepalive must be at least 1s"))
	}
	for _, o := range s.AllowedOrigins {
		if _, err := origin.Parse(o); err != nil {
			errs = append(errs, fmt.Errorf("allowed_origins: %w", err))
		}
	}
	if s.YieldAfter != nil && *s.YieldAfter < 0 {
		errs = append(errs, errors.New("yield_after must be a positive duration or off"))
	}
	if s.MaxCheckpoints < 0 {
		errs = append(errs, errors.New("max_checkpoints must be at least 1"))
	}
	if s.MaxCheckpointBytes < 0 {
		errs = append(errs, errors.New("max_checkpoint_bytes must be a positive size, e.g. 10GiB"))
	}
	for _, o := range s.CheckpointVolumeOptions {
		if k, _, ok := strings.Cut(o, "="); !ok || k == "" || strings.ContainsAny(o, "\n") {
			errs = append(errs, fmt.Errorf("checkpoint_volume_options: %q is not key=value", o))
		}
	}
	if s.MaxJobs < 0 {
		errs = append(errs, errors.New("max_jobs must be positive"))
	}
	if s.MaxTaskTTL != 0 && s.MaxTaskTTL < caddy.Duration(time.Second) {
		errs = append(errs, errors.New("max_task_ttl must be at least 1s"))
	}
	if s.MaxTasks < 0 || s.MaxTasksTotal < 0 {
		errs = append(errs, errors.New("max_tasks must be positive"))
	} else if s.MaxTasksTotal != 0 && s.MaxTasksTotal < s.MaxTasks {
		errs = append(errs, fmt.Errorf("max_tasks: the number in all (%d) must be at least the number per session (%d)", s.MaxTasksTotal, s.MaxTasks))
	}
	if s.IdleStop < 0 || s.IdleStop > 0 && s.IdleStop < caddy.Duration(time.Second) {
		errs = append(errs, errors.New("idle_stop must be at least 1s (or 0: never)"))
	}
	if err := fleet.ValidateEngines(s.Engines); err != nil {
		errs = append(errs, err)
	}
	if _, kube := fleet.Kubernetes(s.Engines); kube && s.keepsAnyProcesses() {
		errs = append(errs, errors.New("keep_processes: a Kubernetes engine cannot save a pod's memory; turn keep_processes off (a stop then ends the processes, files are kept)"))
	}
	cfg, err := s.SandboxConfig()
	if err != nil {
		errs = append(errs, err)
	}
	if eng, ok := fleet.Kubernetes(s.Engines); ok {
		errs = append(errs, s.validateKube(eng, cfg)...)
	}
	errs = append(errs, s.validatePeople()...)
	if s.Egress != nil {
		if s.Network != "" && s.Network != "none" {
			errs = append(errs, fmt.Errorf("network %s and egress exclude each other: with egress the sandbox has no network of its own and reaches only the allowed hosts, through Caddy", s.Network))
		}
		if _, err := egress.Compile(s.Egress.Rules()); err != nil {
			errs = append(errs, fmt.Errorf("egress: %w", err))
		}
	}
	switch {
	case s.DefaultOutput < 0:
		errs = append(errs, errors.New("default_output must be positive"))
	case s.DefaultOutput > cfg.MaxOutput:
		errs = append(errs, fmt.Errorf("default_output (%d) must be at most max_output (%d)", s.DefaultOutput, cfg.MaxOutput))
	case s.DefaultOutput != 0 && s.DefaultOutput < boxapi.MinOutput:
		errs = append(errs, fmt.Errorf("default_output must be at least %d bytes", boxapi.MinOutput))
	}
	return errors.Join(errs...)
}

// dnsLabel is a DNS-1123 label: what Kubernetes names pods and claims with.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// dnsLabelRule is dnsLabel in words.
const dnsLabelRule = "a Kubernetes name is at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"

// validateKube reports the settings a Kubernetes engine cannot serve: names that are
// not DNS-1123 labels (the container names the pod and its config map, the volume the
// claim, each with -<person> for a person's sandbox) and settings that are Docker's
// only. They are errors, not warnings: a setting that silently does nothing would
// promise a limit or a copy that does not exist.
func (s *Settings) validateKube(eng fleet.Engine, cfg sandbox.Config) []error {
	var errs []error
	if !dnsLabel.MatchString(cfg.Container) {
		errs = append(errs, fmt.Errorf("engine %s: container %q: %s; set container to such a name, e.g. mcp-sandbox", eng.Name, cfg.Container, dnsLabelRule))
	}
	if !dnsLabel.MatchString(cfg.Volume) {
		errs = append(errs, fmt.Errorf("engine %s: volume %q: %s; set volume to such a name, e.g. mcp-sandbox-data", eng.Name, cfg.Volume, dnsLabelRule))
	}
	if dnsLabel.MatchString(cfg.Container) && dnsLabel.MatchString(cfg.Volume) {
		for _, p := range s.People {
			if !fleet.ValidName(p.Name) {
				continue // reported by validatePeople
			}
			for _, n := range []struct{ what, name string }{{"container", cfg.Container + "-" + p.Name}, {"volume", cfg.Volume + "-" + p.Name}} {
				if !dnsLabel.MatchString(n.name) {
					errs = append(errs, fmt.Errorf("engine %s: person %s: their %s would be %q: %s; give the person a name of lower-case letters, digits and '-' only, or a shorter %s", eng.Name, p.Name, n.what, n.name, dnsLabelRule, n.what))
					break
				}
			}
		}
	}
	if s.Network != "" && s.Network != "none" {
		errs = append(errs, fmt.Errorf("engine %s: network %s is a Docker network; a pod is on the cluster's pod network: remove network, or set network none (a NetworkPolicy then denies the pod all traffic)", eng.Name, s.Network))
	}
	if s.PidsLimit != 0 {
		errs = append(errs, fmt.Errorf("engine %s: pids_limit is not supported on a Kubernetes engine (a pod's process limit is the node's, the kubelet's podPidsLimit); remove it", eng.Name))
	}
	for _, p := range s.People {
		if p.PidsLimit != 0 {
			errs = append(errs, fmt.Errorf("engine %s: person %s: pids is not supported on a Kubernetes engine (a pod's process limit is the node's, the kubelet's podPidsLimit); remove it", eng.Name, p.Name))
		}
	}
	if len(s.CheckpointVolumeOptions) > 0 || s.MaxCheckpoints != 0 || s.MaxCheckpointBytes != 0 {
		errs = append(errs, fmt.Errorf("engine %s: checkpoints are not supported on a Kubernetes engine; remove max_checkpoints, max_checkpoint_bytes and checkpoint_volume_options", eng.Name))
	}
	return errs
}
