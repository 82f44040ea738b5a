package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/origin"
)

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
	cfg, err := s.SandboxConfig()
	if err != nil {
		errs = append(errs, err)
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
