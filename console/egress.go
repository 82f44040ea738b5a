package console

import (
	"context"
	"net/http"
	"slices"
	"strings"
)

// GET /console/api/egress lists what the egress proxies of the site's sandboxes
// refused, newest first, each with its person (?person= keeps one person's; "-" is
// the operator's), and beside them the hosts people allowed always when asked
// (approvals, oldest first); DELETE /console/api/egress/approvals/{id} revokes one,
// which applies to the next connection.

// maxOverviewRefusals bounds the refusals the overview shows.
const maxOverviewRefusals = 50

// egressRefusals returns the refusals, newest first; person "-" means the operator's,
// "" everyone's.
func (c *Console) egressRefusals(ctx context.Context, person string) ([]EgressRefusal, error) {
	list, err := c.opts.Egress.Refusals(ctx)
	if person != "" {
		if person == OperatorPath {
			person = ""
		}
		list = slices.DeleteFunc(list, func(r EgressRefusal) bool { return r.Person != person })
	}
	slices.SortFunc(list, func(a, b EgressRefusal) int {
		if c := b.LastAt.Compare(a.LastAt); c != 0 {
			return c
		}
		if c := strings.Compare(a.Person, b.Person); c != 0 {
			return c
		}
		return strings.Compare(a.Host, b.Host)
	})
	if list == nil {
		list = []EgressRefusal{}
	}
	return list, err
}

func (c *Console) serveEgress(w http.ResponseWriter, r *http.Request) {
	if c.opts.Egress == nil {
		writeJSONError(w, http.StatusNotFound, "this site has no egress block: its sandboxes' network is as configured, and no proxy refuses anything")
		return
	}
	list, err := c.egressRefusals(r.Context(), r.URL.Query().Get("person"))
	if err != nil {
		writeJSONError(w, http.StatusInternalServerError, "reading the egress refusals: "+err.Error())
		return
	}
	approvals, err := c.egressApprovals(r.Context(), r.URL.Query().Get("person"))
	if err != nil {
		writeJSONError(w, http.StatusInternalServerError, "reading the egress approvals: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"refusals": list, "approvals": approvals})
}

// egressApprovals returns the approvals, oldest first; person as in egressRefusals.
func (c *Console) egressApprovals(ctx context.Context, person string) ([]EgressApproval, error) {
	out := []EgressApproval{}
	ap, ok := c.opts.Egress.(EgressApprovals)
	if !ok {
		return out, nil
	}
	list, err := ap.Approvals(ctx)
	if err != nil {
		return out, err
	}
	for _, a := range list {
		if person == "" || a.Person == person || person == OperatorPath && a.Person == "" {
			out = append(out, a)
		}
	}
	return out, nil
}
