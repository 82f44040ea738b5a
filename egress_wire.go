package mcpsandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddypki"
	"github.com/caddyserver/certmagic"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// newEgressGateway makes the egress gateway of a pooled sandbox: it outlives config
// reloads with the sandbox, and each config that provisions sets the policy in force.
func newEgressGateway(sb *sandbox.Sandbox, logger *zap.Logger) *egress.Gateway {
	cfg := sb.Config()
	o := egress.Options{
		Sandbox: egressSandbox{sb}, Port: cfg.ProxyPort, Bundle: cfg.CABundle, Container: cfg.Container,
		Logger: logger.Named("egress"), Refused: countRefusal,
	}
	if cfg.NoAgent {
		o.Offline = "the agent is off (agent off), and the egress proxy needs it"
	}
	gw := egress.NewGateway(o)
	// What the person allowed once lasts while the job that asked runs.
	sb.OnJobEnd(gw.JobEnded)
	return gw
}

func countRefusal(host, person string) { metricEgressRefused.WithLabelValues(host, person).Inc() }

// egressSandbox is a sandbox as its egress gateway uses it: every call is upkeep, so
// the gateway never starts a container that idle stop or the operator stopped.
type egressSandbox struct{ sb *sandbox.Sandbox }

func (s egressSandbox) Listen(ctx context.Context, port int, serve func(net.Conn)) (func(), <-chan struct{}, error) {
	stop, done, err := s.sb.ListenPort(sandbox.Upkeep(ctx), port, serve)
	return stop, done, notRunning(err)
}

func (s egressSandbox) Started() <-chan struct{} { return s.sb.Ready() }

func (s egressSandbox) Running(ctx context.Context) (bool, error) {
	running, err := s.sb.Running(sandbox.Upkeep(ctx))
	return running, notRunning(err)
}

func (s egressSandbox) Open(ctx context.Context, p string) (io.ReadCloser, error) {
	f, err := s.sb.Open(sandbox.Upkeep(ctx), p, 0)
	if err != nil {
		return nil, notRunning(err)
	}
	return f, nil
}

func (s egressSandbox) WriteFile(ctx context.Context, p string, data []byte) error {
	_, _, err := s.sb.WriteFile(sandbox.Upkeep(ctx), p, data)
	return notRunning(err)
}

func (s egressSandbox) JobID(name string) bool { return boxapi.ValidJobID(name) }

// notRunning marks the errors of a container that does not run as egress knows them.
func notRunning(err error) error {
	if sandbox.NotRunning(err) {
		return fmt.Errorf("%w: %w", egress.ErrNotRunning, err)
	}
	return err
}

// consoleEgress shows the console the refusals of every sandbox of this site (the
// operator's and each person's, placed by this config yet or not), each with its
// person.
type consoleEgress struct{ h *Handler }

func (c consoleEgress) Refusals(context.Context) ([]console.EgressRefusal, error) {
	h := c.h
	var out []console.EgressRefusal
	for _, person := range h.sandboxPeople() {
		log := h.refusals[person]
		if log == nil {
			continue
		}
		for _, r := range log.Refusals() {
			out = append(out, console.EgressRefusal{Person: person, Host: r.Host, Reason: r.Reason, Count: r.Count, LastAt: r.LastAt})
		}
	}
	return out, nil
}

// sandboxPeople are the people whose sandboxes this config names: "" (the operator)
// first, then the person lines in order.
func (h *Handler) sandboxPeople() []string {
	names := []string{""}
	for _, p := range h.People {
		names = append(names, p.Name)
	}
	return names
}

// refusalLogs are the egress refusals of each sandbox, by container, shared by every
// config that names the sandbox: a reload makes new gateways where the settings
// changed, and places a person's sandbox anew only when it is next used, yet the
// console's list goes on. Each log is bounded (egress.RefusalLog), and goes when no
// config names its sandbox.
var refusalLogs = caddy.NewUsagePool()

type refusalLogState struct{ log *egress.RefusalLog }

func (refusalLogState) Destruct() error { return nil }

