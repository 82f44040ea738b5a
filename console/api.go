package console

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
	"go.uber.org/zap"
)

// Actions, as posted by forms and named in the audit log as "console.<action>".
const (
	actRestart     = "restart"
	actRecreate    = "recreate"
	actRevokeGrant = "revoke_grant"
	actRevokeLink  = "revoke_link"
	actKillJob     = "kill_job"
	// actRevokeApproval revokes a host a person allowed always.
	actRevokeApproval = "revoke_egress_approval"
)

// actionTimeout bounds one action; recreating may have to wait for the image.
const actionTimeout = 2 * time.Minute

// act runs an operator action and records it in the audit log. person names whose
// job kill_job kills ("-" the operator's, "" whoever runs job id).
func (c *Console) act(r *http.Request, actor, action, id, person string) error {
	start := c.opts.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), actionTimeout)
	defer cancel()
	var err error
	args := ""
	concerns := "" // whose the action is about, for the audit entry
	switch action {
	case actRestart:
		err = c.opts.Sandbox.Restart(ctx)
	case actRecreate:
		err = c.opts.Sandbox.Recreate(ctx)
	case actRevokeGrant:
		args = `{"id":` + strconv.Quote(id) + `}`
		err = c.opts.Access.RevokeGrant(ctx, id)
	case actRevokeLink:
		args = `{"id":` + strconv.Quote(id) + `}`
		var l Link
		l, err = c.opts.Links.RevokeLink(ctx, id)
		if err == nil {
			args = `{"id":` + strconv.Quote(id) + `,"kind":` + strconv.Quote(l.Kind) + `,"target":` + strconv.Quote(l.Target) + `}`
			concerns = l.Person
		}
	case actRevokeApproval:
		args = `{"id":` + strconv.Quote(id) + `}`
		ap, ok := c.opts.Egress.(EgressApprovals)
		if !ok {
			return ErrNotFound
		}
		var a EgressApproval
		if a, err = ap.RevokeApproval(ctx, id); err == nil {
			args = `{"id":` + strconv.Quote(id) + `,"person":` + strconv.Quote(a.Person) + `,"host":` + strconv.Quote(a.Host) + `,"port":` + strconv.Itoa(a.Port) + `}`
			concerns = a.Person
			c.log.Info("egress approval revoked", zap.String("person", a.Person), zap.String("host", a.Host),
				zap.Int("port", a.Port), zap.String("by", actor))
		}
	case actKillJob:
		var p string
		if p, err = c.jobOwner(ctx, person, id); err == nil {
			concerns = p
			err = c.opts.Jobs.KillJob(ctx, p, id)
		}
		args = `{"id":` + strconv.Quote(id) + `,"person":` + strconv.Quote(p) + `}`
	case actRestoreCheckpoint, actDeleteCheckpoint:
		if c.opts.Checkpoints == nil {
			return errUnknownAction
		}
		args = `{"id":` + strconv.Quote(id) + `}`
		concerns, _ = c.checkpointPerson(ctx, id)
		if action == actRestoreCheckpoint {
			err = c.opts.Checkpoints.RestoreCheckpoint(ctx, id)
		} else {
			err = c.opts.Checkpoints.DeleteCheckpoint(ctx, id)
		}
	case actCopyCheckpoint:
		if c.opts.Checkpoints == nil {
			return errUnknownAction
		}
		to, ok := c.personArg(r.FormValue("to"))
		if !ok || r.FormValue("to") == "" {
			return ErrNotFound
		}
		replace := r.FormValue("replace") == "on"
		args = `{"id":` + strconv.Quote(id) + `,"to":` + strconv.Quote(to) + `,"replace":` + strconv.FormatBool(replace) + `}`
		concerns = to // whose sandbox becomes the checkpoint's
		err = c.opts.Checkpoints.CopyCheckpoint(ctx, id, to, replace)
	case "sandbox_" + actStop, "sandbox_" + actStart, "sandbox_" + actRestart, "sandbox_" + actRecreate, "sandbox_" + actDelete:
		args, err = c.actSandbox(ctx, action, id, r.FormValue("volume"))
		if id != OperatorPath && !errors.Is(err, ErrNotFound) {
			concerns = id // a person configured, or a removed person's sandbox
		}
	default:
		return errUnknownAction
	}
	outcome, errText := audit.OutcomeOK, ""
	if err != nil {
		outcome, errText = audit.OutcomeError, err.Error()
	}
	c.recordFor(r, actor, concerns, "console."+action, args, outcome, errText, start)
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrConflict) && !errors.Is(err, errVolumeChoice) {
		c.log.Error("console action failed", zap.String("action", action), zap.Error(err))
	}
	return err
}

