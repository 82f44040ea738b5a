package mcpsandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/links"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/oauth"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// This file wires the operator's console (package console) to the sandbox, the OAuth
// server and the links, and records tool calls and downloads in its audit log.

// consolePrefix is where the console keeps its state in Caddy's storage: the audit log
// under <prefix>/audit (kept across API key changes), links under <prefix>/<key
// fingerprint>/links (they die with the key anyway).
const consolePrefix = "mcp_sandbox/console"

// consoleStates holds the audit logs and link registries across config reloads, one
// per storage (and key, for links), so a reload neither loses buffered entries nor
// runs two flush loops over the same chunks. Destruct flushes.
var consoleStates = caddy.NewUsagePool()

type auditState struct{ log *console.AuditLog }

func (s auditState) Destruct() error { return s.log.Close() }

type linkState struct{ reg *console.LinkRegistry }

func (s linkState) Destruct() error { s.reg.Close(); return nil }

// storageID names a storage configuration, so that equal configs share state.
func storageID(st certmagic.Storage) string { return fmt.Sprintf("%T %+v", st, st) }

// provisionConsole sets up the audit log, the link registry and the console, in the
// storage the OAuth state uses (the handler's own `storage`, else Caddy's). It reads
// storage, not Docker.
func (h *Handler) provisionConsole() error {
	st := h.storage
	logger := h.logger.Named("console")
	auditKey := "audit\x00" + storageID(st)
	v, _, err := consoleStates.LoadOrNew(auditKey, func() (caddy.Destructor, error) {
		l := console.NewAuditLog(st, consolePrefix, console.DefaultAuditEntries, logger)
		lctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := l.Load(lctx); err != nil {
			logger.Warn("reading the audit log", zap.Error(err))
		}
		l.Start()
		return auditState{l}, nil
	})
	if err != nil {
		return fmt.Errorf("setting up the audit log: %w", err)
	}
	h.consoleKeys = append(h.consoleKeys, auditKey)
	h.audit = v.(auditState).log

	linksKey := "links\x00" + storageID(st) + "\x00" + oauth.KeyFingerprint(h.APIKey)
	v, _, err = consoleStates.LoadOrNew(linksKey, func() (caddy.Destructor, error) {
		g := console.NewLinkRegistry(st, consolePrefix+"/"+oauth.KeyFingerprint(h.APIKey), logger)
		lctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := g.Load(lctx); err != nil {
			logger.Warn("reading the link registry", zap.Error(err))
		}
		g.Start()
		return linkState{g}, nil
	})
	if err != nil {
		return fmt.Errorf("setting up the link registry: %w", err)
	}
	h.consoleKeys = append(h.consoleKeys, linksKey)
	h.linkReg = v.(linkState).reg

	var sandboxes console.Sandboxes
	if len(h.People) > 0 {
		sandboxes = consoleSandboxes{h}
	}
	var egressLog console.EgressLog
	if h.Egress != nil {
		egressLog = consoleEgress{h}
	}
	h.console, err = console.New(console.Options{
		SessionKey: oauth.DeriveKey(h.APIKey, "console sessions v1"),
		Keys:       h.auth,
		Sandbox:    consoleSandbox{h.box, h.entry.egress},
		Access:     consoleAccess{h.auth},
		Links:      consoleLinks{h.linkReg},
		Jobs:       consoleJobs{h.box},
		Sandboxes:  sandboxes,
		Egress:     egressLog,
		Audit:      h.audit,
		Origin:     h.auth.Origin,
		ClientIP:   clientIP,
		Logger:     logger,
	})
	return err
}

// releaseConsole lets go of the pooled console state; the last config to do so
// flushes the audit log.
func (h *Handler) releaseConsole() error {
	var errs []error
	for _, k := range h.consoleKeys {
		_, err := consoleStates.Delete(k)
		errs = append(errs, err)
	}
	h.consoleKeys = nil
	return errors.Join(errs...)
}

// consoleSandbox shows the sandbox container to the console.
type consoleSandbox struct {
	sb     *sandbox.Sandbox
	egress *egressState // nil without an egress block
}

func (c consoleSandbox) Status(ctx context.Context) (console.SandboxStatus, error) {
	s, err := c.sb.Status(ctx)
	return console.SandboxStatus{
		Container: s.Container, ID: s.ID, Exists: s.Exists, State: s.State, Image: s.Image, Volume: s.Volume,
		CreatedAt: s.CreatedAt, StartedAt: s.StartedAt, RestartCount: s.RestartCount,
		CPU: s.CPU, CPULimit: s.CPULimit, Memory: s.Memory, MemoryLimit: s.MemoryLimit,
		PIDs: s.PIDs, PIDsLimit: s.PIDsLimit, DiskUsed: s.DiskUsed,
		Agent: c.agent(), Egress: c.egressStatus(),
	}, err
}

