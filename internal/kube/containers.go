package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
)

// Bounds of the waits: a start without a deadline in its context waits startWait for
// the pod to run; a stop or remove waits goneWait beyond the grace period.
const (
	startWait = 5 * time.Minute
	goneWait  = 30 * time.Second
	pollEvery = 250 * time.Millisecond
	// readySettle is how long a started container must stay ready for a start to
	// succeed.
	readySettle = 1500 * time.Millisecond
)

var uidLike = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// lookup finds the ConfigMap of the container ref (its name or its ID) and reads its
// record. A missing container is cerrdefs.ErrNotFound.
func (c *Client) lookup(ctx context.Context, ref string) (*v1.ConfigMap, record, error) {
	ref = strings.TrimPrefix(ref, "/")
	var cm *v1.ConfigMap
	if dnsLabel.MatchString(ref) {
		got, err := c.core.ConfigMaps(c.ns).Get(ctx, ref, metav1.GetOptions{})
		switch {
		case err == nil:
			cm = got
		case !apierrors.IsNotFound(err):
			return nil, record{}, c.apiErr(err, "get", "configmaps", "reading container "+ref)
		}
	}
	if cm == nil && uidLike.MatchString(ref) {
		list, err := c.core.ConfigMaps(c.ns).List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedByValue})
		if err != nil {
			return nil, record{}, c.apiErr(err, "list", "configmaps", "finding container "+ref)
		}
		for i := range list.Items {
			if string(list.Items[i].UID) == ref {
				cm = &list.Items[i]
				break
			}
		}
	}
	if cm == nil {
		return nil, record{}, notFound("container", ref)
	}
	r, err := readRecord(cm)
	if err != nil {
		return nil, record{}, fmt.Errorf("kubernetes engine %s: %w", c.cfg.Name, err)
	}
	return cm, r, nil
}

// pod is the pod of container name, nil when it has none.
func (c *Client) pod(ctx context.Context, name string) (*v1.Pod, error) {
	p, err := c.core.Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, c.apiErr(err, "get", "pods", "reading the pod of container "+name)
	}
	if !ownPod(p, name) {
		return nil, c.foreignPod(name)
	}
	c.evictionReason(ctx, p)
	return p, nil
}

// evictionReason gives an ended pod without a reason the one of the kubelet's Evicted
// event, if it has one. The kubelet marks a pod it evicts Failed with reason Evicted,
// but a main process that exits 0 on the kill (the sandbox's does, on TERM) leaves it
// Succeeded without reason or message: the event is then the only record of why.
// The account may lack the right to list events: the pod is then left as it is.
func (c *Client) evictionReason(ctx context.Context, p *v1.Pod) {
	if p.DeletionTimestamp != nil || p.Status.Reason != "" || (p.Status.Phase != v1.PodFailed && p.Status.Phase != v1.PodSucceeded) {
		return
	}
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.uid", string(p.UID)),
		fields.OneTermEqualSelector("reason", evictedReason))
	list, err := c.core.Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: sel.String(), Limit: 10})
	if err != nil || len(list.Items) == 0 {
		return
	}
	p.Status.Reason, p.Status.Message = evictedReason, list.Items[len(list.Items)-1].Message
}

// foreignPod is the error of a pod named as container name's that the engine did not
// make.
func (c *Client) foreignPod(name string) error {
	return fmt.Errorf("kubernetes engine %s: pod %s in namespace %s was not made by this engine for container %s (it lacks the labels %s=%s and %s=%s), so it is left alone: delete or rename that pod, or give the engine a namespace of its own: %w",
		c.cfg.Name, name, c.ns, name, labelManagedBy, managedByValue, labelContainer, name, cerrdefs.ErrConflict)
}

// ownPod reports whether p is the pod this engine made for container name: a pod of
// that name made by anything else (another workload in the namespace) is never taken
// for the container's, started, stopped or removed.
func ownPod(p *v1.Pod, name string) bool { return ownMeta(p.ObjectMeta, name) }

// OwnerLabels are the labels by which the engine knows an object (a pod, a claim, a
// policy) as the one it made for container name.
func OwnerLabels(name string) map[string]string {
	return map[string]string{labelManagedBy: managedByValue, labelContainer: name}
}