var errUnknownAction = errors.New("unknown action")

// apiAuth authenticates an API request: the API key as bearer (checked under the
// sign-in limit), or a console session, which for anything but GET must also carry
// the CSRF token in X-CSRF-Token and come from the site itself.
func (c *Console) apiAuth(w http.ResponseWriter, r *http.Request) (actor string, ok bool) {
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, token, _ := strings.Cut(auth, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			c.apiUnauthorized(w, "use the API key as a bearer token")
			return "", false
		}
		good, retry, err := c.opts.Keys.CheckAPIKey(r, strings.TrimSpace(token))
		switch {
		case retry > 0:
			w.Header().Set("Retry-After", strconv.Itoa(int(retry/time.Second)+1))
			writeJSONError(w, http.StatusTooManyRequests, "too many wrong keys from this address; try the key again in "+roundUp(retry))
			return "", false
		case err != nil:
			c.record(r, "API key", "console.api", r.Method+" "+r.URL.Path, audit.OutcomeDenied, err.Error(), c.opts.Now())
			c.apiUnauthorized(w, err.Error())
			return "", false
		case !good:
			c.record(r, "API key", "console.api", r.Method+" "+r.URL.Path, audit.OutcomeDenied, "wrong API key", c.opts.Now())
			c.apiUnauthorized(w, "the bearer token is not the API key")
			return "", false
		}
		return "API key", true
	}
	sess, found := c.sessions.fromRequest(r, c.cookieName(r))
	if !found {
		c.apiUnauthorized(w, "sign in to the console or send the API key as a bearer token")
		return "", false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if !c.sameOrigin(r) || !sess.checkCSRF(r.Header.Get(csrfHeader)) {
			c.record(r, "console", "console.refused", r.Method+" "+r.URL.Path, audit.OutcomeDenied, "missing or wrong CSRF token", c.opts.Now())
			writeJSONError(w, http.StatusForbidden, "a console session must send its CSRF token in "+csrfHeader)
			return "", false
		}
	}
	return "console", true
}

