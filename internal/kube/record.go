package kube

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels and keys of the objects the engine makes.
const (
	labelManagedBy  = "app.kubernetes.io/managed-by"
	managedByValue  = "caddy-mcp-sandbox"
	labelContainer  = "mcp-sandbox.container" // on every object: the container it belongs to
	labelPod        = "mcp-sandbox.pod"       // on the pod only: what its NetworkPolicy selects
	labelVolumeName = "mcp-sandbox.volume-name"
	// annotationLabels holds, as JSON, the Docker labels whose key or value is no valid
	// Kubernetes label: they are kept, but no selector can find them.
	annotationLabels = "mcp-sandbox/docker-labels"
	recordKey        = "container.json"
	// recordMax bounds the record read back from a ConfigMap.
	recordMax = 256 << 10
	// containerName is the name of the one container of each pod.
	containerName = "sandbox"
)

// record is what a created container is: the settings ContainerCreate was given that
// the engine uses, kept as JSON in the ConfigMap named like the container.
type record struct {
	Image          string            `json:"image"`
	Entrypoint     []string          `json:"entrypoint,omitempty"`
	Cmd            []string          `json:"cmd,omitempty"`
	Env            []string          `json:"env,omitempty"`
	WorkingDir     string            `json:"working_dir,omitempty"`
	User           string            `json:"user,omitempty"`
	Hostname       string            `json:"hostname,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	Memory         int64             `json:"memory,omitempty"`
	MemorySwap     int64             `json:"memory_swap,omitempty"`
	NanoCPUs       int64             `json:"nano_cpus,omitempty"`
	PidsLimit      int64             `json:"pids_limit,omitempty"`
	Mounts         []volumeMount     `json:"mounts,omitempty"`
	NetworkMode    string            `json:"network_mode,omitempty"`
	ReadonlyRootfs bool              `json:"readonly_rootfs,omitempty"`
	CapDrop        []string          `json:"cap_drop,omitempty"`
	CapAdd         []string          `json:"cap_add,omitempty"`
	SecurityOpt    []string          `json:"security_opt,omitempty"`
	Sysctls        map[string]string `json:"sysctls,omitempty"`
	RestartPolicy  string            `json:"restart_policy,omitempty"`
	// Runtime is Docker's HostConfig.Runtime, which a pod takes as its RuntimeClass
	// (runtimeClassName), e.g. gvisor for a class whose handler is runsc.
	Runtime string `json:"runtime,omitempty"`
}

// volumeMount is a named volume (a claim) mounted at Target.
type volumeMount struct {
	Volume   string `json:"volume"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// validName reports why name cannot name a container, volume or pod ("" when it can).
func validName(what, name string) string {
	if dnsLabel.MatchString(name) {
		return ""
	}
	return fmt.Sprintf("%s name %q is not valid on a Kubernetes engine: it must be a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)", what, name)
}

// newRecord turns a box's spec into a record, refusing what a pod cannot do.
func newRecord(sp boxapi.BoxSpec) (record, error) {
	if sp.Image == "" {
		return record{}, fmt.Errorf("a container needs an image")
	}
	r := record{
		Image: sp.Image, Entrypoint: slices.Clone(sp.Entrypoint), Cmd: slices.Clone(sp.Cmd),
		Env: slices.Clone(sp.Env), WorkingDir: sp.WorkingDir, User: sp.User,
		Hostname: sp.Hostname, Labels: maps.Clone(sp.Labels),
	}
	if _, err := runAsUser(r.User); err != nil {
		return record{}, err
	}
	r.Memory, r.MemorySwap, r.NanoCPUs, r.PidsLimit = sp.Limits.Memory, sp.Limits.MemorySwap, sp.Limits.NanoCPUs, sp.Limits.PidsLimit
	r.NetworkMode = sp.NetworkMode
	switch m := r.NetworkMode; {
	case m == "host":
		return record{}, fmt.Errorf("network mode host is not supported on a Kubernetes engine: use the default network or none")
	case strings.HasPrefix(m, "container:"):
		return record{}, fmt.Errorf("network mode %s is not supported on a Kubernetes engine: each pod has its own network", m)
	}
	r.CapDrop = slices.Clone(sp.CapDrop)
	r.SecurityOpt = slices.Clone(sp.SecurityOpt)
	r.Sysctls = maps.Clone(sp.Sysctls)
	r.RestartPolicy = sp.RestartPolicy
	r.Runtime = sp.Runtime
	for _, m := range sp.Mounts {
		if m.Volume == "" {
			return record{}, fmt.Errorf("%s cannot be mounted at %s on a Kubernetes engine: only named volumes can (a host's directory is not supported)", m.Source, m.Destination)
		}
		r.Mounts = append(r.Mounts, volumeMount{Volume: m.Volume, Target: m.Destination, ReadOnly: m.ReadOnly})
	}
	for _, m := range r.Mounts {
		if why := validName("volume", m.Volume); why != "" {
			return record{}, fmt.Errorf("mount at %s: %s", m.Target, why)
		}
		if !strings.HasPrefix(m.Target, "/") {
			return record{}, fmt.Errorf("mount of volume %s: target %q is not an absolute path", m.Volume, m.Target)
		}
	}
	return r, nil
}

// runAsUser is the uid a record's user runs as: only root (or a numeric uid) can be
// expressed in a pod, which knows no user names.
func runAsUser(user string) (int64, error) {
	u, _, _ := strings.Cut(user, ":")
	switch u {
	case "", "root", "0":
		return 0, nil
	}
	var n int64
	if _, err := fmt.Sscanf(u, "%d", &n); err != nil || fmt.Sprint(n) != u || n < 0 {
		return 0, fmt.Errorf("user %q: a Kubernetes engine runs a container as a numeric uid; use root or a number", user)
	}
	return n, nil
}

// splitLabels divides Docker labels into those that are valid Kubernetes labels and
// those that are not (kept in an annotation).
func splitLabels(l map[string]string) (valid, other map[string]string) {
	valid, other = map[string]string{}, map[string]string{}
	for k, v := range l {
		if validLabel(k, v) {
			valid[k] = v
		} else {
			other[k] = v
		}
	}
	return valid, other
}

func validLabel(k, v string) bool {
	return len(validation.IsQualifiedName(k)) == 0 && len(validation.IsValidLabelValue(v)) == 0
}

// objectMeta is the metadata of an object the engine makes for container name:
// the container's valid labels, ours on top, the others in an annotation.
func objectMeta(objName, container string, labels map[string]string) metav1.ObjectMeta {
	return ownedMeta(objName, labelContainer, container, labels)
}

// ownedMeta is the metadata of an object of ours named objName: the Docker labels
// that are valid Kubernetes labels, ours on top (managed-by, and key = value), the
// others in an annotation.
func ownedMeta(objName, key, value string, labels map[string]string) metav1.ObjectMeta {
	valid, other := splitLabels(labels)
	valid[labelManagedBy] = managedByValue
	valid[key] = value
	m := metav1.ObjectMeta{Name: objName, Labels: valid}
	if len(other) > 0 {
		b, _ := json.Marshal(other)
		m.Annotations = map[string]string{annotationLabels: string(b)}
	}
	return m
}

// recordConfigMap is the ConfigMap that holds r for container name.
func recordConfigMap(name string, r record) (*v1.ConfigMap, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(b) > recordMax {
		return nil, fmt.Errorf("the container's settings take %d bytes, more than the %d a Kubernetes engine keeps", len(b), recordMax)
	}
	return &v1.ConfigMap{ObjectMeta: objectMeta(name, name, r.Labels), Data: map[string]string{recordKey: string(b)}}, nil
}

// readRecord reads the record of a ConfigMap, strictly: it is not ours when it does
// not carry our label and a well-formed record.
func readRecord(cm *v1.ConfigMap) (record, error) {
	var r record
	if cm.Labels[labelManagedBy] != managedByValue {
		return r, fmt.Errorf("config map %s is not managed by caddy-mcp-sandbox (label %s=%s missing); remove or rename it", cm.Name, labelManagedBy, managedByValue)
	}
	s, ok := cm.Data[recordKey]
	if !ok || len(s) > recordMax {
		return r, fmt.Errorf("config map %s holds no container record (%s missing or above %d bytes); remove it to let the container be made again", cm.Name, recordKey, recordMax)
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	err := dec.Decode(&r)
	if err == nil && dec.More() {
		err = fmt.Errorf("data after the record")
	}
	if err != nil {
		return r, fmt.Errorf("config map %s: reading its container record: %w; remove it to let the container be made again", cm.Name, err)
	}
	if r.Image == "" {
		return r, fmt.Errorf("config map %s: its container record names no image; remove it to let the container be made again", cm.Name)
	}
	return r, nil
}
