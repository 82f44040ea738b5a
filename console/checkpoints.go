package console

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
	"go.uber.org/zap"
)

// Checkpoint is one saved state of a sandbox, as the console lists it.
type Checkpoint struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Person    string    `json:"person"` // "" for the operator's sandbox
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	Engine    string    `json:"engine,omitempty"`
}

// Checkpoints are the sandboxes' checkpoints. Errors that wrap ErrNotFound or
// ErrConflict are answered 404 and 409 with their text.
type Checkpoints interface {
	Checkpoints(ctx context.Context) ([]Checkpoint, error)
	DeleteCheckpoint(ctx context.Context, id string) error
	// RestoreCheckpoint makes the checkpoint's own sandbox that checkpoint again.
	RestoreCheckpoint(ctx context.Context, id string) error
	// CopyCheckpoint makes person to's sandbox the checkpoint; one that exists is
	// replaced only when replace is true, else ErrConflict.
	CopyCheckpoint(ctx context.Context, id, to string, replace bool) error
}

// The form actions on checkpoints (the id is the checkpoint's).
const (
	actRestoreCheckpoint = "restore_checkpoint"
	actDeleteCheckpoint  = "delete_checkpoint"
	// actCopyCheckpoint posts "to" (a person, "-" the operator) and "replace" ("on").
	actCopyCheckpoint = "copy_checkpoint"
)

// checkpointConfirmations say what the checkpoint actions do.
var checkpointConfirmations = map[string]confirmation{
	actRestoreCheckpoint: {Action: actRestoreCheckpoint, Title: "Restore %[2]s to checkpoint %[1]s?", Button: "Restore",
		Ends: []string{"every running command and background job of %[2]s, which it was saved from",
			"every change made to %[2]s since the checkpoint, in the system and under /sandbox"},
		Survives: []string{"the checkpoint itself, which can be restored again", "the sandbox's name, limits, network and egress"}},
	actDeleteCheckpoint: {Action: actDeleteCheckpoint, Title: "Delete checkpoint %[1]s of %[2]s?", Button: "Delete",
		Ends:     []string{"the checkpoint: its image and its copy of /sandbox"},
		Survives: []string{"the sandbox as it is now", "the other checkpoints"}},
	actCopyCheckpoint: {Action: actCopyCheckpoint, Title: "Copy checkpoint %[1]s of %[2]s to…", Button: "Copy",
		Ends: []string{"with \"replace\": every process of the chosen sandbox, and its files in the system and under /sandbox, which become the checkpoint's",
			"without it: nothing; a person who already has a sandbox is refused"},
		Survives: []string{"the checkpoint and %[2]s", "the chosen sandbox's name, limits, network and egress"}},
}

// checkpointOwner is whose sandbox checkpoint id was saved from, as pages name it
// ("alice's sandbox"); ok is false for a checkpoint not listed.
func (c *Console) checkpointOwner(ctx context.Context, id string) (string, bool) {
	person, ok := c.checkpointPerson(ctx, id)
	return sandboxOf(person), ok
}

// checkpointPerson is whose sandbox checkpoint id was saved from ("" the operator's);
// ok is false for a checkpoint not listed.
func (c *Console) checkpointPerson(ctx context.Context, id string) (string, bool) {
	list, _ := c.opts.Checkpoints.Checkpoints(ctx)
	for _, cp := range list {
		if cp.ID == id {
			return cp.Person, true
		}
	}
	return "", false
}

// checkpointsForPage lists the checkpoints for the overview, newest first.
func (c *Console) checkpointsForPage(ctx context.Context) ([]Checkpoint, string) {
	list, err := c.opts.Checkpoints.Checkpoints(ctx)
	slices.SortStableFunc(list, func(a, b Checkpoint) int { return b.CreatedAt.Compare(a.CreatedAt) })
	if err != nil {
		return list, err.Error()
	}
	return list, ""
}

// checkpointTimeout bounds one checkpoint action: a restore copies /sandbox.
const checkpointTimeout = 10 * time.Minute