// ownMeta reports whether an object is one the engine made for container name.
func ownMeta(m metav1.ObjectMeta, name string) bool {
	return m.Labels[labelManagedBy] == managedByValue && m.Labels[labelContainer] == name
}

// CreateBox records container name as sp says, in a ConfigMap of its name, and makes
// the claims of the volumes it mounts; its pod is made when it starts.
func (c *Client) CreateBox(ctx context.Context, name string, sp boxapi.BoxSpec) (string, []string, error) {
	if why := validName("container", name); why != "" {
		return "", nil, fmt.Errorf("kubernetes engine %s: %s: %w", c.cfg.Name, why, cerrdefs.ErrInvalidArgument)
	}
	r, err := newRecord(sp)
	if err != nil {
		return "", nil, fmt.Errorf("kubernetes engine %s: creating container %s: %w: %w", c.cfg.Name, name, err, cerrdefs.ErrInvalidArgument)
	}
	cm, err := recordConfigMap(name, r)
	if err != nil {
		return "", nil, fmt.Errorf("kubernetes engine %s: creating container %s: %w", c.cfg.Name, name, err)
	}
	// Docker makes the named volumes a container mounts when they are missing.
	for _, m := range r.Mounts {
		if err := c.CreateVolume(ctx, m.Volume, nil); err != nil {
			return "", nil, err
		}
	}
	got, err := c.core.ConfigMaps(c.ns).Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return "", nil, fmt.Errorf("kubernetes engine %s: the container name %q is already in use (config map %s exists); remove it first or use another name: %w",
			c.cfg.Name, name, name, cerrdefs.ErrConflict)
	}
	if err != nil {
		return "", nil, c.apiErr(err, "create", "configmaps", "creating container "+name)
	}
	return string(got.UID), nil, nil
}

// InspectBox tells of container name (or ID): its record, and its pod's state.
func (c *Client) InspectBox(ctx context.Context, name string) (boxapi.Box, error) {
	cm, r, err := c.lookup(ctx, name)
	if err != nil {
		return boxapi.Box{}, err
	}
	p, err := c.pod(ctx, cm.Name)
	if err != nil {
		return boxapi.Box{}, err
	}
	return boxOf(cm, r, p), nil
}

// boxOf is the container cm records, running as p (nil: not).
func boxOf(cm *v1.ConfigMap, r record, p *v1.Pod) boxapi.Box {
	b := boxapi.Box{
		ID: string(cm.UID), Name: cm.Name, Created: cm.CreationTimestamp.UTC(),
		ImageID: r.Image, Spec: r.spec(), State: boxState(p),
	}
	if p != nil {
		if cs := sandboxStatus(p); cs != nil {
			b.RestartCount = int(cs.RestartCount)
		}
		b.Node = p.Spec.NodeName
	}
	return b
}

// NodeName is the node the pod of container name runs on ("" when it has no pod or is
// not scheduled yet): what the console shows beside a sandbox on this engine.
func (c *Client) NodeName(ctx context.Context, name string) (string, error) {
	cm, _, err := c.lookup(ctx, name)
	if err != nil {
		return "", err
	}
	p, err := c.pod(ctx, cm.Name)
	if err != nil || p == nil {
		return "", err
	}
	return p.Spec.NodeName, nil
}

// StartBox makes the pod of container name and waits until it runs.
func (c *Client) StartBox(ctx context.Context, name string) error {
	cm, r, err := c.lookup(ctx, name)
	if err != nil {
		return err
	}
	name = cm.Name
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startWait)
		defer cancel()
	}
	for {
		p, err := c.pod(ctx, name)
		if err != nil {
			return err
		}
		if p != nil && p.DeletionTimestamp == nil && (p.Status.Phase == v1.PodFailed || p.Status.Phase == v1.PodSucceeded) {
			// Ended for good (evicted, its node shut down): the object stays until it is
			// collected. Starting the container makes a new pod, as Docker starts an
			// exited container.
			zero, uid := int64(0), p.UID
			err := c.core.Pods(c.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return c.apiErr(err, "delete", "pods", "replacing the ended pod of container "+name)
			}
			if err := c.waitPodGone(ctx, name, uid); err != nil {
				return err
			}
			continue
		}
		if p != nil && p.DeletionTimestamp != nil {
			// Still stopping: start once it is gone, as Docker would after the stop.
			if err := c.waitPodGone(ctx, name, p.UID); err != nil {
				return err
			}
			continue
		}
		if p == nil {
			if np := policyFor(name, r); np != nil {
				if err := c.ensurePolicy(ctx, name, np); err != nil {
					return err
				}
			}
			spec, err := podFor(name, r, c.cfg)
			if err != nil {
				return fmt.Errorf("kubernetes engine %s: starting container %s: %w", c.cfg.Name, name, err)
			}
			p, err = c.core.Pods(c.ns).Create(ctx, spec, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // someone else started it
			}
			if err != nil {
				c.cleanupStart(name, "")
				return c.apiErr(err, "create", "pods", "starting container "+name)
			}
		}
		return c.waitReady(ctx, name, p)
	}
}