func (c consoleSandbox) egressStatus() *console.Egress {
	if c.egress == nil {
		return nil
	}
	info := c.egress.info()
	e := &console.Egress{Allowed: info.Hosts, Offline: info.Offline, Refused: []console.HostCount{}}
	for _, r := range c.egress.refusedCounts() {
		e.Refused = append(e.Refused, console.HostCount(r))
	}
	return e
}

// agent tells whether commands go through the agent, and if not, why.
func (c consoleSandbox) agent() console.Agent {
	running, why := c.sb.AgentStatus()
	a := console.Agent{Running: running, Disabled: c.sb.Config().NoAgent, Reason: why}
	if running {
		a.Direct, a.DirectReason = c.sb.AgentDirect()
	}
	return a
}

func (c consoleSandbox) Restart(ctx context.Context) error  { return c.sb.Restart(ctx) }
func (c consoleSandbox) Recreate(ctx context.Context) error { return c.sb.Recreate(ctx) }

// consoleJobs shows the sandbox's running jobs to the console and kills them. Looking
// never starts the container: with none running there are no jobs.
type consoleJobs struct{ sb *sandbox.Sandbox }

func (c consoleJobs) Jobs(ctx context.Context) ([]console.Job, error) {
	js, err := c.sb.RunningJobs(ctx)
	out := make([]console.Job, 0, len(js))
	for _, j := range js {
		out = append(out, console.Job{ID: j.ID, Command: j.Command, StartedAt: j.Started, State: j.State})
	}
	return out, err
}

func (c consoleJobs) KillJob(ctx context.Context, id string) error {
	err := c.sb.StopJob(ctx, id)
	if errors.Is(err, sandbox.ErrJobNotFound) {
		return console.ErrNotFound
	}
	return err
}

// consoleAccess shows the OAuth clients and sign-ins to the console.
type consoleAccess struct{ auth *oauth.Server }

func (c consoleAccess) Clients(ctx context.Context) ([]console.Client, error) {
	cs, err := c.auth.Clients(ctx)
	out := make([]console.Client, 0, len(cs))
	for _, x := range cs {
		out = append(out, console.Client{ID: x.ID, Name: x.Name, RedirectURIs: x.RedirectURIs, CreatedAt: x.CreatedAt, LastSignInAt: x.LastSignInAt})
	}
	return out, err
}

func (c consoleAccess) Grants(ctx context.Context) ([]console.Grant, error) {
	gs, err := c.auth.Grants(ctx)
	out := make([]console.Grant, 0, len(gs))
	for _, g := range gs {
		out = append(out, console.Grant{ID: g.ID, ClientID: g.ClientID, ClientName: g.ClientName,
			CreatedAt: g.CreatedAt, RefreshedAt: g.RefreshedAt, ExpiresAt: g.ExpiresAt})
	}
	return out, err
}

func (c consoleAccess) RevokeGrant(ctx context.Context, id string) error {
	err := c.auth.RevokeGrant(ctx, id)
	if errors.Is(err, oauth.ErrGrantNotFound) {
		return console.ErrNotFound
	}
	return err
}

// consoleLinks shows the links of every kind the registry holds. Uploads and previews
// plug in the way downloads do: Record each link made (console.KindUpload or
// KindPreview, the directory or port as Target) in h.linkReg, consult
// h.linkReg.Revoked(id) in their link check, and set an OnRevoke hook when revoking
// must do more than fail that check (a preview closing its port).
type consoleLinks struct{ reg *console.LinkRegistry }

func (c consoleLinks) Links(context.Context) ([]console.Link, error) { return c.reg.List(), nil }

func (c consoleLinks) RevokeLink(ctx context.Context, id string) (console.Link, error) {
	return c.reg.Revoke(ctx, id)
}

// recordLink remembers a link a tool made, so the console lists it and can revoke it.
// A failure to remember it is logged, never the tool's failure.
func (h *Handler) recordLink(ctx context.Context, kind string, l links.Link, target string) {
	err := h.linkReg.Record(ctx, console.Link{
		ID: l.ID, Kind: kind, Target: target,
		Creator: mcptools.CallerFrom(ctx).Label, ExpiresAt: l.Expires,
	})
	if err != nil {
		h.logger.Warn("recording a "+kind+" link", zap.Error(err))
	}
}

// clientLabel is how the audit log and the console name who acted.
func clientLabel(id oauth.Identity) string {
	switch {
	case id.Method == oauth.MethodAPIKey:
		return "API key"
	case id.Method == oauth.MethodPersonKey:
		return id.Person + "'s key"
	case id.ClientName != "":
		return id.ClientName
	case id.ClientID != "":
		return id.ClientID
	}
	return "unknown"
}