// provisionRefusals takes the refusal log of each sandbox of the site.
func (h *Handler) provisionRefusals() {
	h.refusals = map[string]*egress.RefusalLog{}
	for _, person := range h.sandboxPeople() {
		cfg, err := h.SandboxConfigFor(person)
		if err != nil {
			continue
		}
		key := "egress refusals\x00" + cfg.Container
		v, _, _ := refusalLogs.LoadOrNew(key, func() (caddy.Destructor, error) {
			return refusalLogState{egress.NewRefusalLog()}, nil
		})
		h.refusals[person] = v.(refusalLogState).log
		h.refusalKeys = append(h.refusalKeys, key)
	}
}

// releaseRefusals lets go of the logs, at Cleanup.
func (h *Handler) releaseRefusals() {
	for _, k := range h.refusalKeys {
		_, _ = refusalLogs.Delete(k)
	}
	h.refusalKeys = nil
}

var metricEgressRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "egress_refused_total",
	Help: "Connections the egress proxy refused, by host (at most 200 per sandbox, then (other)) and by the person whose sandbox asked (\"\" for the operator's, or the one shared).",
}, []string{"host", "person"})

// The plugin's own CA for intercepted hosts, in Caddy's storage under
// pki/authorities/<egressCAID>: never Caddy's `local` CA, which `tls internal` shares,
// and never installed in the host's trust store.
const egressCAID = "mcp_sandbox_egress"

// setupEgress gives person's sandbox proxy ("" the operator's) this config's CA and
// rules: the operator's when the config is provisioned, a person's when their sandbox
// is first placed.
func (h *Handler) setupEgress(e *fleet.Entry, person string) error {
	gw := egressOf(e)
	if gw == nil {
		return nil
	}
	ctx, logger := h.egressCtx, h.logger.Named("egress")
	pol, _ := egress.Compile(h.EgressRules(person)) // Validate compiled it
	var asker egress.Asker
	var approvals egress.Approvals
	if h.EgressAsk(person) {
		asker, approvals = egressAsker{h, person}, h.approvals
	}
	err := gw.Configure(egress.Settings{
		Asker: asker, Approvals: approvals,
		Person: person, Policy: pol, CA: egressCA(h.egressCA), TrustCA: h.EgressTrust(person), Refusals: h.refusals[person],
		RenewCA: func() (egress.CA, error) {
			ca, err := provisionEgressCA(ctx, logger)
			if err != nil {
				return egress.CA{}, err
			}
			return egressCA(ca), nil
		},
	})
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	return nil
}

func egressCA(ca *caddypki.CA) egress.CA {
	return egress.CA{Chain: ca.IntermediateCertificateChain(), Key: ca.IntermediateKey(), Root: ca.RootCertificate()}
}

// provisionEgressCA loads or creates the CA, making its intermediate anew when it is
// about to expire (Caddy renews only the CAs of its pki app).
func provisionEgressCA(ctx caddy.Context, logger *zap.Logger) (*caddypki.CA, error) {
	for attempt := 0; ; attempt++ {
		off := false
		ca := &caddypki.CA{
			Name: "MCP sandbox egress", RootCommonName: "MCP sandbox egress root",
			IntermediateCommonName: "MCP sandbox egress intermediate", InstallTrust: &off,
		}
		if err := ca.Provision(ctx, egressCAID, logger); err != nil {
			return nil, fmt.Errorf("setting up the egress CA: %w", err)
		}
		chain := ca.IntermediateCertificateChain()
		if attempt > 0 || len(chain) == 0 || time.Until(chain[0].NotAfter) > egress.CARenewBefore {
			return ca, nil
		}
		prefix := path.Join("pki", "authorities", egressCAID)
		for _, k := range []string{"intermediate.crt", "intermediate.key"} {
			if err := ctx.Storage().Delete(ctx, path.Join(prefix, k)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("renewing the egress CA's intermediate: %w", err)
			}
		}
	}
}

// egressAsker puts hosts to the person on the MCP session of the call that runs the
// command, through this config's tools.
type egressAsker struct {
	h      *Handler
	person string
}

