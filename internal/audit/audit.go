// Package audit is the record of the operator's activity log: one entry per tool call,
// link use or operator action. Every layer writes entries; the console stores and
// displays them.
package audit

import "time"

// Entry is one line of the audit log: a tool call, a download, or an operator action.
type Entry struct {
	Time time.Time `json:"time"`
	// Client names who acted: the OAuth client's name, "API key", "console" for the
	// operator, "link" for an anonymous download.
	Client   string `json:"client"`
	ClientID string `json:"client_id,omitempty"`
	// Subject is the sign-in (OAuth grant id) the call was made with.
	Subject string `json:"subject,omitempty"`
	// Person is whose sandbox was used; "" for the operator's.
	Person string `json:"person"`
	Remote string `json:"remote,omitempty"`
	Tool   string `json:"tool"`
	// Args are the arguments as compact JSON, long strings clipped.
	Args string `json:"args,omitempty"`
	// Outcome is ok, nonzero (the command exited non-zero), timeout, cancelled, error,
	// denied, or refused (the command ended well but the egress proxy refused it
	// hosts, which Error names).
	Outcome    string  `json:"outcome"`
	ExitCode   *int    `json:"exit_code,omitempty"`
	DurationMS float64 `json:"duration_ms"`
	Bytes      int64   `json:"bytes,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// Outcomes of an [Entry].
const (
	OutcomeOK        = "ok"
	OutcomeNonZero   = "nonzero"
	OutcomeTimeout   = "timeout"
	OutcomeCancelled = "cancelled"
	OutcomeError     = "error"
	OutcomeDenied    = "denied"
	OutcomeRefused   = "refused"
)

// Recorder takes entries into the activity log.
type Recorder interface {
	Record(Entry)
}
