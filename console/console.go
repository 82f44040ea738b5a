// Package console is the operator's console of the MCP sandbox: server-rendered pages
// at /console and a JSON API at /console/api/ to see and control the sandbox
// container, the audit log of every tool call and download, the OAuth sign-ins and the
// links handed out.
//
// It knows nothing of Docker, MCP or Caddy: it reaches the rest through the small
// interfaces in this file ([Sandbox], [Access], [Links], [Jobs], [KeyChecker]), which
// the plugin implements, and keeps its own state ([AuditLog], [LinkRegistry]) in a
// certmagic.Storage.
//
// Security model: the operator signs in with the API key, checked under the same
// per-address limit as the OAuth sign-in page. The session is a cookie holding an
// expiry and a random nonce, signed with an HMAC key derived from the API key, so every
// session ends when the key changes; it is HttpOnly, SameSite=Strict and, on HTTPS,
// Secure with the __Host- prefix. Every state-changing request is a POST (or DELETE in
// the API) that carries a per-session CSRF token and, from a browser, a same-origin
// Origin; scripts may instead send the API key as a bearer token, which involves no
// cookie. Pages carry a strict Content-Security-Policy without any script, cannot be
// framed, and every value shown is escaped by html/template, control characters made
// visible.
package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
	"go.uber.org/zap"
)

// Prefix is where the console lives on the site's origin.
const Prefix = "/console"