// serveCheckpoints serves GET /console/api/checkpoints, DELETE .../{id}, and POST
// .../{id}/restore and .../{id}/copy {"to": person, "replace": bool}.
func (c *Console) serveCheckpoints(w http.ResponseWriter, r *http.Request, actor, method, rest string) {
	cp := c.opts.Checkpoints
	if cp == nil {
		writeJSONError(w, http.StatusNotFound, "checkpoints are not available on this site")
		return
	}
	id, action, _ := strings.Cut(rest, "/")
	switch {
	case method == http.MethodGet && rest == "":
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		list, err := cp.Checkpoints(ctx)
		if err != nil && len(list) == 0 {
			writeJSONError(w, http.StatusBadGateway, "listing the checkpoints: "+err.Error())
			return
		}
		if list == nil {
			list = []Checkpoint{}
		}
		out := map[string]any{"checkpoints": list}
		if err != nil {
			out["error"] = err.Error()
		}
		writeJSON(w, http.StatusOK, out)
	case method == http.MethodDelete && id != "" && action == "":
		owner, _ := c.checkpointPerson(r.Context(), id)
		c.checkpointAct(w, r, actor, owner, "delete_checkpoint", `{"id":`+strconv.Quote(id)+`}`, func(ctx context.Context) error {
			return cp.DeleteCheckpoint(ctx, id)
		})
	case method == http.MethodPost && id != "" && action == "restore":
		owner, _ := c.checkpointPerson(r.Context(), id)
		c.checkpointAct(w, r, actor, owner, "restore_checkpoint", `{"id":`+strconv.Quote(id)+`}`, func(ctx context.Context) error {
			return cp.RestoreCheckpoint(ctx, id)
		})
	case method == http.MethodPost && id != "" && action == "copy":
		var body struct {
			To      *string `json:"to"`
			Replace bool    `json:"replace"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || body.To == nil {
			writeJSONError(w, http.StatusBadRequest, `send {"to": "<person>"} (and "replace": true to replace a sandbox that exists; "`+OperatorPath+`" is the operator's)`)
			return
		}
		to, ok := c.personArg(*body.To)
		if !ok {
			writeJSONError(w, http.StatusNotFound, "no such person is configured; GET /console/api/sandboxes lists them ("+OperatorPath+" is the operator)")
			return
		}
		args := `{"id":` + strconv.Quote(id) + `,"to":` + strconv.Quote(to) + `,"replace":` + strconv.FormatBool(body.Replace) + `}`
		c.checkpointAct(w, r, actor, to, "copy_checkpoint", args, func(ctx context.Context) error {
			return cp.CopyCheckpoint(ctx, id, to, body.Replace)
		})
	default:
		writeJSONError(w, http.StatusNotFound, "use GET /console/api/checkpoints, DELETE /console/api/checkpoints/{id}, POST /console/api/checkpoints/{id}/restore or POST /console/api/checkpoints/{id}/copy")
	}
}

// checkpointAct runs a checkpoint action on person's sandbox, records it and answers.
func (c *Console) checkpointAct(w http.ResponseWriter, r *http.Request, actor, person, action, args string, f func(ctx context.Context) error) {
	start := c.opts.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), checkpointTimeout)
	defer cancel()
	err := f(ctx)
	outcome, errText := audit.OutcomeOK, ""
	if err != nil {
		outcome, errText = audit.OutcomeError, err.Error()
	}
	c.recordFor(r, actor, person, "console."+action, args, outcome, errText, start)
	switch {
	case errors.Is(err, ErrNotFound):
		writeJSONError(w, http.StatusNotFound, err.Error()+"; GET /console/api/checkpoints lists them")
	case errors.Is(err, ErrConflict):
		writeJSONError(w, http.StatusConflict, err.Error())
	case err != nil:
		c.log.Error("console checkpoint action failed", zap.String("action", action), zap.Error(err))
		writeJSONError(w, http.StatusBadGateway, err.Error())
	default:
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "action": action})
	}
}
