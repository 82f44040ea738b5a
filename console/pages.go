package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

//go:embed templates/*.html static/*
var assets embed.FS

// pages are parsed once: each page template with the layout.
var pages = func() map[string]*template.Template {
	funcs := template.FuncMap{
		"when":    when,
		"ago":     ago,
		"size":    HumanSize,
		"visible": visible,
		"clip":    clip,
		"pct":     pct,
		"cpus":    func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
		"ms":      func(f float64) string { return strconv.FormatFloat(f, 'f', 0, 64) },
		"dict5":   actionButton,
		"whose":   whose,
		"answer":  answerText,
		"noUsage": func() string { return NoUsageText },
		"derefInt": func(p *int) string {
			if p == nil {
				return ""
			}
			return strconv.Itoa(*p)
		},
	}
	out := map[string]*template.Template{}
	names, _ := fs.Glob(assets, "templates/*.html")
	for _, n := range names {
		base := strings.TrimSuffix(path.Base(n), ".html")
		if base == "layout" {
			continue
		}
		out[base] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", n))
	}
	return out
}()

// page is what every page template gets.
type page struct {
	Title string
	Page  string // nav entry to mark
	CSRF  string
	Flash string
	Data  any
}

func (c *Console) render(w http.ResponseWriter, status int, name string, p page) {
	var buf bytes.Buffer
	if err := pages[name].Execute(&buf, p); err != nil {
		c.log.Error("rendering a console page", zap.String("page", name), zap.Error(err))
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (c *Console) renderMessage(w http.ResponseWriter, status int, title, text string) {
	c.render(w, status, "message", page{Title: title, Data: text})
}

func (c *Console) renderSignIn(w http.ResponseWriter, status int, msg string) {
	c.render(w, status, "signin", page{Title: "Sign in", Data: msg})
}

func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request, name string) {
	data, err := assets.ReadFile("static/" + path.Base(name))
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	switch path.Ext(name) {
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case ".svg":
		w.Header().Set("Content-Type", "image/svg+xml")
	}
	w.Header().Set("Cache-Control", "private, max-age=3600")
	_, _ = w.Write(data)
}

// flashes are the messages a redirect after an action may show; the query names one,
// so no text from a URL ever reaches the page.
var flashes = map[string]string{
	actRestart:        "The sandbox container was restarted.",
	actRecreate:       "The sandbox container was recreated; /sandbox was kept.",
	actRevokeGrant:    "The sign-in was revoked: its tokens no longer work.",
	actRevokeLink:     "The link was revoked: it no longer works.",
	actKillJob:        "The job was killed.",
	actRevokeApproval: "The egress approval was revoked: the host is asked about again.",
	"signed_in":       "Signed in as the operator, with the API key.",
	sbStop:            "The sandbox was stopped; its files are kept, its processes ended.",
	sbStart:           "The sandbox was started.",
	sbRestart:         "The sandbox container was restarted.",
	sbRecreate:        "The sandbox container was recreated; /sandbox was kept.",
	sbDelete:          "The sandbox container was deleted.",

	actRestoreCheckpoint: "The checkpoint was restored; the processes that were running before have ended.",
	actCopyCheckpoint:    "The checkpoint was copied: the sandbox chosen starts from it.",
	actDeleteCheckpoint:  "The checkpoint was deleted.",
}

// The form actions on one person's sandbox (the id is the person, "-" the operator).
const (
	sbStop     = "sandbox_" + actStop
	sbStart    = "sandbox_" + actStart
	sbRestart  = "sandbox_" + actRestart
	sbRecreate = "sandbox_" + actRecreate
	sbDelete   = "sandbox_" + actDelete
)

func (c *Console) newPage(r *http.Request, sess *session, name, title string, data any) page {
	return page{Title: title, Page: name, CSRF: sess.csrf, Flash: flashes[r.URL.Query().Get("done")], Data: data}
}

// overview is the data of the Overview page.
type overview struct {
	Status    SandboxStatus
	StatusErr string
	Jobs      []Job
	JobsErr   string
	Errors    []audit.Entry
	// Sandboxes are every person's, with person lines only.
	Sandboxes    []SandboxInfo
	SandboxesErr string
	People       bool
	// Warm is the site's warm sandboxes, in the overview of everyone; nil without.
	Warm *WarmInfo
	// Refusals are the egress proxies' newest, with a site's egress block only.
	Refusals    []EgressRefusal
	RefusalsErr string
	Egress      bool
	// Approvals are the hosts people allowed always when asked, oldest first, each
	// with a Revoke button; HasApprovals: the site's egress keeps them.
	Approvals    []EgressApproval
	ApprovalsErr string
	HasApprovals bool
	// Checkpoints are every sandbox's, newest first, when the site offers them.
	Checkpoints    []Checkpoint
	CheckpointsErr string
	HasCheckpoints bool
	// Person is the one person the page is about (?person=NAME, "-" the operator),
	// "" for everyone: the sandboxes, checkpoints, egress, jobs and errors are then
	// that person's only.
	Person string
	// Calls (their newest activity, any outcome) and Links (the links to their
	// sandbox) are shown in one person's view only.
	Calls    template.HTML
	HasCalls bool
	Links    []Link
	LinksErr string
}

// personCalls is how many of a person's newest activity entries their view shows.
const personCalls = 20

func (c *Console) serveOverview(w http.ResponseWriter, r *http.Request, sess *session) {
	var o overview
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	st, err := c.sandboxStatus(ctx)
	o.Status = st
	if err != nil {
		o.StatusErr = err.Error()
	}
	if o.Jobs, err = c.opts.Jobs.Jobs(ctx); err != nil {
		o.JobsErr = err.Error()
	}
	if c.opts.Sandboxes != nil {
		o.People = true
		o.Person = r.URL.Query().Get("person")
		if o.Sandboxes, err = c.sandboxes(ctx); err != nil {
			o.SandboxesErr = err.Error()
		}
		if o.Person == "" {
			o.Warm = c.opts.Sandboxes.Warm()
		}
	}
	mine := func(person string) bool { return o.Person == "" || personPath(person) == o.Person }
	if o.Person != "" {
		// Someone configured, the operator, or a removed person whose sandbox is left.
		_, known := c.personArg(o.Person)
		if !known && !slices.ContainsFunc(o.Sandboxes, func(s SandboxInfo) bool { return s.Person == o.Person }) {
			c.renderMessage(w, http.StatusNotFound, "No such person", "No person line names "+o.Person+", nor is a sandbox of theirs left. The overview lists every sandbox.")
			return
		}
		calls := c.opts.Audit.Query(Filter{Person: o.Person, Limit: personCalls})
		o.Calls, o.HasCalls = activityRows(calls, false), len(calls) > 0
		links, err := c.links(ctx)
		if err != nil {
			o.LinksErr = err.Error()
		}
		o.Links = slices.DeleteFunc(links, func(l Link) bool { return !mine(l.Person) })
	}
	o.Errors = c.opts.Audit.Query(Filter{Outcome: audit.OutcomeError, Person: o.Person, Limit: 10})
	o.Sandboxes = slices.DeleteFunc(o.Sandboxes, func(s SandboxInfo) bool { return !mine(s.Person) })
	o.Jobs = slices.DeleteFunc(o.Jobs, func(j Job) bool { return !mine(j.Person) })
	if c.opts.Egress != nil {
		o.Egress = true
		if o.Refusals, err = c.egressRefusals(ctx, o.Person); err != nil {
			o.RefusalsErr = err.Error()
		}
		o.Refusals = o.Refusals[:min(len(o.Refusals), maxOverviewRefusals)]
		if _, o.HasApprovals = c.opts.Egress.(EgressApprovals); o.HasApprovals {
			if o.Approvals, err = c.egressApprovals(ctx, o.Person); err != nil {
				o.ApprovalsErr = err.Error()
			}
		}
	}
	if c.opts.Checkpoints != nil {
		o.HasCheckpoints = true
		o.Checkpoints, o.CheckpointsErr = c.checkpointsForPage(ctx)
		o.Checkpoints = slices.DeleteFunc(o.Checkpoints, func(ck Checkpoint) bool { return !mine(ck.Person) })
	}
	c.render(w, http.StatusOK, "overview", c.newPage(r, sess, "overview", "Overview", o))
}

// activity is the data of the Activity page.
type activity struct {
	Entries        []audit.Entry
	Filter         Filter
	Clients, Tools []string
	Outcomes       []string
	People         []string // nil without person lines
	Total          int
	Export         string
	Rows           template.HTML
}

// activityRows renders the table rows of the Activity page. The page may hold 10,000
// entries, and html/template's per-field reflection costs several times what plain
// escaping does, so the rows are built here; every value goes through
// template.HTMLEscapeString (after visible and clip), exactly as the template would
// escape it in element content and quoted attributes.
// With people, a Person column names whose sandbox each entry is about.
func activityRows(entries []audit.Entry, people bool) template.HTML {
	var b strings.Builder
	b.Grow(len(entries) * 400)
	esc := func(s string) { b.WriteString(template.HTMLEscapeString(s)) }
	for i := range entries {
		e := &entries[i]
		b.WriteString(`<tr class="o-`)
		esc(e.Outcome)
		b.WriteString(`"><td class="nowrap">`)
		esc(when(e.Time))
		if people {
			b.WriteString(`</td><td class="person">`)
			if aboutNoSandbox(e) {
				b.WriteString("–")
			} else {
				esc(whose(e.Person))
			}
		}
		b.WriteString(`</td><td>`)
		esc(visible(e.Client))
		if e.Remote != "" {
			b.WriteString(`<br><span class="muted">`)
			esc(e.Remote)
			b.WriteString(`</span>`)
		}
		b.WriteString(`</td><td>`)
		esc(visible(e.Tool))
		b.WriteString(`</td><td class="cmd">`)
		if e.Args != "" {
			b.WriteString(`<code>`)
			esc(clip(200, visible(e.Args)))
			b.WriteString(`</code>`)
		}
		if e.Error != "" {
			if e.Args != "" {
				b.WriteString(`<br>`)
			}
			b.WriteString(`<span class="error-text">`)
			esc(clip(200, visible(e.Error)))
			b.WriteString(`</span>`)
		}
		b.WriteString(`</td><td>`)
		esc(e.Outcome)
		b.WriteString(`</td><td>`)
		if e.ExitCode != nil {
			b.WriteString(strconv.Itoa(*e.ExitCode))
		}
		b.WriteString(`</td><td class="num">`)
		b.WriteString(strconv.FormatFloat(e.DurationMS, 'f', 0, 64))
		b.WriteString(` ms</td><td class="num">`)
		if e.Bytes != 0 {
			esc(HumanSize(e.Bytes))
		}
		b.WriteString("</td></tr>\n")
	}
	return template.HTML(b.String())
}

// defaultPageEntries is how many entries the Activity page shows without a limit.
const defaultPageEntries = 500

func (c *Console) serveActivity(w http.ResponseWriter, r *http.Request, sess *session) {
	f := filterFrom(r.URL.Query(), defaultPageEntries)
	a := activity{Filter: f, Entries: c.opts.Audit.Query(f), Total: c.opts.Audit.Len(),
		Outcomes: []string{audit.OutcomeOK, audit.OutcomeNonZero, audit.OutcomeTimeout, audit.OutcomeCancelled, audit.OutcomeError, audit.OutcomeDenied, audit.OutcomeRefused}}
	a.Clients, a.Tools = c.opts.Audit.Facets()
	if c.opts.Sandboxes != nil {
		// Removed people's entries stay in the log: they can be filtered too.
		a.People = append(slices.Clone(c.opts.Sandboxes.People()), c.opts.Sandboxes.Removed(r.Context())...)
	}
	a.Rows = activityRows(a.Entries, a.People != nil)
	q := url.Values{}
	for k, v := range map[string]string{"client": f.Client, "person": f.Person, "tool": f.Tool, "outcome": f.Outcome} {
		if v != "" {
			q.Set(k, v)
		}
	}
	a.Export = Prefix + "/activity.jsonl"
	if len(q) > 0 {
		a.Export += "?" + q.Encode()
	}
	c.render(w, http.StatusOK, "activity", c.newPage(r, sess, "activity", "Activity", a))
}

func filterFrom(q url.Values, defLimit int) Filter {
	f := Filter{Client: q.Get("client"), Person: q.Get("person"), Tool: q.Get("tool"), Outcome: q.Get("outcome"), Limit: defLimit}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n >= 0 {
		f.Limit = n
	}
	return f
}

func (c *Console) exportActivity(w http.ResponseWriter, r *http.Request) {
	writeJSONLines(w, c.opts.Audit.Query(filterFrom(r.URL.Query(), 0)))
}

// sandboxOf is how pages name person's sandbox ("" or "-" the operator's).
func sandboxOf(person string) string {
	if person == "" || person == OperatorPath {
		return "the operator's sandbox"
	}
	return person + "'s sandbox"
}

// whose is how pages name whose something is: the person, or "operator".
func whose(person string) string {
	if person == "" || person == OperatorPath {
		return "operator"
	}
	return person
}

// answerText is how pages name a person's answer to an egress question.
func answerText(answer string) string {
	switch answer {
	case AnswerAllowAlways:
		return "allow always"
	case "allow_once":
		return "allow once"
	}
	return answer
}

// accessPage is the data of the Access page.
type accessPage struct {
	Clients []Client
	Grants  []Grant
	Err     string
	People  bool // person lines exist: grants show whose key made them
}

func (c *Console) serveAccess(w http.ResponseWriter, r *http.Request, sess *session) {
	a := accessPage{People: c.opts.Sandboxes != nil}
	var err error
	if a.Clients, a.Grants, err = c.access(r.Context()); err != nil {
		a.Err = err.Error()
	}
	c.render(w, http.StatusOK, "access", c.newPage(r, sess, "access", "Access", a))
}

type linksPage struct {
	Links  []Link
	Err    string
	Now    time.Time
	People bool // person lines exist: links show whose sandbox they open
}

func (c *Console) serveLinks(w http.ResponseWriter, r *http.Request, sess *session) {
	l := linksPage{Now: c.opts.Now(), People: c.opts.Sandboxes != nil}
	var err error
	if l.Links, err = c.links(r.Context()); err != nil {
		l.Err = err.Error()
	}
	c.render(w, http.StatusOK, "links", c.newPage(r, sess, "links", "Links", l))
}

// confirmation says what an action does before it is done.
type confirmation struct {
	Action, ID, Title, Button string
	// Person, when set, is posted with the action (whose job kill_job kills).
	Person string
	// CopyTo, when set, are the sandboxes a checkpoint may be copied to ("-" the
	// operator's): the form asks for one, and whether to replace it.
	CopyTo         []string
	Ends, Survives []string
	// Volumes, when set, are buttons that each post the action with their volume
	// choice, instead of the one Button.
	Volumes []volumeChoice
}

// volumeChoice is one button of a deletion: what becomes of the volume.
type volumeChoice struct{ Volume, Label string }

var confirmations = map[string]confirmation{
	actRestart: {Action: actRestart, Title: "Restart the sandbox container?", Button: "Restart",
		Ends:     []string{"every running command and background job, including processes detached with setsid nohup"},
		Survives: []string{"everything under /sandbox (the volume)", "packages and other files written anywhere in the container", "the container itself, its image and limits"}},
	actRecreate: {Action: actRecreate, Title: "Recreate the sandbox container from its image?", Button: "Recreate",
		Ends: []string{"every running command and background job",
			"packages installed since the container was made, and every file outside /sandbox (they live in the container, which is removed)"},
		Survives: []string{"everything under /sandbox (the volume is kept and mounted into the new container)", "sign-ins, links and the audit log"}},
	// Title holds the job's id and whose sandbox.
	actKillJob: {Action: actKillJob, Title: "Kill job %s in %s?", Button: "Kill",
		Ends:     []string{"the job's command and every process of its group and session (as job_kill does); its output so far stays readable until the sandbox restarts"},
		Survives: []string{"the sandbox, its files and its other jobs"}},
}

// sandboxConfirmations are the confirmations of actions on one person's sandbox;
// Title holds %s for whose.
var sandboxConfirmations = map[string]confirmation{
	sbStop: {Action: sbStop, Title: "Stop %s?", Button: "Stop",
		Ends:     []string{"every running command and background job"},
		Survives: []string{"every file in the container and under /sandbox", "the container itself: the next tool call or Start starts it again"}},
	sbRestart:  sandboxConfirmation(actRestart),
	sbRecreate: sandboxConfirmation(actRecreate),
	sbDelete: {Action: sbDelete, Title: "Delete %s?",
		Ends: []string{"the container: every process, and every file outside /sandbox (installed packages)",
			"with \"and its volume\": everything under /sandbox, for good"},
		Survives: []string{"with \"keep the volume\": everything under /sandbox, in the volume, which a person added again under this name gets back",
			"the activity log"},
		Volumes: []volumeChoice{{"keep", "Delete, keep the volume"}, {"delete", "Delete with its volume"}}},
}

// sandboxConfirmation is the operator's confirmation of action for one sandbox.
func sandboxConfirmation(action string) confirmation {
	cf := confirmations[action]
	cf.Action = "sandbox_" + action
	cf.Title = cf.Button + " %s?"
	if action == actRecreate {
		cf.Title = "Recreate %s from its image?"
	}
	return cf
}

// ephemeralConfirmation is cf on an engine that keeps no container filesystem across
// a stop or restart (Options.Ephemeral): those lose what is outside /sandbox too.
func ephemeralConfirmation(cf confirmation) confirmation {
	switch strings.TrimPrefix(cf.Action, "sandbox_") {
	case actStop, actRestart:
		cf.Ends = append(slices.Clip(cf.Ends), "packages installed and every file written outside /sandbox (the pod is deleted and made again from the image)")
		cf.Survives = []string{"everything under /sandbox (the claim is kept and mounted into the new pod)", "the sandbox's image and limits"}
	}
	return cf
}

func (c *Console) serveConfirm(w http.ResponseWriter, r *http.Request, sess *session) {
	q := r.URL.Query()
	cf, ok := confirmations[q.Get("action")]
	if sc, found := sandboxConfirmations[q.Get("action")]; found && c.opts.Sandboxes != nil {
		person := q.Get("person")
		// A removed person's sandbox is stopped or deleted only.
		ok = c.isPerson(person) && sc.Action != sbDelete
		if !ok && (sc.Action == sbStop || sc.Action == sbDelete) {
			ok = slices.Contains(c.opts.Sandboxes.Removed(r.Context()), person)
		}
		cf = sc
		cf.ID = person
		cf.Title = fmt.Sprintf(cf.Title, sandboxOf(person))
	}
	if q.Get("action") == actKillJob {
		cf = confirmations[actKillJob]
		id, person := q.Get("id"), q.Get("person")
		p, known := c.personArg(person)
		ok = known && id != "" && len(id) <= 64
		cf.ID, cf.Person = id, personPath(p)
		cf.Title = fmt.Sprintf(cf.Title, id, sandboxOf(p))
	}
	if c.opts.Ephemeral {
		cf = ephemeralConfirmation(cf)
	}
	if cc, found := checkpointConfirmations[q.Get("action")]; found {
		id := q.Get("id")
		var owner string
		ok = c.opts.Checkpoints != nil && id != "" && len(id) <= 64
		if ok {
			owner, ok = c.checkpointOwner(r.Context(), id)
		}
		cf = cc
		cf.ID = id
		cf.Title = fmt.Sprintf(cf.Title, id, owner)
		cf.Ends, cf.Survives = slices.Clone(cf.Ends), slices.Clone(cf.Survives)
		for _, list := range [][]string{cf.Ends, cf.Survives} {
			for i := range list {
				if strings.Contains(list[i], "%[2]s") {
					list[i] = fmt.Sprintf(list[i], id, owner)
				}
			}
		}
		if cf.Action == actCopyCheckpoint {
			cf.CopyTo = []string{OperatorPath}
			if c.opts.Sandboxes != nil {
				cf.CopyTo = append(cf.CopyTo, c.opts.Sandboxes.People()...)
			}
		}
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	c.render(w, http.StatusOK, "confirm", c.newPage(r, sess, "overview", cf.Title, cf))
}

// backPages are where an action may return to.
var backPages = map[string]string{"overview": Prefix, "access": Prefix + "/access", "links": Prefix + "/links"}

// serveAction runs a posted action (the CSRF token is already checked).
func (c *Console) serveAction(w http.ResponseWriter, r *http.Request) {
	action, id := r.PostFormValue("action"), r.PostFormValue("id")
	err := c.act(r, "console", action, id, r.PostFormValue("person"))
	switch {
	case errors.Is(err, errUnknownAction):
		c.renderMessage(w, http.StatusBadRequest, "Unknown action", "The console does not know this action.")
		return
	case errors.Is(err, ErrNotFound):
		c.renderMessage(w, http.StatusNotFound, "Not found", "It no longer exists (it may have expired or been revoked already).")
		return
	case errors.Is(err, errVolumeChoice):
		c.renderMessage(w, http.StatusBadRequest, "Say what becomes of the volume", err.Error())
		return
	case errors.Is(err, ErrConflict):
		c.renderMessage(w, http.StatusConflict, "Not possible", err.Error())
		return
	case err != nil:
		c.renderMessage(w, http.StatusBadGateway, "The action failed", err.Error())
		return
	}
	back, ok := backPages[r.PostFormValue("back")]
	if !ok {
		back = Prefix
	}
	http.Redirect(w, r, back+"?done="+url.QueryEscape(action), http.StatusSeeOther)
}

// Template helpers.

// actionForm is one button that posts an action.
type actionForm struct {
	CSRF, Action, ID, Back, Label, Class string
}

// actionButton makes the data of the "action" template.
func actionButton(csrf, action, id, back, label string) actionForm {
	class := "danger"
	if action == actRestart || action == sbRestart || action == sbStart {
		class = ""
	}
	return actionForm{CSRF: csrf, Action: action, ID: id, Back: back, Label: label, Class: class}
}

func when(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh %dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		s = fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// HumanSize writes a byte count in binary units ("1.5 MiB"); a negative count is
// "unknown".
func HumanSize(n int64) string { return human.Size(n) }

func pct(used, limit any) string {
	u, l := toFloat(used), toFloat(limit)
	if l <= 0 {
		return "0"
	}
	return strconv.FormatFloat(min(100, 100*u/l), 'f', 0, 64)
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	case int:
		return float64(x)
	}
	return 0
}

// visible makes control characters, and the Unicode ones that reorder or hide text,
// show as escapes, so what the log shows is what was sent.
func visible(s string) string {
	clean := true
	for _, r := range s {
		if invisible(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == utf8.RuneError:
			b.WriteString(`\ufffd`)
		case invisible(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case invisible(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func invisible(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError ||
		(r >= 0x200b && r <= 0x200f) || (r >= 0x2028 && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0xfeff
}

func clip(n int, s string) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for k := range s {
		if i == n {
			return s[:k] + "…"
		}
		i++
	}
	return s
}