func (c *Console) apiUnauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="console"`)
	writeJSONError(w, http.StatusUnauthorized, msg)
}

// serveAPI routes /console/api/... (p is the part after /api).
func (c *Console) serveAPI(w http.ResponseWriter, r *http.Request, p string) {
	actor, ok := c.apiAuth(w, r)
	if !ok {
		return
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	coll, id, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	if coll == "sandboxes" {
		c.serveSandboxes(w, r, actor, method, id)
		return
	}
	if coll == "checkpoints" {
		c.serveCheckpoints(w, r, actor, method, id)
		return
	}
	route := method + " " + coll
	if id != "" {
		route += "/{id}"
	}
	switch route {
	case "GET sandbox":
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		st, err := c.sandboxStatus(ctx)
		if err != nil {
			writeJSONError(w, http.StatusBadGateway, "reading the sandbox status: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, st)
	case "POST sandbox/{id}":
		if id != actRestart && id != actRecreate {
			writeJSONError(w, http.StatusNotFound, "use /console/api/sandbox/restart or /console/api/sandbox/recreate")
			return
		}
		c.apiAct(w, r, actor, id, "")
	case "GET activity":
		q := r.URL.Query()
		limit := 100
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				writeJSONError(w, http.StatusBadRequest, "limit must be a whole number (0 means all)")
				return
			}
			limit = n
		}
		entries := c.opts.Audit.Query(Filter{Client: q.Get("client"), Person: q.Get("person"), Tool: q.Get("tool"), Outcome: q.Get("outcome"), Limit: limit})
		if q.Get("format") == "jsonl" {
			writeJSONLines(w, entries)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"entries": entries})
	case "GET grants":
		clients, grants, err := c.access(r.Context())
		if err != nil {
			writeJSONError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"clients": clients, "grants": grants})
	case "DELETE grants/{id}":
		c.apiAct(w, r, actor, actRevokeGrant, id)
	case "GET links":
		links, err := c.links(r.Context())
		if err != nil {
			writeJSONError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"links": links})
	case "DELETE links/{id}":
		c.apiAct(w, r, actor, actRevokeLink, id)
	case "GET jobs":
		var people []string
		if person := r.URL.Query().Get("person"); person != "" {
			p, ok := c.personArg(person)
			if !ok {
				writeJSONError(w, http.StatusNotFound, "no such person is configured; GET /console/api/sandboxes lists them ("+OperatorPath+" is the operator)")
				return
			}
			people = []string{p}
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		jobs, err := c.opts.Jobs.Jobs(ctx, people...)
		if err != nil {
			writeJSONError(w, http.StatusBadGateway, "listing the jobs: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs})
	case "DELETE jobs/{id}":
		person := r.URL.Query().Get("person")
		if person != "" {
			if _, ok := c.personArg(person); !ok {
				writeJSONError(w, http.StatusNotFound, "no such person is configured; GET /console/api/sandboxes lists them ("+OperatorPath+" is the operator)")
				return
			}
		}
		c.apiActOn(w, r, actor, actKillJob, id, person)
	case "GET egress":
		c.serveEgress(w, r)
	case "DELETE egress/{id}":
		aid, ok := strings.CutPrefix(id, "approvals/")
		if !ok || aid == "" || strings.Contains(aid, "/") {
			writeJSONError(w, http.StatusNotFound, "use DELETE /console/api/egress/approvals/{id}, with an id GET /console/api/egress lists")
			return
		}
		c.apiAct(w, r, actor, actRevokeApproval, aid)
	default:
		writeJSONError(w, http.StatusNotFound, "no such console API endpoint (or method); see the README")
	}
}

func (c *Console) apiAct(w http.ResponseWriter, r *http.Request, actor, action, id string) {
	c.apiActOn(w, r, actor, action, id, "")
}

// apiActOn runs an action that may name a person besides its id (kill_job).
func (c *Console) apiActOn(w http.ResponseWriter, r *http.Request, actor, action, id, person string) {
	err := c.act(r, actor, action, id, person)
	switch {
	case errors.Is(err, ErrNotFound) && action == actRevokeApproval:
		writeJSONError(w, http.StatusNotFound, "no such egress approval (it may have been revoked); GET /console/api/egress lists them")
	case errors.Is(err, ErrNotFound) && action == actKillJob:
		writeJSONError(w, http.StatusNotFound, "no such job is running (it may have ended); GET /console/api/jobs?person= lists the running ones")
	case errors.Is(err, ErrNotFound) && strings.HasPrefix(action, "sandbox_"):
		writeJSONError(w, http.StatusNotFound, "no such person is configured, nor a removed person's sandbox left; GET /console/api/sandboxes lists them")
	case errors.Is(err, errVolumeChoice):
		writeJSONError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrConflict):
		writeJSONError(w, http.StatusConflict, err.Error())
	case errors.Is(err, ErrNotFound):
		writeJSONError(w, http.StatusNotFound, "no such "+strings.TrimPrefix(action, "revoke_")+" (it may have expired)")
	case errors.Is(err, ErrTooManyRevoked):
		writeJSONError(w, http.StatusConflict, err.Error())
	case err != nil:
		writeJSONError(w, http.StatusBadGateway, err.Error())
	default:
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "action": action, "id": id})
	}
}

// personArg reads a person named in a query or form: "-" (or "") is the operator,
// "", and anyone else must be configured.
func (c *Console) personArg(p string) (string, bool) {
	switch {
	case p == "" || p == OperatorPath:
		return "", true
	case c.opts.Sandboxes == nil:
		return "", false
	}
	return p, slices.Contains(c.opts.Sandboxes.People(), p)
}

// jobOwner is whose sandbox runs job id: the person named ("-" the operator), or,
// when none is, the one whose sandbox lists the job.
func (c *Console) jobOwner(ctx context.Context, person, id string) (string, error) {
	if person != "" {
		p, ok := c.personArg(person)
		if !ok {
			return person, ErrNotFound
		}
		return p, nil
	}
	if c.opts.Sandboxes == nil {
		return "", nil
	}
	jobs, err := c.opts.Jobs.Jobs(ctx)
	if err != nil {
		return "", err
	}
	for _, j := range jobs {
		if j.ID == id {
			return j.Person, nil
		}
	}
	return "", ErrNotFound
}

// access lists clients and sign-ins, with each sign-in's last use from the audit log.
func (c *Console) access(ctx context.Context) ([]Client, []Grant, error) {
	clients, err := c.opts.Access.Clients(ctx)
	if err != nil {
		return nil, nil, err
	}
	grants, err := c.opts.Access.Grants(ctx)
	if err != nil {
		return nil, nil, err
	}
	for i := range grants {
		grants[i].LastUsedAt = c.opts.Audit.LastSeen(grants[i].ID)
	}
	return clients, grants, nil
}

func writeJSONLines(w http.ResponseWriter, entries []audit.Entry) {
	w.Header().Set("Content-Type", "application/jsonl; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="activity.jsonl"`)
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	// Oldest first, as a log reads.
	for i := len(entries) - 1; i >= 0; i-- {
		_ = enc.Encode(&entries[i])
	}
	_ = bw.Flush()
}
