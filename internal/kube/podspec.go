package kube

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// terminationGrace is the pods' terminationGracePeriodSeconds: the sandbox's main
// process exits on TERM at once.
const terminationGrace = 2

// safeSysctls are the sysctls the kubelet allows without configuration: a pod setting
// another one would never start, so others are left out (the container runs with the
// node's defaults).
var safeSysctls = map[string]bool{
	"kernel.shm_rmid_forced":              true,
	"net.ipv4.ip_local_port_range":        true,
	"net.ipv4.tcp_syncookies":             true,
	"net.ipv4.ping_group_range":           true,
	"net.ipv4.ip_unprivileged_port_start": true,
}

// networkPolicyName is the name of the deny-all policy of a container without network.
func networkPolicyName(name string) string { return name + "-no-network" }

// podFor builds the pod that runs container name from its record and the engine's
// settings (the pull policy, the ephemeral-storage limit).
func podFor(name string, r record, cfg Config) (*v1.Pod, error) {
	uid, err := runAsUser(r.User)
	if err != nil {
		return nil, err
	}
	pullPolicy := cfg.PullPolicy
	if pullPolicy == "" {
		pullPolicy = string(v1.PullIfNotPresent)
	}
	c := v1.Container{
		Name:            containerName,
		Image:           r.Image,
		Command:         slices.Clone(r.Entrypoint),
		Args:            slices.Clone(r.Cmd),
		WorkingDir:      r.WorkingDir,
		ImagePullPolicy: v1.PullPolicy(pullPolicy),
		Env:             envVars(r.Env),
		SecurityContext: containerSecurity(r, uid),
	}
	if res := resources(r.Memory, r.NanoCPUs, cfg.EphemeralStorage); len(res) > 0 {
		c.Resources = v1.ResourceRequirements{Limits: res, Requests: res.DeepCopy()}
	}
	var vols []v1.Volume
	for i, m := range r.Mounts {
		vn := fmt.Sprintf("volume-%d", i)
		vols = append(vols, v1.Volume{Name: vn, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: m.Volume, ReadOnly: m.ReadOnly},
		}})
		c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: vn, MountPath: m.Target, ReadOnly: m.ReadOnly})
	}
	grace := int64(terminationGrace)
	no := false
	meta := objectMeta(name, name, r.Labels)
	meta.Labels[labelPod] = name
	p := &v1.Pod{
		ObjectMeta: meta,
		Spec: v1.PodSpec{
			Containers:                    []v1.Container{c},
			Volumes:                       vols,
			RestartPolicy:                 v1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
		},
	}
	if dnsLabel.MatchString(r.Hostname) {
		p.Spec.Hostname = r.Hostname
	}
	if r.Runtime != "" {
		rc := r.Runtime
		p.Spec.RuntimeClassName = &rc
	}
	if sc := podSysctls(r.Sysctls); len(sc) > 0 {
		p.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: sc}
	}
	return p, nil
}

// envVars turns Docker's KEY=VALUE list into a pod's; an entry without "=" (Docker
// would copy it from the client's environment) is left out.
func envVars(env []string) []v1.EnvVar {
	var out []v1.EnvVar
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		out = append(out, v1.EnvVar{Name: k, Value: v})
	}
	return out
}

// resources are the limits (and requests: the same, so the pod gets what the person's
// limits say) for memory in bytes, CPUs in billionths and ephemeral storage in bytes.
// A namespace whose ResourceQuota covers a resource admits only pods that ask for it.
func resources(memory, nanoCPUs, ephemeral int64) v1.ResourceList {
	res := v1.ResourceList{}
	if memory > 0 {
		res[v1.ResourceMemory] = *resource.NewQuantity(memory, resource.BinarySI)
	}
	if ephemeral > 0 {
		res[v1.ResourceEphemeralStorage] = *resource.NewQuantity(ephemeral, resource.BinarySI)
	}
	if nanoCPUs > 0 {
		milli := max(nanoCPUs/1e6, 1)
		res[v1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
	}
	return res
}

// containerSecurity is the container's security context: root as on Docker, never
// privileged, the record's capabilities dropped and added, the runtime's default
// seccomp profile, no privilege escalation when Docker's no-new-privileges is set.
func containerSecurity(r record, uid int64) *v1.SecurityContext {
	no := false
	sc := &v1.SecurityContext{
		Privileged:     &no,
		RunAsNonRoot:   &no,
		RunAsUser:      &uid,
		SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault},
	}
	if r.ReadonlyRootfs {
		yes := true
		sc.ReadOnlyRootFilesystem = &yes
	}
	if slices.ContainsFunc(r.SecurityOpt, func(o string) bool {
		return o == "no-new-privileges" || o == "no-new-privileges:true" || o == "no-new-privileges=true"
	}) {
		sc.AllowPrivilegeEscalation = &no
	}
	caps := &v1.Capabilities{}
	for _, c := range r.CapDrop {
		caps.Drop = append(caps.Drop, v1.Capability(capName(c)))
	}
	for _, c := range r.CapAdd {
		caps.Add = append(caps.Add, v1.Capability(capName(c)))
	}
	if len(caps.Drop)+len(caps.Add) > 0 {
		sc.Capabilities = caps
	}
	return sc
}

// capName is a capability as a pod names it: upper case, without CAP_.
func capName(c string) string { return strings.TrimPrefix(strings.ToUpper(c), "CAP_") }

// podSysctls are the record's sysctls the kubelet allows, in a stable order.
func podSysctls(s map[string]string) []v1.Sysctl {
	var out []v1.Sysctl
	for k, v := range s {
		if safeSysctls[k] {
			out = append(out, v1.Sysctl{Name: k, Value: v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// denyAllPolicy is the NetworkPolicy of a container without network: it selects the
// pod and allows nothing in either direction. Only a network plugin that enforces
// NetworkPolicies applies it.
func denyAllPolicy(name string, labels map[string]string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: objectMeta(networkPolicyName(name), name, labels),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelPod: name}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// noIngressPolicy is the NetworkPolicy of a container on a named network, which
// Docker makes with inter-container traffic off: nothing may connect to the pod (the
// engine reaches it through the API server only); its own connections out are left.
func noIngressPolicy(name string, labels map[string]string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: objectMeta(name+"-no-ingress", name, labels),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelPod: name}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
}

// policyFor is the NetworkPolicy a container's network mode asks for (nil: none):
// "none" denies all traffic; a named network, which the sandbox package makes
// without inter-container traffic, denies connections to the pod; Docker's bridge
// and default modes allow everything.
func policyFor(name string, r record) *networkingv1.NetworkPolicy {
	switch r.NetworkMode {
	case "none":
		return denyAllPolicy(name, r.Labels)
	case "", "bridge", "default":
		return nil
	}
	return noIngressPolicy(name, r.Labels)
}

// policyNames are the names of the policies a container may have.
func policyNames(name string) []string {
	return []string{networkPolicyName(name), name + "-no-ingress"}
}
