package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
)

// With `person` lines every person has a sandbox of their own; the operator sees them
// all at GET /console/api/sandboxes and acts on one at
// POST /console/api/sandboxes/{person}/stop|start|restart|recreate. The operator's own
// sandbox is listed with person "" and addressed as "-". The sandbox of a person the
// configuration no longer names is listed with removed: true until the operator
// deletes it: POST .../{person}/delete?volume=keep|delete.

// Sandbox actions beyond restart and recreate.
const (
	actStop   = "stop"
	actStart  = "start"
	actDelete = "delete"
)

// The actions Sandboxes.Act is given to delete a removed person's sandbox: the
// container alone, or the container and its volume.
const (
	ActDelete       = "delete"
	ActDeleteVolume = "delete_volume"
)

// ErrConflict is what Sandboxes.Act returns (wrapped, with the reason) for an action
// the sandbox's state does not allow: 409.
var ErrConflict = errors.New("not possible now")

// errVolumeChoice: deleting needs the operator to say what becomes of the volume.
var errVolumeChoice = errors.New("say what becomes of the volume (everything under /sandbox): volume=keep keeps it (a person added again with this name gets it back), volume=delete deletes it for good")

// OperatorPath is how the operator's own sandbox is named in a sandboxes path.
const OperatorPath = "-"

// SandboxInfo is one sandbox as GET /console/api/sandboxes lists it.
type SandboxInfo struct {
	Person      string  `json:"person"` // "" for the operator's
	Container   string  `json:"container"`
	Engine      string  `json:"engine,omitempty"`  // its engine line's name, once placed
	Node        string  `json:"node,omitempty"`    // the cluster node it runs on (a Kubernetes engine)
	Runtime     string  `json:"runtime,omitempty"` // the container runtime (runc, runsc for gVisor); "" the engine's default
	State       string  `json:"state"`             // running, exited, missing, ...
	CPU         float64 `json:"cpu"`               // CPUs in use
	Memory      int64   `json:"memory"`
	MemoryLimit int64   `json:"memory_limit"`
	DiskUsed    int64   `json:"disk_used"` // bytes under /sandbox; -1 when not known
	Jobs        int     `json:"jobs"`      // running
	// Removed marks the sandbox of a person the configuration no longer names: it was
	// stopped when the configuration was loaded and can be stopped or deleted only.
	Removed bool `json:"removed,omitempty"`
	// Agent tells whether commands go through the agent in the container (or, on the
	// fallback, one exec each) and why not; zero for a sandbox this process has not
	// used yet (the next command starts the agent) and for a removed person's.
	Agent Agent `json:"agent"`
	// Egress is the state of the sandbox's egress proxy: EgressListening,
	// EgressOffline, EgressStopped, EgressNotStarted or EgressNone; "" for a removed
	// person's sandbox.
	Egress string `json:"egress,omitempty"`
	// StoppedBy says who stopped a sandbox that does not run: StoppedIdle or
	// StoppedOperator; "" when neither is known (it exited, or was stopped outside).
	StoppedBy string `json:"stopped_by,omitempty"`
	// Processes is what a stop does with the running processes under keep_processes:
	// ProcessesKept (saved and restored at the next start) or ProcessesSaved (a stop
	// saved them, KeptBytes about their size); "" when keep_processes is off, or when
	// it is on but cannot work here, NoKeep then saying why.
	Processes string `json:"processes,omitempty"`
	KeptBytes int64  `json:"kept_bytes,omitempty"`
	NoKeep    string `json:"no_keep,omitempty"`
	// LastActivity is the newest entry of the activity log made in this sandbox (a
	// tool call, download or upload; not the console's sign-ins and actions).
	LastActivity time.Time `json:"last_activity,omitzero"`
	Error        string    `json:"error,omitempty"` // why the status is not complete
	// NoUsage: the engine gives no usage figures (SandboxStatus.NoUsage); the JSON
	// then has no cpu and memory but "no_usage": [NoUsageText].
	NoUsage bool `json:"-"`
}

// MarshalJSON leaves out the usage figures the engine does not give (NoUsage).
func (s SandboxInfo) MarshalJSON() ([]byte, error) {
	type plain SandboxInfo
	if !s.NoUsage {
		return json.Marshal(plain(s))
	}
	return json.Marshal(struct {
		plain
		CPU     *float64 `json:"cpu,omitempty"`
		Memory  *int64   `json:"memory,omitempty"`
		NoUsage string   `json:"no_usage"`
	}{plain: plain(s), NoUsage: NoUsageText})
}

// The states of a sandbox's egress proxy (SandboxInfo.Egress).
const (
	// EgressListening: the proxy listens in the running sandbox.
	EgressListening = "listening"
	// EgressOffline: the proxy cannot listen (the agent does not run): the sandbox's
	// commands reach no host at all.
	EgressOffline = "offline"
	// EgressStopped: the sandbox does not run; the proxy listens again when it starts.
	EgressStopped = "stopped"
	// EgressNotStarted: the sandbox runs but this process has not used it yet; its
	// proxy starts with its next call.
	EgressNotStarted = "not started"
	// EgressNone: the site has no egress block; the sandbox's network is as configured.
	EgressNone = "none"
)

// What a stop does with a sandbox's processes (SandboxInfo.Processes).
const (
	ProcessesKept  = "kept"
	ProcessesSaved = "saved"
)

// Who stopped a sandbox (SandboxInfo.StoppedBy).
const (
	// StoppedIdle: idle_stop stopped it; the next call starts it again.
	StoppedIdle = "idle"
	// StoppedOperator: the operator's Stop (console or API); the next call or Start
	// starts it again.
	StoppedOperator = "operator"
)