// ensurePolicy makes the network policy np of container name. One of that name that
// exists must be the engine's for the container: another one (another workload's)
// would leave the pod without the isolation its network mode asks for.
func (c *Client) ensurePolicy(ctx context.Context, name string, np *networkingv1.NetworkPolicy) error {
	_, err := c.net.NetworkPolicies(c.ns).Create(ctx, np, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return c.apiErr(err, "create", "networkpolicies", "creating network policy "+np.Name+" of container "+name)
	}
	got, err := c.net.NetworkPolicies(c.ns).Get(ctx, np.Name, metav1.GetOptions{})
	if err != nil {
		return c.apiErr(err, "get", "networkpolicies", "reading network policy "+np.Name+" of container "+name)
	}
	if !ownMeta(got.ObjectMeta, name) {
		return fmt.Errorf("kubernetes engine %s: network policy %s in namespace %s was not made by this engine for container %s, so the container's own cannot be made and it is not started: delete or rename that policy, or give the engine a namespace of its own: %w",
			c.cfg.Name, np.Name, c.ns, name, cerrdefs.ErrConflict)
	}
	return nil
}

// deletePolicies deletes the network policies the engine made for container name,
// leaving any other of those names alone.
func (c *Client) deletePolicies(ctx context.Context, name string) error {
	for _, n := range policyNames(name) {
		np, err := c.net.NetworkPolicies(c.ns).Get(ctx, n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return c.apiErr(err, "get", "networkpolicies", "removing the network policies of container "+name)
		}
		if !ownMeta(np.ObjectMeta, name) {
			continue
		}
		uid := np.UID
		err = c.net.NetworkPolicies(c.ns).Delete(ctx, n, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return c.apiErr(err, "delete", "networkpolicies", "removing the network policies of container "+name)
		}
	}
	return nil
}

// waitReady waits until the pod of container name runs and is ready; a pod that will
// not (a terminal reason, or the deadline) is deleted and the error says why.
func (c *Client) waitReady(ctx context.Context, name string, p *v1.Pod) error {
	uid := p.UID
	var seen *metav1.Time // when the container we saw ready started
	w := c.watchPod(ctx, name)
	defer w.stop()
	for {
		if podReady(p) {
			// Ready twice, a moment apart, without a restart: a main process that
			// exits at once would otherwise pass for started.
			started := sandboxStatus(p).State.Running.StartedAt
			if seen != nil && seen.Equal(&started) {
				return nil
			}
			seen = &started
		} else {
			seen = nil
		}
		if why := podFailure(p); why != "" {
			c.cleanupStart(name, uid)
			return fmt.Errorf("kubernetes engine %s: starting container %s: %s; the pod was deleted (the container stays created): %w",
				c.cfg.Name, name, why, cerrdefs.ErrFailedPrecondition)
		}
		// Seen ready, the pod must stay so for readySettle whatever changes meanwhile;
		// before that, a change of it (the watch) ends the wait at once.
		waited := true
		if seen != nil {
			select {
			case <-ctx.Done():
				waited = false
			case <-time.After(readySettle):
			}
		} else {
			waited = w.sleep(ctx, pollEvery)
		}
		if !waited {
			c.cleanupStart(name, uid)
			return fmt.Errorf("kubernetes engine %s: starting container %s: the pod was not running in time (phase %s%s); it was deleted: %w",
				c.cfg.Name, name, p.Status.Phase, waitingText(p), ctx.Err())
		}
		got, err := c.pod(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return err
		}
		if got == nil || got.UID != uid {
			return fmt.Errorf("kubernetes engine %s: starting container %s: the pod was deleted while it started (stopped or removed meanwhile)", c.cfg.Name, name)
		}
		p = got
	}
}

