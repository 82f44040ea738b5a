package mcpsandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/links"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/secret"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/oauth"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/preview"
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
	h.linkReg.OnRevoke(console.KindPreview, h.unexposeRevoked)

	var sandboxes console.Sandboxes
	if len(h.People) > 0 {
		sandboxes = consoleSandboxes{h}
	}
	var egressLog console.EgressLog
	if h.Egress != nil {
		egressLog = consoleEgress{h}
	}
	// A Kubernetes engine keeps no checkpoints: the console shows none to manage; and
	// its stop and restart delete the pod, so only /sandbox survives them.
	_, ephemeral := fleet.Kubernetes(h.Engines)
	var checkpoints console.Checkpoints
	if h.fleet.HasCheckpoints() {
		checkpoints = consoleCheckpoints{h.fleet}
	}
	h.console, err = console.New(console.Options{
		SessionKey:  secret.DeriveKey(h.APIKey, "console sessions v1"),
		Keys:        h.auth,
		Sandbox:     consoleSandbox{h.fleet.Operator().Sandbox(), egressOf(h.fleet.Operator())},
		Access:      consoleAccess{h.auth},
		Links:       consoleLinks{h.linkReg},
		Jobs:        consoleJobs{h.fleet},
		Sandboxes:   sandboxes,
		Egress:      egressLog,
		Checkpoints: checkpoints,
		Ephemeral:   ephemeral,
		Audit:       h.audit,
		// Sign-outs beside the links: per API key, in the storage every instance shares.
		Storage:       h.storage,
		StoragePrefix: consolePrefix + "/" + oauth.KeyFingerprint(h.APIKey),
		Origin:        h.auth.Origin,
		ClientIP:      clientIP,
		Logger:        logger,
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
	egress *egress.Gateway // nil without an egress block
}

func (c consoleSandbox) Status(ctx context.Context) (console.SandboxStatus, error) {
	s, err := c.sb.Status(ctx)
	return console.SandboxStatus{
		Container: s.Container, ID: s.ID, Exists: s.Exists, State: s.State, Image: s.Image, Volume: s.Volume, Node: s.Node, Runtime: s.Runtime,
		CreatedAt: s.CreatedAt, StartedAt: s.StartedAt, RestartCount: s.RestartCount,
		CPU: s.CPU, CPULimit: s.CPULimit, Memory: s.Memory, MemoryLimit: s.MemoryLimit,
		PIDs: s.PIDs, PIDsLimit: s.PIDsLimit, DiskUsed: s.DiskUsed, NoUsage: s.NoUsage,
		Agent: c.agent(), Egress: c.egressStatus(),
	}, err
}

func (c consoleSandbox) egressStatus() *console.Egress {
	if c.egress == nil {
		return nil
	}
	e := &console.Egress{Allowed: c.egress.Allowed(), Offline: c.egress.Offline(), Refused: []console.HostCount{}}
	for _, r := range c.egress.RefusedCounts() {
		e.Refused = append(e.Refused, console.HostCount{Host: r.Host, Count: r.Count})
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

// consoleJobs shows the running jobs of every sandbox to the console and kills them.
type consoleJobs struct{ f *fleet.Fleet }

func (c consoleJobs) Jobs(ctx context.Context, people ...string) ([]console.Job, error) {
	js, err := c.f.Jobs(ctx, people...)
	out := make([]console.Job, 0, len(js))
	for _, j := range js {
		out = append(out, console.Job{ID: j.ID, Command: j.Command, Person: j.Person, StartedAt: j.Started, State: j.State})
	}
	return out, err
}

func (c consoleJobs) KillJob(ctx context.Context, person, id string) error {
	return consoleError(c.f.KillJob(ctx, person, id))
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
		out = append(out, console.Grant{ID: g.ID, ClientID: g.ClientID, ClientName: g.ClientName, Person: g.Person,
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

// consoleLinks shows the links of every kind the registry holds: each kind records
// the links it makes (recordLink, recordPreview) and consults h.linkReg.Revoked(id) in
// its link check, or, for previews, is unexposed by an OnRevoke hook.
type consoleLinks struct{ reg *console.LinkRegistry }

func (c consoleLinks) Links(context.Context) ([]console.Link, error) { return c.reg.List(), nil }

func (c consoleLinks) RevokeLink(ctx context.Context, id string) (console.Link, error) {
	return c.reg.Revoke(ctx, id)
}

// recordLink remembers a link a tool made, so the console lists it and can revoke it.
// A failure to remember it is logged, never the tool's failure.
func (h *Handler) recordLink(ctx context.Context, kind string, l links.Link, target string) {
	caller := mcptools.CallerFrom(ctx)
	err := h.linkReg.Record(ctx, console.Link{
		ID: l.ID, Kind: kind, Target: target,
		Creator: caller.Label, Person: caller.Person, ExpiresAt: l.Expires,
	})
	if err != nil {
		h.logger.Warn("recording a "+kind+" link", zap.Error(err))
	}
}

// previewLinkID names a preview in the link registry: a hash of its label, which is
// the preview's capability and so is kept out of storage and the console.
func previewLinkID(label string) string {
	sum := sha256.Sum256([]byte("mcp-sandbox preview\x00" + label))
	return "preview-" + hex.EncodeToString(sum[:10])
}

// recordPreview remembers a port exposed by a tool, so the console lists it with its
// person and can end it; exposing it again renews the entry.
func (h *Handler) recordPreview(ctx context.Context, pv preview.Preview) {
	caller := mcptools.CallerFrom(ctx)
	err := h.linkReg.Record(ctx, console.Link{
		ID: previewLinkID(pv.Label), Kind: console.KindPreview, Target: strconv.Itoa(pv.Port),
		Creator: caller.Label, Person: caller.Person, ExpiresAt: pv.Expires,
	})
	if err != nil {
		h.logger.Warn("recording a preview", zap.Error(err))
	}
}

// unexposeRevoked ends the preview the operator revoked: its port closes at once.
func (h *Handler) unexposeRevoked(_ context.Context, l console.Link) error {
	port, err := strconv.Atoi(l.Target)
	if err != nil || h.previews == nil {
		return nil
	}
	if l.Person != "" && h.Person(l.Person) == nil {
		return nil // a removed person's previews no longer open
	}
	if h.previews.Unexpose(h.previewOwner(l.Person), port) {
		h.logger.Info("preview revoked from the console", zap.String("person", l.Person), zap.Int("port", port))
	}
	return nil
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
