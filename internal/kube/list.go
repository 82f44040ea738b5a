package kube

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// listFilter is a container list's filters: the part the API server can apply (a
// label selector) and the part applied here, which holds all of them (labels that are
// no valid Kubernetes labels are only in the record).
type listFilter struct {
	selector string            // label selector for the ConfigMaps
	labels   map[string]string // label=key=value ("" value with hasOnly: label=key)
	hasOnly  map[string]bool   // label=key
	names    []*regexp.Regexp  // name=...: Docker matches names by regular expression
	ids      []string          // id=... prefixes
	statuses []string          // status=running|exited|created|restarting
}

// translateFilters turns Docker's list filters into a listFilter. Filters it does not
// know are refused, as Docker does.
func translateFilters(f filters.Args) (listFilter, error) {
	lf := listFilter{labels: map[string]string{}, hasOnly: map[string]bool{}}
	sel := []string{labelManagedBy + "=" + managedByValue}
	for _, key := range f.Keys() {
		switch key {
		case "label", "name", "id", "status":
		default:
			return lf, fmt.Errorf("container list filter %q is not supported on a Kubernetes engine (label, name, id, status are): %w", key, cerrdefs.ErrInvalidArgument)
		}
	}
	labels := f.Get("label")
	slices.Sort(labels)
	for _, l := range labels {
		k, v, hasValue := strings.Cut(l, "=")
		if hasValue {
			lf.labels[k] = v
			if validLabel(k, v) {
				sel = append(sel, k+"="+v)
			}
		} else {
			lf.hasOnly[k] = true
			if len(validation.IsQualifiedName(k)) == 0 {
				sel = append(sel, k)
			}
		}
	}
	for _, n := range f.Get("name") {
		re, err := regexp.Compile(n)
		if err != nil {
			return lf, fmt.Errorf("container list filter name=%q is not a valid regular expression: %v: %w", n, err, cerrdefs.ErrInvalidArgument)
		}
		lf.names = append(lf.names, re)
	}
	lf.ids = f.Get("id")
	lf.statuses = f.Get("status")
	lf.selector = strings.Join(sel, ",")
	return lf, nil
}

// match reports whether a container named name with ID id, labels and state passes.
func (lf listFilter) match(name, id string, labels map[string]string, state container.ContainerState) bool {
	for k, v := range lf.labels {
		if have, ok := labels[k]; !ok || have != v {
			return false
		}
	}
	for k := range lf.hasOnly {
		if _, ok := labels[k]; !ok {
			return false
		}
	}
	if len(lf.names) > 0 && !slices.ContainsFunc(lf.names, func(re *regexp.Regexp) bool {
		return re.MatchString("/"+name) || re.MatchString(name)
	}) {
		return false
	}
	if len(lf.ids) > 0 && !slices.ContainsFunc(lf.ids, func(p string) bool { return p != "" && strings.HasPrefix(id, p) }) {
		return false
	}
	if len(lf.statuses) > 0 && !slices.Contains(lf.statuses, string(state)) {
		return false
	}
	return true
}

func (c *Client) ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error) {
	lf, err := translateFilters(options.Filters)
	if err != nil {
		return nil, err
	}
	cms, err := c.core.ConfigMaps(c.ns).List(ctx, metav1.ListOptions{LabelSelector: lf.selector})
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
	now := time.Now()
	out := []container.Summary{}
	for i := range cms.Items {
		cm := &cms.Items[i]
		r, err := readRecord(cm)
		if err != nil {
			continue // not a container of ours, or damaged: inspect says why
		}
		st := dockerState(byName[cm.Name])
		if !options.All && !st.Running {
			continue
		}
		if !lf.match(cm.Name, string(cm.UID), r.Labels, st.Status) {
			continue
		}
		s := container.Summary{
			ID: string(cm.UID), Names: []string{"/" + cm.Name}, Image: r.Image, ImageID: r.Image,
			Command: strings.Join(append(slices.Clone(r.Entrypoint), r.Cmd...), " "),
			Created: cm.CreationTimestamp.Unix(), Labels: r.Labels, State: st.Status,
			Status: statusText(st, now), Mounts: r.mountPoints(),
		}
		s.HostConfig.NetworkMode = r.NetworkMode
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b container.Summary) int { return int(b.Created - a.Created) })
	if options.Limit > 0 && len(out) > options.Limit {
		out = out[:options.Limit]
	}
	return out, nil
}