// SandboxStatus is what the console shows of the sandbox container.
type SandboxStatus struct {
	Container    string    `json:"container"`
	ID           string    `json:"id,omitempty"`
	Exists       bool      `json:"exists"`
	State        string    `json:"state"`
	Image        string    `json:"image,omitempty"`
	Volume       string    `json:"volume"`
	Node         string    `json:"node,omitempty"`    // the cluster node it runs on (a Kubernetes engine); "" on Docker
	Runtime      string    `json:"runtime,omitempty"` // the container runtime (runc, runsc for gVisor); "" the engine's default
	CreatedAt    time.Time `json:"created_at,omitzero"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	RestartCount int       `json:"restart_count"`
	CPU          float64   `json:"cpu"`
	CPULimit     float64   `json:"cpu_limit"`
	Memory       int64     `json:"memory_bytes"`
	MemoryLimit  int64     `json:"memory_limit_bytes"`
	PIDs         int64     `json:"pids"`
	PIDsLimit    int64     `json:"pids_limit"`
	DiskUsed     int64     `json:"disk_used_bytes"` // -1 when unknown
	Agent        Agent     `json:"agent"`
	Egress       *Egress   `json:"egress,omitempty"` // nil: no egress policy
	// NoUsage: the engine gives no usage figures (a Kubernetes cluster without the
	// metrics API), so CPU, Memory and PIDs are zero for want of a measure. The JSON
	// then has no cpu, memory_bytes and pids but "no_usage": [NoUsageText], and the
	// pages show that text instead of meters.
	NoUsage bool `json:"-"`
}

// NoUsageText is what the console says instead of CPU, memory and process figures the
// engine does not give.
const NoUsageText = "no usage figures on this engine (install metrics-server)"

// MarshalJSON leaves out the usage figures the engine does not give (NoUsage).
func (s SandboxStatus) MarshalJSON() ([]byte, error) {
	type plain SandboxStatus
	if !s.NoUsage {
		return json.Marshal(plain(s))
	}
	// The outer fields hide the embedded ones of the same name; nil leaves them out.
	return json.Marshal(struct {
		plain
		CPU     *float64 `json:"cpu,omitempty"`
		Memory  *int64   `json:"memory_bytes,omitempty"`
		PIDs    *int64   `json:"pids,omitempty"`
		NoUsage string   `json:"no_usage"`
	}{plain: plain(s), NoUsage: NoUsageText})
}

// Egress is the sandbox's way out through the plugin's proxy.
type Egress struct {
	Allowed string `json:"allowed"` // the allow list, "" when nothing is allowed
	// Offline: the proxy cannot listen in the sandbox (its agent does not run).
	Offline bool `json:"offline,omitempty"`
	// Refused counts refused connections by host (normalized names, or quoted text
	// when the container asked for something that is no host), most first.
	Refused []HostCount `json:"refused"`
}

// EgressRefusal is a host the egress proxy refused to one sandbox: how often, and
// when last.
type EgressRefusal struct {
	// Person is whose sandbox asked: "" for the operator's own, or the one shared
	// without person lines.
	Person string `json:"person"`
	// Host is the normalized name, quoted text when the container asked for
	// something that is no host, or "(other)" beyond 200 hosts of one sandbox.
	Host   string    `json:"host"`
	Reason string    `json:"reason"` // the latest refusal's
	Count  int64     `json:"count"`
	LastAt time.Time `json:"last_at"`
}

// EgressLog lists what the egress proxies of the site's sandboxes refused.
type EgressLog interface {
	Refusals(ctx context.Context) ([]EgressRefusal, error)
}

// EgressApproval is a host and port a person allowed always, when asked about it.
type EgressApproval struct {
	ID     string    `json:"id"`     // for DELETE /console/api/egress/approvals/{id}
	Person string    `json:"person"` // "" for the operator's sandbox, or the one shared
	Host   string    `json:"host"`
	Port   int       `json:"port"`
	At     time.Time `json:"at"`
	// Answer is the person's answer that made it: AnswerAllowAlways (allow once is
	// never kept: it ends with its command).
	Answer string `json:"answer"`
}

// AnswerAllowAlways is the answer an [EgressApproval] is kept for.
const AnswerAllowAlways = "allow_always"

// EgressApprovals lists and revokes the hosts people allowed always; an [EgressLog]
// of a site whose egress block asks may implement it.
type EgressApprovals interface {
	Approvals(ctx context.Context) ([]EgressApproval, error)
	// RevokeApproval drops one and returns it; it fails with an error wrapping
	// ErrNotFound when there is none with id.
	RevokeApproval(ctx context.Context, id string) (EgressApproval, error)
}

// HostCount is one host's number of refusals.
type HostCount struct {
	Host  string `json:"host"`
	Count int64  `json:"count"`
}

// Agent tells whether commands run through the agent inside the container or, on the
// fallback, as one Docker exec each.
type Agent struct {
	Running bool `json:"running"`
	// Disabled: the configuration turns the agent off.
	Disabled bool `json:"disabled,omitempty"`
	// Reason is why the agent does not run: an error text that may hold what the
	// container printed, so untrusted. Empty while no command has started one yet.
	Reason string `json:"reason,omitempty"`
	// Direct: the agent's channel is a socket shared with the container, not Docker's
	// exec; DirectReason says why not (as untrusted as Reason).
	Direct       bool   `json:"direct,omitempty"`
	DirectReason string `json:"direct_reason,omitempty"`
}

// maxAgentReason bounds the reason shown, in characters.
const maxAgentReason = 300

// Sandbox is the container the console watches and controls.
type Sandbox interface {
	Status(ctx context.Context) (SandboxStatus, error)
	// Restart ends every process; the container's files stay.
	Restart(ctx context.Context) error
	// Recreate makes a new container from the image, keeping the /sandbox volume.
	Recreate(ctx context.Context) error
}

// sandboxStatus reads the sandbox's status for the page and the API, the agent's
// reason clipped.
func (c *Console) sandboxStatus(ctx context.Context) (SandboxStatus, error) {
	st, err := c.opts.Sandbox.Status(ctx)
	st.Agent.Reason = clip(maxAgentReason, st.Agent.Reason)
	st.Agent.DirectReason = clip(maxAgentReason, st.Agent.DirectReason)
	return st, err
}

// Client is a registered OAuth client.
type Client struct {
	ID           string    `json:"client_id"`
	Name         string    `json:"client_name,omitempty"`
	RedirectURIs []string  `json:"redirect_uris"`
	CreatedAt    time.Time `json:"created_at"`
	LastSignInAt time.Time `json:"last_sign_in_at,omitzero"`
}

// Grant is one sign-in of a client, whose tokens revoking it ends.
type Grant struct {
	ID         string `json:"id"`
	ClientID   string `json:"client_id"`
	ClientName string `json:"client_name,omitempty"`
	// Person is whose key the sign-in was made with; "" for the operator's API key.
	Person      string    `json:"person"`
	CreatedAt   time.Time `json:"created_at"`
	RefreshedAt time.Time `json:"refreshed_at,omitzero"`
	ExpiresAt   time.Time `json:"expires_at"`
	// LastUsedAt is the newest audit entry made with this sign-in, when there is one.
	LastUsedAt time.Time `json:"last_used_at,omitzero"`
}

// Access lists OAuth clients and sign-ins and revokes sign-ins.
type Access interface {
	Clients(ctx context.Context) ([]Client, error)
	Grants(ctx context.Context) ([]Grant, error)
	// RevokeGrant returns ErrNotFound for an unknown sign-in.
	RevokeGrant(ctx context.Context, id string) error
}

// Links lists the active links of every kind and revokes one.
type Links interface {
	Links(ctx context.Context) ([]Link, error)
	// RevokeLink returns ErrNotFound for an unknown or expired link.
	RevokeLink(ctx context.Context, id string) (Link, error)
}

// Job is a command running in the background.
type Job struct {
	ID      string `json:"id"`
	Command string `json:"command"`
	// Person is whose sandbox the job runs in; "" for the operator's.
	Person    string    `json:"person"`
	StartedAt time.Time `json:"started_at"`
	State     string    `json:"state"`
}

// Jobs lists the background jobs running and kills one. Looking never starts a
// sandbox: a stopped one has no jobs.
type Jobs interface {
	// Jobs lists the jobs running in the sandboxes of people ("" is the operator's),
	// or in every sandbox when no person is named.
	Jobs(ctx context.Context, people ...string) ([]Job, error)
	// KillJob kills job id in person's sandbox. It returns ErrNotFound for a job that
	// does not run there (unknown or ended) and for a person who is not configured.
	KillJob(ctx context.Context, person, id string) error
}

// KeyChecker checks a typed API key under the sign-in limit shared with the OAuth
// sign-in page; retryAfter > 0 means the address may not try a new key for that long,
// and err, when set, says why the key is refused (a retired key) in words for the
// person who typed it.
type KeyChecker interface {
	CheckAPIKey(r *http.Request, key string) (ok bool, retryAfter time.Duration, err error)
}

// Options configures a [Console]. Every interface is required except Jobs.
type Options struct {
	// SessionKey signs sessions and CSRF tokens. Derive it from the API key, so that
	// changing the key ends every session.
	SessionKey []byte
	Keys       KeyChecker
	Sandbox    Sandbox
	Access     Access
	Links      Links
	Jobs       Jobs
	// Sandboxes, when set, are the people's sandboxes (and the operator's).
	Sandboxes Sandboxes
	// Egress, when set, lists egress refusals across the sandboxes (a site with an
	// egress block).
	Egress EgressLog
	// Checkpoints, when set, are the sandboxes' checkpoints.
	Checkpoints Checkpoints
	// Ephemeral says that a stop or restart does not keep the container's own files
	// (a Kubernetes engine deletes the pod): only /sandbox survives, and the
	// confirmations say so.
	Ephemeral bool
	Audit     *AuditLog
	// Storage, when set, keeps sign-outs under StoragePrefix until the sessions would
	// have expired: a restart, and every instance sharing the storage, honour them.
	Storage       certmagic.Storage
	StoragePrefix string
	// Origin is the site's origin for r ("https://host"); it decides the cookie's name
	// and Secure flag and is what browser requests must come from.
	Origin func(r *http.Request) string
	// ClientIP is the address recorded in the audit log.
	ClientIP func(r *http.Request) string
	Logger   *zap.Logger
	Now      func() time.Time
}

// Console serves /console and /console/api/. Create it with [New].
type Console struct {
	opts     Options
	log      *zap.Logger
	sessions *sessions
}

// New checks opts and returns a Console.
func New(opts Options) (*Console, error) {
	if len(opts.SessionKey) < 16 || opts.Keys == nil || opts.Sandbox == nil || opts.Access == nil ||
		opts.Links == nil || opts.Audit == nil || opts.Origin == nil {
		return nil, errors.New("console: session key, key checker, sandbox, access, links, audit log and origin are required")
	}
	if opts.Jobs == nil {
		opts.Jobs = noJobs{}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ClientIP == nil {
		opts.ClientIP = func(r *http.Request) string { return r.RemoteAddr }
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Console{opts: opts, log: opts.Logger, sessions: newSessions(opts.SessionKey, opts.Now, opts.Storage, opts.StoragePrefix)}, nil
}

type noJobs struct{}

func (noJobs) Jobs(context.Context, ...string) ([]Job, error) { return []Job{}, nil }
func (noJobs) KillJob(context.Context, string, string) error  { return ErrNotFound }

// Handles reports whether r is for the console.
func Handles(r *http.Request) bool {
	p := r.URL.Path
	return p == Prefix || strings.HasPrefix(p, Prefix+"/")
}

// securityHeaders go on every console response: no framing, no script, nothing cached.
func securityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: with no-referrer browsers send "Origin: null" on
	// the console's own form posts, which the origin check would have to trust.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// ServeHTTP routes the console's pages, actions, assets and API.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w)
	p := strings.TrimPrefix(r.URL.Path, Prefix)
	switch {
	case strings.HasPrefix(p, "/api/"):
		c.serveAPI(w, r, strings.TrimPrefix(p, "/api"))
		return
	case strings.HasPrefix(p, "/static/"):
		c.serveStatic(w, r, strings.TrimPrefix(p, "/static/"))
		return
	case p == "/signin":
		c.serveSignIn(w, r)
		return
	}
	sess, ok := c.sessions.fromRequest(r, c.cookieName(r))
	if !ok {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			http.Redirect(w, r, Prefix+"/signin", http.StatusSeeOther)
			return
		}
		c.renderMessage(w, http.StatusUnauthorized, "Signed out", "Your console session ended. Sign in again.")
		return
	}
	if r.Method == http.MethodPost {
		if !c.checkPost(w, r, sess) {
			return
		}
		switch p {
		case "/signout":
			c.signOut(w, r, sess)
		case "/action":
			c.serveAction(w, r)
		default:
			http.NotFound(w, r)
		}
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch p {
	case "", "/":
		c.serveOverview(w, r, sess)
	case "/activity":
		c.serveActivity(w, r, sess)
	case "/activity.jsonl":
		c.exportActivity(w, r)
	case "/access":
		c.serveAccess(w, r, sess)
	case "/links":
		c.serveLinks(w, r, sess)
	case "/confirm":
		c.serveConfirm(w, r, sess)
	default:
		http.NotFound(w, r)
	}
}

// sameOrigin refuses browser requests from another site: a present Origin header must
// be the site's, and Sec-Fetch-Site must not say cross-site.
func (c *Console) sameOrigin(r *http.Request) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	if site != "" && site != "same-origin" && site != "none" {
		return false
	}
	o := r.Header.Get("Origin")
	// "null" comes from privacy settings as well as from sandboxed frames; only a
	// browser that also says the request is same-origin gets past with it.
	return o == "" || strings.EqualFold(o, c.opts.Origin(r)) || (o == "null" && site == "same-origin")
}

// record adds an operator action to the audit log.
func (c *Console) record(r *http.Request, actor, action, args, outcome, errText string, start time.Time) {
	c.recordFor(r, actor, "", action, args, outcome, errText, start)
}

// recordFor adds an operator action on person's sandbox, approval, job or link to
// the audit log, under that person ("" the operator), so the activity page lists it
// with the person and filtering by them finds it.
func (c *Console) recordFor(r *http.Request, actor, person, action, args, outcome, errText string, start time.Time) {
	c.opts.Audit.Record(audit.Entry{
		Time: c.opts.Now(), Client: actor, Person: person, Remote: c.opts.ClientIP(r), Tool: action, Args: args,
		Outcome: outcome, Error: errText, DurationMS: float64(time.Since(start).Microseconds()) / 1000,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