// Sandboxes are the sandboxes of a site with people.
type Sandboxes interface {
	List(ctx context.Context) ([]SandboxInfo, error)
	// People are the configured people's names, in config order.
	People() []string
	// Removed are the names of people no longer configured whose sandbox exists.
	Removed(ctx context.Context) []string
	// Act stops, starts, restarts or recreates person's sandbox ("" for the
	// operator's), or deletes a removed person's (ActDelete, ActDeleteVolume); it
	// returns ErrNotFound for a person neither configured nor removed with a sandbox.
	Act(ctx context.Context, person, action string) error
	// Warm is the site's warm sandboxes (warm_sandboxes); nil when it keeps none.
	Warm() *WarmInfo
}

// WarmInfo is the state of a site's warm sandboxes: containers made and started ahead
// of need, nobody's, one of which a new person's first call takes.
type WarmInfo struct {
	Wanted int    `json:"wanted"`           // warm_sandboxes: how many are kept ready
	Ready  int    `json:"ready"`            // ready to be taken now
	Making int    `json:"making"`           // being made
	Taken  int64  `json:"taken"`            // taken by new people since the pool was made
	Engine string `json:"engine,omitempty"` // the engine line they are made on
}

// serveSandboxes answers GET /console/api/sandboxes and POST .../{person}/{action}.
func (c *Console) serveSandboxes(w http.ResponseWriter, r *http.Request, actor, method, rest string) {
	if c.opts.Sandboxes == nil {
		writeJSONError(w, http.StatusNotFound, "this site has no person lines: its one sandbox is at /console/api/sandbox")
		return
	}
	switch {
	case method == http.MethodGet && rest == "":
		list, err := c.sandboxes(r.Context())
		if err != nil {
			writeJSONError(w, http.StatusBadGateway, "reading the sandboxes: "+err.Error())
			return
		}
		body := map[string]any{"sandboxes": list}
		if warm := c.opts.Sandboxes.Warm(); warm != nil {
			body["warm"] = warm
		}
		writeJSON(w, http.StatusOK, body)
	case method == http.MethodPost:
		person, action, ok := strings.Cut(rest, "/")
		switch action {
		case actStop, actStart, actRestart, actRecreate, actDelete:
		default:
			ok = false
		}
		if !ok || person == "" {
			writeJSONError(w, http.StatusNotFound, "use POST /console/api/sandboxes/{person}/stop, start, restart, recreate or delete ("+OperatorPath+" for the operator's own)")
			return
		}
		c.apiAct(w, r, actor, "sandbox_"+action, person)
	default:
		writeJSONError(w, http.StatusNotFound, "use GET /console/api/sandboxes, or POST /console/api/sandboxes/{person}/{action}")
	}
}

// sandboxes lists every sandbox for the API and the overview, each with its last
// activity and its error clipped.
func (c *Console) sandboxes(ctx context.Context) ([]SandboxInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := c.opts.Sandboxes.List(ctx)
	stops := c.operatorStops()
	for i := range list {
		if e := c.opts.Audit.Query(Filter{Person: personPath(list[i].Person), Limit: 1, sandboxOnly: true}); len(e) == 1 {
			list[i].LastActivity = e[0].Time
		}
		// The operator stopped it when their Stop is newer than its last use.
		if at, ok := stops[personPath(list[i].Person)]; ok && list[i].StoppedBy == "" && list[i].State != "running" && at.After(list[i].LastActivity) {
			list[i].StoppedBy = StoppedOperator
		}
		list[i].Error = clip(maxAgentReason, list[i].Error)
		list[i].Agent.Reason = clip(maxAgentReason, list[i].Agent.Reason)
		list[i].Agent.DirectReason = clip(maxAgentReason, list[i].Agent.DirectReason)
	}
	return list, err
}

// operatorStops are the newest times the operator stopped each sandbox, by person
// path ("-" the operator's), from the activity log.
func (c *Console) operatorStops() map[string]time.Time {
	out := map[string]time.Time{}
	for _, e := range c.opts.Audit.Query(Filter{Tool: "console." + sbStop, Outcome: audit.OutcomeOK}) {
		var args struct {
			Person string `json:"person"`
		}
		if json.Unmarshal([]byte(e.Args), &args) != nil {
			continue
		}
		if _, seen := out[args.Person]; !seen {
			out[args.Person] = e.Time
		}
	}
	return out
}

// personPath is how person ("" for the operator) is named in paths, forms and filters.
func personPath(person string) string {
	if person == "" {
		return OperatorPath
	}
	return person
}

// isPerson reports whether p names a configured person or, as "-", the operator.
func (c *Console) isPerson(p string) bool {
	return p == OperatorPath || slices.Contains(c.opts.Sandboxes.People(), p)
}

// actSandbox runs a sandbox action on a person's sandbox; args is what the audit log
// records. Deleting takes the operator's choice for the volume, volume=keep or
// volume=delete.
func (c *Console) actSandbox(ctx context.Context, action, person, volume string) (args string, err error) {
	args = `{"person":` + strconv.Quote(person) + `}`
	if person == OperatorPath {
		person = ""
	}
	act := strings.TrimPrefix(action, "sandbox_")
	if act == actDelete {
		switch volume {
		case "keep":
			act = ActDelete
		case "delete":
			act = ActDeleteVolume
		default:
			return args, errVolumeChoice
		}
		args = `{"person":` + strconv.Quote(person) + `,"volume":` + strconv.Quote(volume) + `}`
	}
	return args, c.opts.Sandboxes.Act(ctx, person, act)
}
