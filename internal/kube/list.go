package kube

import (
	"context"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// selectorFor is the label selector that finds the records with label ("key" or
// "key=value"; "" all of ours) on the API server. A label that is no valid
// Kubernetes label is only in the record, so it selects all of ours, and the list
// filters them itself.
func selectorFor(label string) string {
	sel := labelManagedBy + "=" + managedByValue
	k, v, hasValue := strings.Cut(label, "=")
	switch {
	case label == "":
	case hasValue && validLabel(k, v):
		sel += "," + k + "=" + v
	case !hasValue && len(validation.IsQualifiedName(k)) == 0:
		sel += "," + k
	}
	return sel
}

// hasLabel reports whether labels carry label ("key" or "key=value"; "" any).
func hasLabel(labels map[string]string, label string) bool {
	if label == "" {
		return true
	}
	k, v, hasValue := strings.Cut(label, "=")
	have, ok := labels[k]
	return ok && (!hasValue || have == v)
}

// ListBoxes lists the containers of the namespace this engine made that carry label,
// newest first: their records, and their pods' states.
func (c *Client) ListBoxes(ctx context.Context, label string) ([]boxapi.BoxSummary, error) {
	cms, err := c.core.ConfigMaps(c.ns).List(ctx, metav1.ListOptions{LabelSelector: selectorFor(label)})
	if err != nil {
		return nil, c.apiErr(err, "list", "configmaps", "listing containers")
	}
	pods, err := c.core.Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedByValue})
	if err != nil {
		return nil, c.apiErr(err, "list", "pods", "listing containers")
	}
	byName := make(map[string]*v1.Pod, len(pods.Items))
	for i := range pods.Items {
		byName[pods.Items[i].Name] = &pods.Items[i]
	}
	out := []boxapi.BoxSummary{}
	for i := range cms.Items {
		cm := &cms.Items[i]
		r, err := readRecord(cm)
		if err != nil || !hasLabel(r.Labels, label) {
			continue // not a container of ours, or damaged (inspect says why); or not asked for
		}
		out = append(out, boxapi.BoxSummary{ID: string(cm.UID), Name: cm.Name, Labels: r.Labels,
			Status: boxState(byName[cm.Name]).Status, Created: cm.CreationTimestamp.UTC()})
	}
	slices.SortFunc(out, func(a, b boxapi.BoxSummary) int { return b.Created.Compare(a.Created) })
	return out, nil
}