func (a egressAsker) Ask(ctx context.Context, q egress.Question) (egress.Answer, error) {
	tools := a.h.askTools.Load()
	if tools == nil {
		return egress.Deny, fmt.Errorf("the MCP server is not set up yet: %w", egress.ErrCannotAsk)
	}
	choice, err := tools.AskHost(ctx, a.person, q.Job, q.Host, q.Port)
	switch {
	case errors.Is(err, mcptools.ErrCannotAsk):
		return egress.Deny, fmt.Errorf("%w: %w", egress.ErrCannotAsk, err)
	case errors.Is(err, mcptools.ErrBadAnswer):
		return egress.Deny, nil
	case err != nil:
		return egress.Deny, err
	case choice == mcptools.ChoiceOnce:
		return egress.AllowOnce, nil
	case choice == mcptools.ChoiceAlways:
		return egress.AllowAlways, nil
	}
	return egress.Deny, nil
}

// approvalStores are the egress approvals by storage and site, shared by every config
// over them (so that a revocation in one applies to the gateways another configured)
// and read anew from storage once none holds them.
var approvalStores = caddy.NewUsagePool()

type approvalState struct{ store *egress.ApprovalStore }

func (approvalState) Destruct() error { return nil }

// provisionApprovals takes the site's store of hosts people allowed always, in the
// handler's storage under a key of its own (its container names the site). It reads
// nothing yet.
func (h *Handler) provisionApprovals() {
	key := path.Join("mcp_sandbox", "egress", "approvals", h.Container+".json")
	h.approvalsKey = storageID(h.storage) + "\x00" + key
	v, _, _ := approvalStores.LoadOrNew(h.approvalsKey, func() (caddy.Destructor, error) {
		return approvalState{egress.NewApprovalStore(storageKV{h.storage}, key, nil)}, nil
	})
	h.approvals = v.(approvalState).store
}

// releaseApprovals lets go of the store, at Cleanup.
func (h *Handler) releaseApprovals() {
	if h.approvalsKey != "" {
		_, _ = approvalStores.Delete(h.approvalsKey)
	}
}

// storageKV is Caddy's storage as the approvals' store uses it.
type storageKV struct{ st certmagic.Storage }

func (s storageKV) Load(ctx context.Context, key string) ([]byte, error) { return s.st.Load(ctx, key) }

func (s storageKV) Store(ctx context.Context, key string, v []byte) error {
	return s.st.Store(ctx, key, v)
}

// Lock and Unlock hold the approvals against the other instances sharing the storage.
func (s storageKV) Lock(ctx context.Context, name string) error   { return s.st.Lock(ctx, name) }
func (s storageKV) Unlock(ctx context.Context, name string) error { return s.st.Unlock(ctx, name) }

func (c consoleEgress) Approvals(ctx context.Context) ([]console.EgressApproval, error) {
	list, err := c.h.approvals.List(ctx)
	out := make([]console.EgressApproval, 0, len(list))
	for _, a := range list {
		out = append(out, consoleApproval(a))
	}
	return out, err
}

// consoleApproval is an approval as the console shows it: the store keeps only the
// answers "allow always".
func consoleApproval(a egress.Approval) console.EgressApproval {
	return console.EgressApproval{ID: a.ID, Person: a.Person, Host: a.Host, Port: a.Port, At: a.At, Answer: console.AnswerAllowAlways}
}

// RevokeApproval revokes approval id and returns what it was, so that the console
// records whose and which host.
func (c consoleEgress) RevokeApproval(ctx context.Context, id string) (console.EgressApproval, error) {
	list, err := c.h.approvals.List(ctx)
	if err != nil {
		return console.EgressApproval{}, err
	}
	var found console.EgressApproval
	for _, a := range list {
		if strings.EqualFold(a.ID, id) {
			found = consoleApproval(a)
		}
	}
	ok, err := c.h.approvals.Revoke(ctx, id)
	if err == nil && !ok {
		err = fmt.Errorf("egress approval %s: %w", id, console.ErrNotFound)
	}
	return found, err
}