// waitingText says what the pod's container waits for, for an error.
func waitingText(p *v1.Pod) string {
	if cs := sandboxStatus(p); cs != nil && cs.State.Waiting != nil {
		return bounded(", container waiting: " + cs.State.Waiting.Reason + " " + cs.State.Waiting.Message)
	}
	for _, cond := range p.Status.Conditions {
		if cond.Status == v1.ConditionFalse && cond.Message != "" {
			return bounded(", " + string(cond.Type) + ": " + cond.Message)
		}
	}
	return ""
}

// cleanupStart deletes what a failed start made: the pod with uid (none when uid is
// "": the pod was not made) and the network policies. It outlives the caller's
// context.
func (c *Client) cleanupStart(name string, uid types.UID) {
	ctx, cancel := context.WithTimeout(context.Background(), goneWait)
	defer cancel()
	_ = c.deletePolicies(ctx, name)
	if uid == "" {
		return
	}
	zero := int64(0)
	_ = c.core.Pods(c.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	_ = c.waitPodGone(ctx, name, uid)
}

// waitPodGone waits until the pod name (with uid, when set) no longer exists.
func (c *Client) waitPodGone(ctx context.Context, name string, uid types.UID) error {
	w := c.watchPod(ctx, name)
	defer w.stop()
	for {
		p, err := c.pod(ctx, name)
		if err != nil {
			return err
		}
		if p == nil || (uid != "" && p.UID != uid) {
			return nil
		}
		if !w.sleep(ctx, pollEvery) {
			return fmt.Errorf("kubernetes engine %s: the pod of container %s is still terminating: %w", c.cfg.Name, name, ctx.Err())
		}
	}
}

// StopBox deletes the pod of container name, its processes given grace (whole
// seconds, rounded up) to end, and waits until it is gone.
func (c *Client) StopBox(ctx context.Context, name string, grace time.Duration) error {
	return c.stop(ctx, name, graceSeconds(grace), false)
}

// graceSeconds is a pod's termination grace for grace: whole seconds, rounded up.
func graceSeconds(grace time.Duration) int64 {
	return int64((max(grace, 0) + time.Second - 1) / time.Second)
}

// containerPod looks container name (or ID) up and returns its record's ConfigMap
// and its pod, nil when there is none.
func (c *Client) containerPod(ctx context.Context, name string) (*v1.ConfigMap, *v1.Pod, error) {
	cm, _, err := c.lookup(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	p, err := c.pod(ctx, cm.Name)
	return cm, p, err
}

// stop deletes the pod of container name with grace seconds and waits until it is
// gone; the ConfigMap and the claims stay. mustRun makes a container without a pod a
// conflict (Docker's kill of a stopped container).
func (c *Client) stop(ctx context.Context, name string, grace int64, mustRun bool) error {
	cm, p, err := c.containerPod(ctx, name)
	if err != nil {
		return err
	}
	name = cm.Name
	if p != nil {
		uid := p.UID
		err = c.core.Pods(c.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
	}
	if p == nil || apierrors.IsNotFound(err) {
		if mustRun {
			return fmt.Errorf("kubernetes engine %s: container %s is not running: %w", c.cfg.Name, name, cerrdefs.ErrConflict)
		}
		return nil
	}
	if err != nil {
		return c.apiErr(err, "delete", "pods", "stopping container "+name)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Duration(grace)*time.Second+goneWait)
	defer cancel()
	return c.waitPodGone(wctx, name, p.UID)
}

// RestartBox stops the pod of container name as StopBox does and makes it again.
func (c *Client) RestartBox(ctx context.Context, name string, grace time.Duration) error {
	if err := c.StopBox(ctx, name, grace); err != nil {
		return err
	}
	return c.StartBox(ctx, name)
}

// KillBox deletes the pod of container name with no grace; a container without a pod
// is a conflict, as Docker's kill of a stopped container is.
func (c *Client) KillBox(ctx context.Context, name string) error {
	return c.stop(ctx, name, 0, true)
}

// RemoveBox deletes container name's pod (with no grace), network policies and
// record; its claims stay.
func (c *Client) RemoveBox(ctx context.Context, name string) error {
	cm, p, err := c.containerPod(ctx, name)
	if err != nil {
		return err
	}
	name = cm.Name
	if p != nil {
		zero := int64(0)
		uid := p.UID
		if err := c.core.Pods(c.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return c.apiErr(err, "delete", "pods", "removing container "+name)
		}
	}
	if err := c.deletePolicies(ctx, name); err != nil {
		return err
	}
	uid := cm.UID
	err = c.core.ConfigMaps(c.ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return c.apiErr(err, "delete", "configmaps", "removing container "+name)
	}
	if p != nil {
		// A claim is in use until the pod is gone: wait, so that removing the volume
		// next works as on Docker.
		wctx, cancel := context.WithTimeout(ctx, goneWait)
		defer cancel()
		return c.waitPodGone(wctx, name, p.UID)
	}
	return nil
}

// RenameBox is not served: a pod cannot be renamed.
func (c *Client) RenameBox(ctx context.Context, name, to string) error {
	return notImplemented("renaming a container (checkpoints are not supported on a Kubernetes engine)")
}

// UpdateBox records new limits or a restart policy for container name, and gives a
// running pod new memory and CPU limits in place where the cluster can; the warnings
// say what applies only at the pod's next start.
func (c *Client) UpdateBox(ctx context.Context, name string, upd boxapi.BoxUpdate) ([]string, error) {
	var warnings []string
	for attempt := 0; ; attempt++ {
		cm, r, err := c.lookup(ctx, name)
		if err != nil {
			return nil, err
		}
		old := r
		if l := upd.Limits; l != nil {
			if l.Memory != 0 {
				r.Memory = l.Memory
			}
			if l.MemorySwap != 0 {
				r.MemorySwap = l.MemorySwap
			}
			if l.NanoCPUs != 0 {
				r.NanoCPUs = l.NanoCPUs
			}
			r.PidsLimit = l.PidsLimit
		}
		if upd.RestartPolicy != "" {
			r.RestartPolicy = upd.RestartPolicy
		}
		if r.Memory == old.Memory && r.MemorySwap == old.MemorySwap && r.NanoCPUs == old.NanoCPUs &&
			r.PidsLimit == old.PidsLimit && r.RestartPolicy == old.RestartPolicy {
			return warnings, nil
		}
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		cm = cm.DeepCopy()
		cm.Data[recordKey] = string(b)
		_, err = c.core.ConfigMaps(c.ns).Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt < 3 {
			continue // changed meanwhile: read it again
		}
		if err != nil {
			return nil, c.apiErr(err, "update", "configmaps", "updating the limits of container "+cm.Name)
		}
		if r.Memory != old.Memory || r.NanoCPUs != old.NanoCPUs {
			if err := c.resize(ctx, cm.Name, r); err != nil {
				warnings = append(warnings, "Kubernetes engine: the running pod keeps its current limits until its next start (the new limits are recorded): "+err.Error())
			}
		}
		if r.PidsLimit != old.PidsLimit {
			warnings = append(warnings, "Kubernetes engine: a pod's process limit is the node's (the kubelet's podPidsLimit); the recorded limit is not applied")
		}
		return warnings, nil
	}
}

// resize gives the running pod of container name the record's memory and CPU limits
// in place (the pods/resize subresource); nil when there is no running pod. Only
// memory and CPU can change in place: the pod keeps the ephemeral-storage it was made
// with (a changed ephemeral_storage applies to the next pod).
func (c *Client) resize(ctx context.Context, name string, r record) error {
	p, err := c.pod(ctx, name)
	if err != nil || p == nil || p.DeletionTimestamp != nil {
		return err
	}
	p = p.DeepCopy()
	for i := range p.Spec.Containers {
		ct := &p.Spec.Containers[i]
		if ct.Name != containerName {
			continue
		}
		res := resources(r.Memory, r.NanoCPUs, 0)
		if q, ok := ct.Resources.Limits[v1.ResourceEphemeralStorage]; ok {
			res[v1.ResourceEphemeralStorage] = q
		}
		ct.Resources = v1.ResourceRequirements{Limits: res, Requests: res.DeepCopy()}
	}
	if _, err := c.core.Pods(c.ns).UpdateResize(ctx, name, p, metav1.UpdateOptions{}); err != nil {
		return c.apiErr(err, "update", "pods/resize", "resizing the pod of container "+name)
	}
	return nil
}
