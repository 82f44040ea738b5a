package kube

import (
	"fmt"
	"strings"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// statusMax bounds the text taken from a pod's status into an error or a state.
const statusMax = 512

// bounded is s cut to statusMax bytes, on one line.
func bounded(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > statusMax {
		s = s[:statusMax] + "..."
	}
	return s
}

// sandboxStatus is the status of the pod's container, nil when the kubelet has not
// reported it yet.
func sandboxStatus(p *v1.Pod) *v1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == containerName {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// podReady reports whether the pod runs and its container is ready.
func podReady(p *v1.Pod) bool {
	if p == nil || p.DeletionTimestamp != nil || p.Status.Phase != v1.PodRunning {
		return false
	}
	cs := sandboxStatus(p)
	return cs != nil && cs.Ready && cs.State.Running != nil
}

// unschedulableGrace is how long a pod may stay unschedulable before a start gives up.
const unschedulableGrace = 15 * time.Second

// terminalWaits are the reasons a container waits for that will not go away by
// themselves: the pod is given up at once.
var terminalWaits = map[string]string{
	"ErrImageNeverPull":          "the image is not on the node and the pull policy is Never (import it on the nodes, or allow pulls)",
	"ImagePullBackOff":           "the image cannot be pulled (push it to a registry the cluster pulls from, or import it on the nodes)",
	"ErrImagePull":               "the image cannot be pulled (push it to a registry the cluster pulls from, or import it on the nodes)",
	"InvalidImageName":           "the image name is not valid",
	"CreateContainerConfigError": "the container's configuration is refused",
	"CreateContainerError":       "the container cannot be created",
	"RunContainerError":          "the container cannot be run",
	"CrashLoopBackOff":           "the container's main process keeps exiting",
}

// podFailure says why the pod will not become ready ("" while it still may).
func podFailure(p *v1.Pod) string {
	switch p.Status.Phase {
	case v1.PodFailed, v1.PodSucceeded:
		if p.Status.Reason == evictedReason {
			return evictedText(p)
		}
		why := strings.TrimSpace(p.Status.Reason + " " + p.Status.Message)
		if why == "" {
			why = "the cluster gave no reason"
		}
		return bounded(fmt.Sprintf("the pod ended (phase %s): %s", p.Status.Phase, why))
	}
	for _, c := range p.Status.Conditions {
		// The scheduler says so too while a new claim is not bound yet ("unbound
		// immediate PersistentVolumeClaims"), which a slow provisioner takes seconds
		// to do: only a pod unschedulable for unschedulableGrace is given up.
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable &&
			time.Since(c.LastTransitionTime.Time) >= unschedulableGrace {
			msg := bounded("no node can run the pod (Unschedulable): " + c.Message)
			if strings.Contains(c.Message, "Insufficient "+string(v1.ResourceEphemeralStorage)) {
				// A kubelet with localStorageCapacityIsolation off reports no
				// ephemeral-storage at all: no pod that asks for some is ever placed.
				msg += "; the engine's ephemeral_storage (" + quantityText(ephemeralLimit(p)) +
					") is more than a node has free, or the nodes report no ephemeral-storage (kubelet localStorageCapacityIsolation off): lower ephemeral_storage, or remove it"
			}
			return msg
		}
	}
	cs := sandboxStatus(p)
	if cs != nil {
		// The main process exited: on a restart policy of Always it is restarted, but a
		// sandbox's main process never ends by itself.
		t := cs.State.Terminated
		if t == nil && cs.RestartCount > 0 && !cs.Ready {
			t = cs.LastTerminationState.Terminated
		}
		if t != nil {
			// Not t.Message: the termination message is what a program in the pod wrote
			// (its termination-log file, or its log), and never the server's words.
			return bounded(fmt.Sprintf("the container's main process exited (exit code %d, %s): image %s",
				t.ExitCode, reasonToken(t.Reason), p.Spec.Containers[0].Image))
		}
	}
	if cs != nil && cs.State.Waiting != nil {
		w := cs.State.Waiting
		if what, ok := terminalWaits[w.Reason]; ok {
			msg := fmt.Sprintf("%s (%s): image %s: %s", what, w.Reason, p.Spec.Containers[0].Image, w.Message)
			if t := cs.LastTerminationState.Terminated; w.Reason == "CrashLoopBackOff" && t != nil {
				msg += fmt.Sprintf(" (last exit code %d, %s)", t.ExitCode, t.Reason)
			}
			return bounded(msg)
		}
	}
	return ""
}

// reasonToken is a terminated container's reason as the runtime gives it (Error,
// OOMKilled, Completed, ...): one word of letters, else "no reason".
func reasonToken(r string) string {
	if r == "" || len(r) > 64 || strings.IndexFunc(r, func(c rune) bool {
		return !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z')
	}) >= 0 {
		return "no reason"
	}
	return r
}

// evictedReason is the status reason of a pod the kubelet evicted.
const evictedReason = "Evicted"

// evictedText says why the kubelet evicted the pod and what it means for the sandbox.
// Past its ephemeral-storage limit (the kubelet says the pod's "ephemeral local
// storage" or its container's "local ephemeral storage" went over), that limit is the
// engine's ephemeral_storage, told as such; any other eviction (the node short of
// memory or disk) gives the kubelet's words, bounded.
func evictedText(p *v1.Pod) string {
	const after = "; the pod and everything outside /sandbox (installed packages, /tmp, /root) were lost, /sandbox is kept; the next command starts a new pod"
	lim := ephemeralLimit(p)
	m := p.Status.Message
	if lim != nil && (strings.Contains(m, "ephemeral local storage") || strings.Contains(m, "local ephemeral storage")) {
		return "the kubelet evicted the pod: the sandbox wrote more than its ephemeral_storage limit (" + quantityText(lim) +
			") outside /sandbox" + after + "; keep large files (downloads, builds, caches) under /sandbox, or have the operator raise the engine's ephemeral_storage"
	}
	why := bounded(p.Status.Message)
	if why == "" {
		why = "the cluster gave no reason"
	}
	return "the kubelet evicted the pod (" + why + ")" + after
}

// ephemeralLimit is the ephemeral-storage limit of the pod's container, nil when it has
// none.
func ephemeralLimit(p *v1.Pod) *resource.Quantity {
	for _, c := range p.Spec.Containers {
		if c.Name != containerName {
			continue
		}
		if q, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]; ok {
			return &q
		}
	}
	return nil
}

// quantityText is a quantity as the configuration would say it ("none" for nil).
func quantityText(q *resource.Quantity) string {
	if q == nil {
		return "none"
	}
	return q.String()
}

// boxState is the state of a container whose pod is p (nil: no pod).
func boxState(p *v1.Pod) boxapi.BoxState {
	st := boxapi.BoxState{Status: boxapi.StateExited}
	if p == nil {
		return st
	}
	cs := sandboxStatus(p)
	if cs != nil {
		if r := cs.State.Running; r != nil {
			st.StartedAt = r.StartedAt.UTC()
		}
		if t := cs.State.Terminated; t != nil {
			st.ExitCode = int(t.ExitCode)
			st.StartedAt, st.FinishedAt = t.StartedAt.UTC(), t.FinishedAt.UTC()
			st.OOMKilled = t.Reason == "OOMKilled"
		}
	}
	switch {
	case p.DeletionTimestamp != nil:
		// Stopping: it is on its way to "exited".
	case podReady(p):
		st.Status, st.Running = boxapi.StateRunning, true
	case p.Status.Phase == v1.PodFailed || p.Status.Phase == v1.PodSucceeded:
		st.Error = podFailure(p)
	case cs != nil && cs.RestartCount > 0 && cs.State.Running == nil:
		st.Status, st.Restarting = boxapi.StateRestarting, true
		st.Error = podFailure(p)
	default:
		st.Status = boxapi.StateCreated
		st.Error = podFailure(p)
	}
	return st
}

// spec is what a record says of its container.
func (r record) spec() boxapi.BoxSpec {
	sp := boxapi.BoxSpec{
		Image: r.Image, Env: r.Env, WorkingDir: r.WorkingDir, Labels: r.Labels, Runtime: r.Runtime,
		NetworkMode: r.NetworkMode, RestartPolicy: r.RestartPolicy,
		Limits:  boxapi.Limits{Memory: r.Memory, MemorySwap: r.MemorySwap, NanoCPUs: r.NanoCPUs, PidsLimit: r.PidsLimit},
		CapDrop: r.CapDrop, SecurityOpt: r.SecurityOpt, Sysctls: r.Sysctls,
	}
	for _, m := range r.Mounts {
		sp.Mounts = append(sp.Mounts, boxapi.Mount{Volume: m.Volume, Source: m.Volume, Destination: m.Target, ReadOnly: m.ReadOnly})
	}
	return sp
}
